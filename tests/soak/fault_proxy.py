# tests/soak/fault_proxy.py: a fault-injecting TCP proxy on loopback for the soak (soak.py): HTTP-aware
# for nginx and RGW (faults per request: reset, 500/503, 429 + Retry-After, stall mid-body, short body)
# and TCP-level for Redis (faults per turn of RESP commands: reset, stall, short reply). Runs its asyncio loop on
# a thread of its own; counts connections (opened/open) and requests and faults per kind.
import asyncio
import random
import socket
import struct
import threading
from collections import Counter

HTTP_FAULTS = ("reset", "500", "503", "429", "stall", "short")
REDIS_FAULTS = ("reset", "stall", "short")
CHUNK = 64 * 1024


def _reset(writer):
    """Closes with a TCP RST (SO_LINGER 0) instead of a FIN."""
    sock = writer.get_extra_info("socket")
    try:
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    writer.transport.abort()


def _close(*writers):
    for w in writers:
        if w is not None:
            w.close()


class FaultProxy:
    """One listener on 127.0.0.1:<ephemeral> forwarding to 127.0.0.1:upstream_port."""

    def __init__(self, loop, kind, upstream_port, rate, stall_s, seed):
        self.loop, self.kind, self.upstream_port = loop, kind, upstream_port
        self.rate, self.stall_s = rate, stall_s
        self.rng = random.Random(seed)
        self.faults = Counter()
        self.requests = self.opened = self.open = 0
        self.port = None

    async def start(self):
        handler = self._http if self.kind == "http" else self._redis
        self.server = await asyncio.start_server(self._wrap(handler), "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]

    def _wrap(self, handler):
        async def run(creader, cwriter):
            self.opened += 1
            self.open += 1
            swriter = None
            try:
                sreader, swriter = await asyncio.open_connection("127.0.0.1", self.upstream_port)
                await handler(creader, cwriter, sreader, swriter)
            except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, OSError, ValueError):
                pass
            finally:
                _close(cwriter, swriter)
                self.open -= 1
        return run

    def _pick(self, kinds):
        if self.rate <= 0 or self.rng.random() >= self.rate:
            return None
        fault = self.rng.choice(kinds)
        self.faults[fault] += 1
        return fault

    # ---- HTTP: request by request on a keep-alive connection ----
    async def _http(self, creader, cwriter, sreader, swriter):
        while True:
            try:
                head = await creader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError:
                return
            self.requests += 1
            method = head.split(b" ", 1)[0].upper()
            fields = _headers(head)
            fault = self._pick(HTTP_FAULTS)
            if fault == "reset":
                _reset(cwriter)
                return
            if fault in ("500", "503", "429"):
                await _error_reply(cwriter, fault)
                return
            swriter.write(head)
            await _copy_body(creader, swriter, fields)
            if not await self._http_response(sreader, cwriter, method, fault):
                return

    async def _http_response(self, sreader, cwriter, method, fault):
        """Forwards one response (interim 1xx first); False when the connection must end."""
        while True:
            rhead = await sreader.readuntil(b"\r\n\r\n")
            status = int(rhead.split(b" ", 2)[1])
            if 100 <= status < 200:
                cwriter.write(rhead)
                continue
            break
        fields = _headers(rhead)
        no_body = method == b"HEAD" or status in (204, 304)
        length = 0 if no_body else int(fields.get(b"content-length", b"-1"))
        if fault in ("stall", "short"):
            if length > 0:  # the head and part of the body, then silence or a close
                cwriter.write(rhead)
                cwriter.write(await sreader.readexactly(self.rng.randrange(0, length)))
            else:  # no body to cut (a PUT's answer, chunked): cut the head
                cwriter.write(rhead[: len(rhead) // 2])
            await cwriter.drain()
            if fault == "stall":
                await asyncio.sleep(self.stall_s)
            return False
        cwriter.write(rhead)
        if no_body:
            pass
        elif fields.get(b"transfer-encoding", b"").lower() == b"chunked":
            await _copy_chunked(sreader, cwriter)
        elif length >= 0:
            await _copy_exact(sreader, cwriter, length)
        else:
            while data := await sreader.read(CHUNK):
                cwriter.write(data)
                await cwriter.drain()
            return False
        await cwriter.drain()
        return fields.get(b"connection", b"").lower() != b"close"

    # ---- Redis: TCP level, a fault decided per client write ----
    async def _redis(self, creader, cwriter, sreader, swriter):
        # A fault is decided once per turn (the commands a client sends before it reads a reply),
        # the Redis counterpart of one HTTP request: a pipelined multi-key read is one turn.
        state = {"fault": None, "turn": True}

        async def replies():
            while data := await sreader.read(CHUNK):
                fault = state["fault"]
                if fault == "short":
                    cwriter.write(data[: len(data) // 2])
                    await cwriter.drain()
                    _close(cwriter)
                    return
                if fault == "stall":
                    return
                state["turn"] = True
                cwriter.write(data)
                await cwriter.drain()

        pump = asyncio.ensure_future(replies())
        try:
            while True:
                try:
                    command = await _read_resp_command(creader, swriter)
                except asyncio.IncompleteReadError:
                    return
                fault = state["fault"]
                if fault is None and state["turn"]:
                    state["turn"] = False
                    self.requests += 1
                    fault = self._pick(REDIS_FAULTS)
                if fault == "reset":
                    _reset(cwriter)
                    return
                state["fault"] = fault
                swriter.write(command)
                await swriter.drain()
                if fault == "stall":
                    await asyncio.sleep(self.stall_s)
                    return
        finally:
            pump.cancel()


async def _read_resp_command(reader, writer):
    """One RESP command (an array of bulk strings, as hiredis sends) from the client: its head and
    small arguments are returned, large arguments are streamed to writer on the way (a fault for
    the command is then decided after its big value went through, which is fine for a soak)."""
    head = await reader.readuntil(b"\r\n")
    if not head.startswith(b"*"):
        return head  # inline command
    out = bytearray(head)
    for _ in range(int(head[1:-2])):
        line = await reader.readuntil(b"\r\n")
        out += line
        n = int(line[1:-2]) + 2
        if n > CHUNK:
            writer.write(bytes(out))
            out.clear()
            await _copy_exact(reader, writer, n)
        else:
            out += await reader.readexactly(n)
    return bytes(out)


def _headers(head):
    fields = {}
    for line in head.split(b"\r\n")[1:]:
        if b":" in line:
            k, v = line.split(b":", 1)
            fields[k.strip().lower()] = v.strip()
    return fields


async def _copy_exact(reader, writer, n):
    while n > 0:
        data = await reader.read(min(n, CHUNK))
        if not data:
            raise asyncio.IncompleteReadError(b"", n)
        writer.write(data)
        await writer.drain()
        n -= len(data)


async def _copy_body(creader, swriter, fields):
    if fields.get(b"transfer-encoding", b"").lower() == b"chunked":
        await _copy_chunked(creader, swriter)
    else:
        await _copy_exact(creader, swriter, int(fields.get(b"content-length", b"0")))
    await swriter.drain()


async def _copy_chunked(reader, writer):
    while True:
        line = await reader.readuntil(b"\r\n")
        writer.write(line)
        size = int(line.split(b";")[0], 16)
        if size == 0:  # trailers up to the empty line
            while (trailer := await reader.readuntil(b"\r\n")) != b"\r\n":
                writer.write(trailer)
            writer.write(b"\r\n")
            return
        await _copy_exact(reader, writer, size + 2)


async def _error_reply(writer, code):
    reason = {"500": "Internal Server Error", "503": "Service Unavailable", "429": "Too Many Requests"}[code]
    body = f"<Error><Code>Injected{code}</Code></Error>".encode()
    extra = "Retry-After: 1\r\n" if code == "429" else ""
    writer.write(f"HTTP/1.1 {code} {reason}\r\nContent-Length: {len(body)}\r\n{extra}Connection: close\r\n\r\n".encode() + body)
    await writer.drain()


class ProxySet:
    """Proxies on a background event loop; add() returns the started proxy."""

    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.proxies = []

    def add(self, kind, upstream_port, rate, stall_s, seed):
        p = FaultProxy(self.loop, kind, upstream_port, rate, stall_s, seed)
        asyncio.run_coroutine_threadsafe(p.start(), self.loop).result(10)
        self.proxies.append(p)
        return p

    def stop(self):
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
