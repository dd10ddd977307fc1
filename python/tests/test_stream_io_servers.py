"""tensorizer.stream_io against real servers started on loopback by scripts/servers/*.sh: nginx over
HTTP and HTTPS (ranges, redirects, custom headers, CAs, the node-local cache, torch_compat through a
stream), a silent server for the time limits, and Redis virtual files; skipped when a server
cannot start or tensorizer._C is not built. S3 (Ceph RGW): test_stream_io_s3.py."""

import http.server
import io
import shutil
import socket
import threading
import time
from pathlib import Path

import pytest

from tensorizer import stream_io
from tensorizer.stream_io import CAInfo, CURLStreamFile, RedisStreamFile, open_stream

from stream_servers import DATA, HTTP_PORT, HTTPS_PORT, REDIS_PORT, native, start_server


@pytest.fixture(scope="session")
def nginx(server_root):
    native()
    stop = start_server("nginx.sh", server_root)
    www = server_root / "nginx" / "www"
    (www / "data.bin").write_bytes(DATA)
    (www / "name with spaces.bin").write_bytes(DATA[::-1])
    (www / "empty.bin").write_bytes(b"")
    yield {"http": f"http://127.0.0.1:{HTTP_PORT}", "https": f"https://127.0.0.1:{HTTPS_PORT}",
           "localhost": f"https://localhost:{HTTPS_PORT}", "ca": str(server_root / "ca" / "ca.pem"), "www": www}
    stop()


@pytest.fixture(scope="session")
def redirector(nginx):
    """A tiny HTTP server answering every request with 302 to the same path on nginx."""

    class Redirect(http.server.BaseHTTPRequestHandler):
        def do_HEAD(self):
            self.send_response(302)
            self.send_header("Location", nginx["http"] + self.path)
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_GET = do_HEAD

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Redirect)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_http_custom_headers_are_sent():
    """CURLStreamFile(headers=...) adds the headers to every request (HEAD and ranged GETs)."""
    seen = []

    class Echo(http.server.BaseHTTPRequestHandler):
        def _reply(self, body):
            seen.append((self.command, self.headers.get("X-Tensorizer-Test")))
            self.send_response(206 if self.headers.get("Range") else 200)
            self.send_header("Accept-Ranges", "bytes")
            self.send_header("Content-Length", str(len(body)))
            if self.headers.get("Range"):
                self.send_header("Content-Range", f"bytes 0-{len(body) - 1}/{len(DATA[:64])}")
            self.end_headers()
            return body

        def do_HEAD(self):
            self._reply(DATA[:64])

        def do_GET(self):
            self.wfile.write(self._reply(DATA[:64]))

        def log_message(self, *args):
            pass

    native()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/x.bin"
        with CURLStreamFile(url, headers={"X-Tensorizer-Test": "yes"}) as f:
            assert f.read() == DATA[:64]
        assert seen and all(value == "yes" for _, value in seen), seen
        assert "GET" in {method for method, _ in seen}
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def silent_server():
    """A loopback TCP server that accepts connections and reads what is sent, but never answers
    (an HTTP or Redis server that hangs). Yields its port."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    held, stop = [], threading.Event()

    def serve():
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            held.append(conn)  # kept open, never written to

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield listener.getsockname()[1]
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    listener.close()


# Short limits so the tests take seconds; the defaults are measured by hand (docs/cli.md).
QUICK_TIMEOUTS = {"connect_timeout": 1, "first_byte_timeout": 1, "stall_timeout": 1, "give_up_after": 2.5}


@pytest.mark.parametrize("scheme", ["http", "redis"])
def test_a_silent_server_fails_with_a_timeout_naming_the_limit(silent_server, scheme):
    native()
    uri = f"{scheme}://127.0.0.1:{silent_server}/x.tensors"
    started = time.monotonic()
    with pytest.raises(TimeoutError) as raised:
        open_stream(uri, timeouts=QUICK_TIMEOUTS)
    assert time.monotonic() - started < 60  # a hang guard only: the machine is shared
    message = str(raised.value)
    assert message.startswith("Failed to open stream:"), message
    assert f"127.0.0.1:{silent_server}" in message, message
    assert "give-up limit (2.5 s lost to failed attempts) reached" in message, message
    assert "failed after" in message and "attempts" in message, message


def test_timeouts_are_checked():
    native()
    with pytest.raises(TypeError, match="unknown timeouts"):
        open_stream("http://127.0.0.1:9/x", timeouts={"read_timeout": 1})
    with pytest.raises(ValueError, match="stall_timeout"):
        open_stream("http://127.0.0.1:9/x", timeouts={"stall_timeout": 0})
    with pytest.raises(ValueError, match="deadline"):
        open_stream("http://127.0.0.1:9/x", timeouts={"deadline": -1})


def test_http_reads_ranges_and_seeks(nginx):
    with open_stream(nginx["http"] + "/data.bin") as f:
        assert isinstance(f, CURLStreamFile) and f.size() == len(DATA)
        assert f.read(10) == DATA[:10]
        f.seek(5000)
        assert f.read(100) == DATA[5000:5100]
        f.seek(2)  # backwards: no new connection setup needed
        assert f.read(3) == DATA[2:5]
        f.seek(-4, io.SEEK_END)
        assert f.read() == b"tail"
    with open_stream(nginx["http"] + "/data.bin", begin=300, end=400) as f:
        assert f.read() == DATA[300:400]
        assert f.read(1) == b""
    with CURLStreamFile(nginx["http"] + "/data.bin", 10, 20) as f:
        buf = bytearray(50)
        assert f.readinto(buf) == 10 and bytes(buf[:10]) == DATA[10:20]


def test_http_large_reads_go_straight_into_the_buffer(nginx):
    with open_stream(nginx["http"] + "/data.bin", buffer_size=1024) as f:
        buf = bytearray(len(DATA))
        assert f.readinto(buf) == len(DATA) and bytes(buf) == DATA
        assert f.read_operations == 1


def test_deserializer_reads_through_an_https_stream(nginx):
    import torch
    from tensorizer import TensorDeserializer, TensorSerializer

    tensors = {"a": torch.arange(1000, dtype=torch.float32), "b.c": torch.ones(3, 4, dtype=torch.bfloat16)}
    serializer = TensorSerializer(str(nginx["www"] / "model.tensors"))
    serializer.write_state_dict(tensors)
    serializer.close()
    stream = open_stream(nginx["https"] + "/model.tensors", certificate_handling=CAInfo(cacert=nginx["ca"]))
    with TensorDeserializer(stream, device="cpu") as d:
        assert d.keys() == tensors.keys()
        assert all(torch.equal(d[k], v) for k, v in tensors.items())


def test_the_node_local_cache_keeps_a_copy_and_reads_it_next_time(nginx, tmp_path, monkeypatch):
    """stream_io.cache_dir (or TENSORIZER_CACHE_DIR): the first deserialization over HTTP fills the
    cache, the next one reads the copy; a changed object is fetched again."""
    import torch
    from tensorizer import TensorDeserializer, TensorSerializer

    def write(path, tensors):
        serializer = TensorSerializer(str(path))
        serializer.write_state_dict(tensors)
        serializer.close()

    def load(url):
        stream = open_stream(url)
        source = stream._tz_source  # the deserializer takes it over (and drops it at close)
        with TensorDeserializer(stream, device="cpu") as d:
            got = {k: v.clone() for k, v in d.items()}
        return got, source.cache_status

    v1 = {"w": torch.arange(300_000, dtype=torch.float32), "b": torch.ones(7, dtype=torch.float16)}
    write(nginx["www"] / "cached.tensors", v1)
    url = nginx["http"] + "/cached.tensors"
    monkeypatch.setattr(stream_io, "cache_dir", str(tmp_path / "cache"))
    got, status = load(url)
    assert status.startswith("filled") and all(torch.equal(got[k], v) for k, v in v1.items()), status
    copy = status.split(": ", 1)[1]
    assert Path(copy).read_bytes() == (nginx["www"] / "cached.tensors").read_bytes()
    got, status = load(url)
    assert status == "hit: " + copy and all(torch.equal(got[k], v) for k, v in v1.items())

    monkeypatch.setattr(stream_io, "cache_dir", None)
    monkeypatch.setenv("TENSORIZER_CACHE_DIR", str(tmp_path / "cache"))
    v2 = {"w": torch.arange(200_000, dtype=torch.float32) * 2}  # another size: nginx's ETag is mtime + size
    write(nginx["www"] / "cached.tensors", v2)
    got, status = load(url)
    assert status.startswith("filled") and status.split(": ", 1)[1] != copy
    assert got.keys() == v2.keys() and torch.equal(got["w"], v2["w"])
    assert not Path(copy).exists()
    monkeypatch.delenv("TENSORIZER_CACHE_DIR")
    assert load(url)[1] == ""


def test_torch_load_and_torch_compat_through_an_http_stream(nginx):
    import torch
    from tensorizer.torch_compat import tensorizer_loading, tensorizer_saving

    obj = {"w": torch.randn(64, 8), "n": 7}
    torch.save(obj, str(nginx["www"] / "plain.pt"))
    with open_stream(nginx["http"] + "/plain.pt") as f:
        got = torch.load(f, weights_only=True)
    assert torch.equal(got["w"], obj["w"]) and got["n"] == 7
    with tensorizer_saving():
        torch.save(obj, str(nginx["www"] / "tz.pt"))
    # The stream's name is its URL, so the sidecar is found at <url>.tensors over HTTP too.
    with tensorizer_loading(device="cpu"), open_stream(nginx["http"] + "/tz.pt") as f:
        got = torch.load(f)
    assert torch.equal(got["w"], obj["w"]) and got["n"] == 7


def test_http_names_with_spaces_work(nginx):
    with open_stream(nginx["http"] + "/name with spaces.bin") as f:
        assert f.read() == DATA[::-1]


def test_http_missing_objects_fail_to_open(nginx):
    with pytest.raises(OSError, match="Failed to open stream") as e:
        open_stream(nginx["http"] + "/missing.bin")
    assert isinstance(e.value, FileNotFoundError) or "404" in str(e.value)


def test_http_redirects_are_followed(nginx, redirector):
    with open_stream(redirector + "/data.bin", begin=8, end=16) as f:
        assert f.read() == DATA[8:16]


def test_https_with_the_test_ca_and_insecure(nginx):
    with open_stream(nginx["https"] + "/data.bin", certificate_handling=CAInfo(cacert=nginx["ca"])) as f:
        assert f.read(6) == DATA[:6]
    with open_stream(nginx["localhost"] + "/data.bin", certificate_handling=CAInfo(allow_untrusted=True)) as f:
        assert f.read(6) == DATA[:6]
    capath = Path(nginx["www"]).parent / "capath"
    capath.mkdir(exist_ok=True)
    shutil.copy(nginx["ca"], capath / "test-ca.pem")
    with open_stream(nginx["https"] + "/data.bin", certificate_handling=CAInfo(capath=str(capath))) as f:
        assert f.read(6) == DATA[:6]


def test_https_rejects_an_unknown_ca_by_default(nginx, monkeypatch):
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    with pytest.raises(OSError, match="Failed to open stream"):
        open_stream(nginx["https"] + "/data.bin")


@pytest.fixture(scope="session")
def redis_server(server_root):
    native()
    redis = pytest.importorskip("redis")
    stop = start_server("redis.sh", server_root)
    client = redis.Redis(host="127.0.0.1", port=REDIS_PORT)
    # A virtual file split into three keys, one with spaces and quotes in its name (format/FORMAT.md §13).
    pieces = [(b"header", DATA[:1000]), (b'a name with "quotes"', DATA[1000:6000]), (b"[0]", DATA[6000:])]
    offset = 0
    for name, value in pieces:
        client.set(b"vf:" + name + b":" + str(offset).encode(), value)
        offset += len(value)
    client.set(b"other:x:0", b"unrelated")
    yield f"redis://127.0.0.1:{REDIS_PORT}/vf"
    client.close()
    stop()


def test_redis_virtual_files_read_across_keys(redis_server):
    with open_stream(redis_server) as f:
        assert isinstance(f, RedisStreamFile) and f.size() == len(DATA)
        assert f.read(10) == DATA[:10]
        f.seek(990)
        assert f.read(20) == DATA[990:1010]  # crosses into the key whose name has spaces and quotes
        f.seek(0)
        assert f.read() == DATA
    with RedisStreamFile(redis_server, begin=5990, end=6010) as f:
        assert f.read() == DATA[5990:6010]


def test_redis_missing_prefix_fails_to_open(redis_server):
    with pytest.raises(OSError, match="Failed to open stream"):
        open_stream(redis_server + "-nothing-here")
