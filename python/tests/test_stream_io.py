"""tensorizer.stream_io (format/FORMAT.md §12): open_stream's dispatch, local files, the remote stream
class over a byte source, CAInfo, S3 uploads on close; and real servers (nginx over HTTP/HTTPS,
Redis, Ceph RGW for S3) started on loopback by scripts/servers/*.sh, skipped when they cannot start
or when tensorizer._C is not built."""

import http.server
import io
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
from pathlib import Path

import pytest

import servers

from tensorizer import stream_io
from tensorizer.stream_io import CAInfo, CURLStreamFile, RedisStreamFile, open_stream

PORT_BASE = 23600  # nginx 23680 / 24043, redis 23979, RGW 24080-24082; CTest uses 18000
HTTP_PORT, HTTPS_PORT, REDIS_PORT, S3_PORT = PORT_BASE + 80, PORT_BASE + 443, PORT_BASE + 379, PORT_BASE + 480
S3_KEY, S3_SECRET, S3_BUCKET = "TESTKEY", "TESTSECRET", "tz-test"
DATA = bytes(range(256)) * 40 + b"tail"  # 10244 bytes


class FakeSource:
    """A byte source with the native Source's interface (size, read_into, name), counting reads."""

    def __init__(self, data: bytes):
        self.data, self.name, self.reads = data, "fake://data", []

    def size(self):
        return len(self.data)

    def read_into(self, offset, buf):
        view = memoryview(buf)
        if offset + len(view) > len(self.data):
            raise ValueError("read past the end")
        view[:] = self.data[offset:offset + len(view)]
        self.reads.append((offset, len(view)))


def fake_stream(data=DATA, **kwargs):
    source = FakeSource(data)
    return stream_io._RemoteStream(source, **kwargs), source


# -- the remote stream over a byte source -----------------------------------------------------------


def test_reads_seeks_and_tells_like_a_file():
    s, _ = fake_stream()
    assert s.readable() and s.seekable() and not s.writable()
    assert s.read(10) == DATA[:10] and s.tell() == 10
    assert s.seek(100) == 100 and s.read(5) == DATA[100:105]
    assert s.seek(-5, io.SEEK_CUR) == 100 and s.read(5) == DATA[100:105]
    assert s.seek(-4, io.SEEK_END) == len(DATA) - 4 and s.read() == b"tail"
    assert s.read(10) == b"" and s.read() == b""
    s.seek(3)
    assert s.read() == DATA[3:]
    with pytest.raises(ValueError):
        s.seek(-1)


def test_readinto_stops_at_the_end():
    s, _ = fake_stream(begin=len(DATA) - 6)
    buf = bytearray(10)
    assert s.readinto(buf) == 6 and bytes(buf[:6]) == DATA[-6:]
    assert s.readinto(buf) == 0


def test_begin_and_end_form_a_window_in_object_offsets():
    s, _ = fake_stream(begin=1000, end=1100)
    assert s.tell() == 1000
    assert s.read(30) == DATA[1000:1030]
    assert s.read() == DATA[1030:1100]
    assert s.read(1) == b""
    assert s.seek(0, io.SEEK_END) == 1100
    s.seek(0)  # positions are offsets in the whole object, so earlier bytes stay reachable
    assert s.read(4) == DATA[:4]


def test_end_beyond_the_object_is_clamped():
    s, _ = fake_stream(begin=10, end=10**9)
    assert s.read() == DATA[10:]


@pytest.mark.parametrize("begin,end", [(-1, None), (5, 5), (10, 2)])
def test_invalid_ranges_raise_value_error(begin, end):
    with pytest.raises(ValueError):
        fake_stream(begin=begin, end=end)
    with pytest.raises(ValueError):
        CURLStreamFile("http://127.0.0.1:9/x", begin=begin, end=end)  # checked before any request
    with pytest.raises(ValueError):
        RedisStreamFile("redis://127.0.0.1:9/x", begin=begin, end=end)


def test_small_reads_share_one_read_ahead_and_large_reads_go_direct():
    s, source = fake_stream(buffer_size=4096)
    chunks = [s.read(100) for _ in range(40)]
    assert b"".join(chunks) == DATA[:4000]
    assert source.reads == [(0, 4096)]
    big = s.read(5000)
    assert big == DATA[4000:9000]
    # 96 bytes came from the buffer, the rest in one read straight into the result.
    assert source.reads == [(0, 4096), (4096, 4904)]
    assert s.read_operations == 2 and s.bytes_read == 9000


def test_unbuffered_streams_read_exactly_what_is_asked():
    s, source = fake_stream(buffer_size=0)
    s.read(3)
    s.read(5)
    assert source.reads == [(0, 3), (3, 5)]


def test_fork_reads_the_same_source_independently():
    s, source = fake_stream()
    s.read(7)
    other = s._fork(50, 60)
    assert other._tz_source is source and other.read() == DATA[50:60] and s.read(3) == DATA[7:10]


def test_closed_streams_refuse_io_and_drop_the_source():
    s, _ = fake_stream()
    s.close()
    assert s.closed and s._tz_source is None
    for op in (lambda: s.read(1), lambda: s.seek(0), lambda: s.tell(), lambda: s.readinto(bytearray(1))):
        with pytest.raises(ValueError):
            op()


def test_fileno_is_unsupported():
    s, _ = fake_stream()
    with pytest.raises(io.UnsupportedOperation):
        s.fileno()


def test_read_errors_become_os_errors():
    class Failing(FakeSource):
        def read_into(self, offset, buf):
            raise ConnectionResetError("peer went away")

    s = stream_io._RemoteStream(Failing(DATA), buffer_size=0)
    with pytest.raises(ConnectionResetError, match="Failed to read 4 bytes at offset 0.*peer went away"):
        s.read(4)


def test_streams_work_with_io_helpers():
    s, _ = fake_stream(b"line one\nline two\n")
    assert s.readline() == b"line one\n"
    assert list(s) == [b"line two\n"]


# -- URL handling and CAInfo ------------------------------------------------------------------------


def test_urls_are_percent_encoded_once():
    q = stream_io._quote_url
    assert q("http://h:1/a b/c d.tensors") == "http://h:1/a%20b/c%20d.tensors"
    assert q("http://h/already%20quoted?x=1&y=a%2Fb") == "http://h/already%20quoted?x=1&y=a%2Fb"
    assert q("https://h/ünï") == "https://h/%C3%BCn%C3%AF"


def test_cainfo_needs_exactly_one_choice(tmp_path):
    for kwargs in ({}, {"cacert": "a", "allow_untrusted": True}, {"cacert": "a", "capath": "b"}):
        with pytest.raises(ValueError, match="Exactly one"):
            CAInfo(**kwargs)
    with pytest.raises(ValueError, match="cacert"):
        CAInfo(cacert=str(tmp_path / "missing.pem"))
    with pytest.raises(ValueError, match="capath"):
        CAInfo(capath=str(tmp_path / "missing"))
    with pytest.raises(TypeError):
        stream_io._tls_options("insecure")


def test_cainfo_maps_to_native_options(tmp_path):
    pem = tmp_path / "ca.pem"
    pem.write_text("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")
    assert CAInfo(cacert=str(pem)).remote_options() == {"ca_file": str(pem)}
    assert CAInfo(cacert=str(pem)).curl_flags == ("--cacert", str(pem))
    assert CAInfo(allow_untrusted=True).remote_options() == {"insecure": True}
    assert CAInfo(allow_untrusted=True) == CAInfo(allow_untrusted=True)
    assert len({CAInfo(allow_untrusted=True), CAInfo(allow_untrusted=True)}) == 1


def test_capath_becomes_a_bundle_of_its_certificates(tmp_path):
    certs = tmp_path / "certs"
    certs.mkdir()
    (certs / "one.pem").write_text("-----BEGIN CERTIFICATE-----\nONE\n-----END CERTIFICATE-----\n")
    (certs / "two.crt").write_text("-----BEGIN CERTIFICATE-----\nTWO\n-----END CERTIFICATE-----")
    os.symlink(certs / "one.pem", certs / "abcdef01.0")  # c_rehash's hash link: not bundled twice
    (certs / "README").write_text("not a certificate")
    info = CAInfo(capath=str(certs))
    bundle = info.remote_options()["ca_file"]
    text = Path(bundle).read_text()
    assert text.count("BEGIN CERTIFICATE") == 2 and "ONE" in text and "TWO" in text
    assert info.remote_options()["ca_file"] == bundle  # made once
    del info
    import gc

    gc.collect()
    assert not os.path.exists(bundle)


# -- open_stream: local files and dispatch ------------------------------------------------------------


def test_local_writes_create_parent_directories_and_reads_start_at_begin(tmp_path):
    path = tmp_path / "a" / "b" / "file.bin"
    with open_stream(str(path), "wb") as f:
        f.write(DATA)
    with open_stream(path, "rb", begin=100) as f:
        assert f.tell() == 100 and f.read(4) == DATA[100:104]
    with open_stream(str(path), "ab+") as f:  # as tensorizer: positioned at 0 for reading
        assert f.read(2) == DATA[:2]


def test_text_modes_are_refused(tmp_path):
    with pytest.raises(ValueError, match="binary"):
        open_stream(str(tmp_path / "t.txt"), "w")


def test_pathlike_arguments_are_always_local(tmp_path, monkeypatch):
    class Weird(os.PathLike):
        def __fspath__(self):
            return "s3://bucket/key"

    monkeypatch.chdir(tmp_path)
    with open_stream(Weird(), "wb") as f:
        f.write(b"x")
    assert (tmp_path / "s3:" / "bucket" / "key").read_bytes() == b"x"


def test_file_uris_bytes_paths_and_descriptors_are_local(tmp_path):
    path = tmp_path / "with space.bin"
    path.write_bytes(DATA)
    with open_stream("file://" + urllib.parse.quote(str(path))) as f:
        assert f.read(3) == DATA[:3]
    with open_stream(os.fsencode(path), begin=5) as f:
        assert f.read(3) == DATA[5:8]
    fd = os.open(path, os.O_RDONLY)
    try:
        os.lseek(fd, 7, os.SEEK_SET)
        with open_stream(fd) as f:
            assert f.read(2) == DATA[7:9]
        os.fstat(fd)  # still open: the stream did not own it
    finally:
        os.close(fd)


@pytest.mark.parametrize("uri", ["http://127.0.0.1:9/x", "https://127.0.0.1:9/x", "redis://127.0.0.1:9/x"])
@pytest.mark.parametrize("mode", ["wb", "ab", "rb+", "r"])
def test_http_and_redis_are_read_only(uri, mode):
    with pytest.raises(ValueError, match='"rb"'):
        open_stream(uri, mode)


@pytest.mark.parametrize("mode", ["r", "rb+", "xb", "w"])
def test_s3_modes_are_checked(mode):
    with pytest.raises(ValueError, match="s3://"):
        open_stream("s3://bucket/key", mode)


def test_s3_writes_without_a_native_uploader_fail_at_open(monkeypatch):
    class NoUpload:
        pass

    monkeypatch.setattr(stream_io, "_native", lambda: NoUpload())
    with pytest.raises(NotImplementedError, match="upload_file"):
        open_stream("s3://bucket/key", "wb")


class RecordingUploader:
    def __init__(self):
        self.calls = []

    def __call__(self, path, uri, **options):
        self.calls.append((Path(path).read_bytes(), uri, options))


def test_s3_writes_upload_the_temporary_file_once_on_close(monkeypatch):
    upload = RecordingUploader()
    monkeypatch.setattr(stream_io, "_native", lambda: type("N", (), {"upload_file": staticmethod(upload)}))
    f = open_stream("s3://bucket/dir/key.tensors", "wb+", s3_access_key_id="k", s3_secret_access_key="s",
                    s3_endpoint="http://127.0.0.1:1", force_http=True, s3_region_name="r", s3_session_token="t")
    temp = f._tz_path
    assert f.name == "s3://bucket/dir/key.tensors"
    f.write(b"hello ")
    f.write(b"world")
    f.seek(0)
    assert f.read(5) == b"hello"
    f.close()
    f.close()
    assert upload.calls == [(b"hello world", "s3://bucket/dir/key.tensors", {
        "s3_access_key_id": "k", "s3_secret_access_key": "s", "s3_session_token": "t",
        "s3_endpoint": "http://127.0.0.1:1", "s3_region": "r", "force_http": True})]
    assert not os.path.exists(temp)


def test_s3_writes_never_closed_are_uploaded_when_collected(monkeypatch):
    import gc

    upload = RecordingUploader()
    monkeypatch.setattr(stream_io, "_native", lambda: type("N", (), {"upload_file": staticmethod(upload)}))
    f = open_stream("s3://bucket/forgotten", "wb")
    f.write(b"data")
    temp = f._tz_path
    del f
    gc.collect()
    assert [c[:2] for c in upload.calls] == [(b"data", "s3://bucket/forgotten")] and not os.path.exists(temp)


def test_s3_writes_left_by_an_exception_are_discarded(monkeypatch):
    upload = RecordingUploader()
    monkeypatch.setattr(stream_io, "_native", lambda: type("N", (), {"upload_file": staticmethod(upload)}))
    with pytest.raises(RuntimeError):
        with open_stream("s3://bucket/key", "wb") as f:
            temp = f._tz_path
            f.write(b"partial")
            raise RuntimeError("writer failed")
    assert upload.calls == [] and not os.path.exists(temp)
    with open_stream("s3://bucket/key", "ab") as f:  # "ab" does not append, as in tensorizer
        f.write(b"whole")
    assert [c[0] for c in upload.calls] == [b"whole"]


def test_unsupported_signature_versions_warn(monkeypatch):
    monkeypatch.setattr(stream_io, "_native", lambda: type("N", (), {"upload_file": staticmethod(RecordingUploader())}))
    with pytest.warns(UserWarning, match="SigV4"):
        open_stream("s3://bucket/key", "wb", s3_signature_version="s3").close()


# -- real servers --------------------------------------------------------------------------------------


def native():
    try:
        from tensorizer import _C
    except ImportError as e:
        pytest.skip(f"tensorizer._C is not built: {e}")
    try:  # the package's exception mapping (FileNotFoundError, PermissionError, ...)
        import tensorizer.serialization  # noqa: F401
    except ImportError:
        pass
    return _C


def start_server(script: str, root: Path):
    return servers.start(script, root, PORT_BASE)


@pytest.fixture(scope="session")
def server_root(tmp_path_factory):
    return tmp_path_factory.mktemp("stream_io_servers")


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


@pytest.fixture(scope="session")
def s3_server(server_root):
    native()
    if shutil.which("curl") is None:
        pytest.skip("curl not found (used to put the test object)")
    stop = start_server("rgw.sh", server_root)
    endpoint = f"http://127.0.0.1:{S3_PORT}"

    def put(key: str, data: bytes):
        out = subprocess.run(
            ["curl", "-s", "-f", "--aws-sigv4", "aws:amz:us-east-1:s3", "--user", f"{S3_KEY}:{S3_SECRET}",
             "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD", "-X", "PUT", "--data-binary", "@-",
             f"{endpoint}/{S3_BUCKET}/{urllib.parse.quote(key)}"], input=data, capture_output=True, timeout=60)
        assert out.returncode == 0, out.stderr

    put("data.bin", DATA)
    put("dir/name with spaces.bin", DATA[::-1])
    yield {"endpoint": endpoint, "put": put}
    stop()


def s3_kwargs(server, **extra):
    # An explicit http:// endpoint needs force_http, as in tensorizer.
    return dict(s3_access_key_id=S3_KEY, s3_secret_access_key=S3_SECRET, s3_endpoint=server["endpoint"],
                force_http=True, **extra)


def test_s3_reads(s3_server):
    with open_stream(f"s3://{S3_BUCKET}/data.bin", **s3_kwargs(s3_server)) as f:
        assert isinstance(f, CURLStreamFile) and f.read() == DATA
    with open_stream(f"s3://{S3_BUCKET}/dir/name with spaces.bin", begin=10, end=20, **s3_kwargs(s3_server)) as f:
        assert f.read() == DATA[::-1][10:20]


def test_s3_credentials_from_an_s3cmd_config(s3_server, tmp_path):
    config = tmp_path / "s3cfg"
    host = s3_server["endpoint"].split("://", 1)[1]
    config.write_text(f"[default]\naccess_key = {S3_KEY}\nsecret_key = {S3_SECRET}\nhost_base = {host}\n"
                      "use_https = False\n")
    # use_https = False stands for force_http, as in tensorizer.
    with open_stream(f"s3://{S3_BUCKET}/data.bin", s3_config_path=str(config)) as f:
        assert f.read(8) == DATA[:8]


def test_default_s3_read_endpoint_is_read_at_open(s3_server, monkeypatch):
    # As in 2.11.1, the module-level default is the endpoint of last resort and is read at each open.
    for name in ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)
    kwargs = {**s3_kwargs(s3_server), "s3_endpoint": None}
    monkeypatch.setattr(stream_io, "default_s3_read_endpoint", s3_server["endpoint"].split("://", 1)[1])
    with open_stream(f"s3://{S3_BUCKET}/data.bin", **kwargs) as f:
        assert f.read(8) == DATA[:8]
    monkeypatch.setattr(stream_io, "default_s3_read_endpoint", "127.0.0.1:9")  # nothing listens there
    with pytest.raises(OSError, match="127.0.0.1:9"):
        open_stream(f"s3://{S3_BUCKET}/data.bin", timeouts={"give_up_after": 1}, **kwargs)


def test_s3_default_config_paths_is_read_at_open(s3_server, tmp_path, monkeypatch):
    # Pointing 2.11.1's _s3_default_config_paths at a config gives its keys and host_base to the next open.
    config = tmp_path / "elsewhere.s3cfg"
    host = s3_server["endpoint"].split("://", 1)[1]
    config.write_text(f"[default]\naccess_key = {S3_KEY}\nsecret_key = {S3_SECRET}\nhost_base = {host}\n"
                      "use_https = False\n")
    monkeypatch.setattr(stream_io, "_s3_default_config_paths", (str(tmp_path / "missing"), str(config)))
    stream_io._get_s3cfg_values.cache_clear()  # cached, as in 2.11.1
    try:
        with open_stream(f"s3://{S3_BUCKET}/data.bin") as f:
            assert f.read(8) == DATA[:8]
    finally:
        stream_io._get_s3cfg_values.cache_clear()


def test_s3_default_config_paths_elsewhere_means_no_s3cfg(s3_server, tmp_path, monkeypatch):
    # 2.11.1 reads the s3cmd config only through _s3_default_config_paths: pointed away from
    # ~/.s3cfg, a valid ~/.s3cfg must not sign the request (the native client used to read it
    # itself). No other credentials anywhere: the request goes unsigned and RGW refuses it.
    home = tmp_path / "home"
    home.mkdir()
    (home / ".s3cfg").write_text(f"[default]\naccess_key = {S3_KEY}\nsecret_key = {S3_SECRET}\n")
    monkeypatch.setenv("HOME", str(home))
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    kwargs = {"s3_endpoint": s3_server["endpoint"], "force_http": True}
    stream_io._get_s3cfg_values.cache_clear()
    try:
        monkeypatch.setattr(stream_io, "_s3_default_config_paths", (str(home / ".s3cfg"),))
        with open_stream(f"s3://{S3_BUCKET}/data.bin", **kwargs) as f:  # found there: signed, readable
            assert f.read(8) == DATA[:8]
        stream_io._get_s3cfg_values.cache_clear()
        monkeypatch.setattr(stream_io, "_s3_default_config_paths", (str(tmp_path / "missing"),))
        with pytest.raises(PermissionError):
            open_stream(f"s3://{S3_BUCKET}/data.bin", **kwargs)
    finally:
        stream_io._get_s3cfg_values.cache_clear()


def test_s3_credentials_and_endpoint_from_botocore(s3_server, tmp_path, monkeypatch):
    # A profile whose keys come from a credential_process, a source only botocore knows, and whose
    # endpoint_url is an http:// one (allowed from config, as in 2.11.1): nothing passed to open_stream.
    pytest.importorskip("botocore", reason="botocore supplies these credentials; without it there are none")
    helper = tmp_path / "creds.py"
    helper.write_text(f"import json; print(json.dumps({{'Version': 1, 'AccessKeyId': '{S3_KEY}', "
                      f"'SecretAccessKey': '{S3_SECRET}'}}))\n")
    config = tmp_path / "aws_config"
    config.write_text(f"[profile tz-test]\ncredential_process = {sys.executable} {helper}\n"
                      f"endpoint_url = {s3_server['endpoint']}\n")
    for name in ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
                 "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_PROFILE", "tz-test")
    monkeypatch.setattr(stream_io, "_s3_default_config_paths", (str(tmp_path / "no-s3cfg"),))
    stream_io._get_s3cfg_values.cache_clear()
    try:
        with open_stream(f"s3://{S3_BUCKET}/data.bin") as f:
            assert f.read(8) == DATA[:8]
    finally:
        stream_io._get_s3cfg_values.cache_clear()


def test_s3cfg_helpers_match_2_11_1(tmp_path, monkeypatch):
    config = tmp_path / "s3cfg"
    config.write_text("[default]\naccess_key = a\nsecret_key = b\nhost_base = h:1\nuse_https = False\n")
    assert stream_io._get_s3cfg_values(str(config)) == (str(config), "h:1", "a", "b", False)
    (tmp_path / "bad").write_text("[other]\nx = 1\n")
    with pytest.raises(ValueError, match="No default section"):
        stream_io._get_s3cfg_values(str(tmp_path / "bad"))
    assert stream_io._parse_s3_uri("s3://bucket/a/b") == ("bucket", "a/b")
    assert stream_io._parse_redis_uri("redis://h/p") == ("h", 6379, "p")
    assert stream_io._enforce_scheme("h:1") == "https://h:1"
    assert stream_io._enforce_scheme("https://h", force_http=True) == "http://h"
    with pytest.raises(ValueError, match="Non-HTTPS"):
        stream_io._enforce_scheme("http://h")


def test_s3_wrong_secret_is_refused(s3_server):
    with pytest.raises(OSError, match="Failed to open stream") as e:
        open_stream(f"s3://{S3_BUCKET}/data.bin", **{**s3_kwargs(s3_server), "s3_secret_access_key": "wrong"})
    assert isinstance(e.value, PermissionError) or "403" in str(e.value)


def test_s3_missing_object(s3_server):
    with pytest.raises(OSError, match="Failed to open stream"):
        open_stream(f"s3://{S3_BUCKET}/missing.bin", **s3_kwargs(s3_server))


def test_s3_writes_upload_on_close(s3_server):
    # open_stream's s3:// writes need the native upload_file; a rename must fail here, not skip.
    assert callable(native().upload_file)
    with open_stream(f"s3://{S3_BUCKET}/written dir/w.bin", "wb", **s3_kwargs(s3_server)) as f:
        f.write(DATA[:777])
    with open_stream(f"s3://{S3_BUCKET}/written dir/w.bin", **s3_kwargs(s3_server)) as f:
        assert f.read() == DATA[:777]


def test_a_replaced_enforce_scheme_decides_whether_an_explicit_http_endpoint_is_allowed(monkeypatch):
    # 2.11.1's own S3 tests replace _enforce_scheme to reach an http:// moto server.
    upload = RecordingUploader()
    monkeypatch.setattr(stream_io, "_native", lambda: type("N", (), {"upload_file": staticmethod(upload)}))
    keys = dict(s3_access_key_id="k", s3_secret_access_key="s", s3_endpoint="http://127.0.0.1:1")
    with pytest.raises(ValueError, match="Non-HTTPS endpoint URLs are not allowed"):
        open_stream("s3://bucket/key", "wb", **keys)
    monkeypatch.setattr(stream_io, "_enforce_scheme", lambda endpoint, *_: endpoint)
    with open_stream("s3://bucket/key", "wb", **keys) as f:
        f.write(b"x")
    assert upload.calls == [(b"x", "s3://bucket/key", {
        "s3_access_key_id": "k", "s3_secret_access_key": "s", "s3_endpoint": "http://127.0.0.1:1",
        "force_http": True})]


def test_s3_download_url_presigns_as_boto3_does():
    boto3 = pytest.importorskip("boto3")
    import botocore.config

    key = "dir/a b+c.tensors"
    cases = [("v4", "http://127.0.0.1:5000", "path"), ("s3", "https://accel-object.ord1.coreweave.com", "path"),
             ("v4", "https://cwobject.com", "virtual")]
    for version, endpoint, style in cases:
        for _ in range(5):  # both within one second, so both sign the same time
            now = int(time.time())
            ours = stream_io._s3_download_url(f"s3://bucket/{key}", "AK", "SK", s3_endpoint=endpoint,
                                              s3_region_name="ord1", s3_signature_version=version)
            expiry = now - now % 86400 + 2 * 86400
            client = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="AK", aws_secret_access_key="SK",
                                  region_name="ord1",
                                  config=botocore.config.Config(signature_version=version, s3={"addressing_style": style}))
            theirs = client.generate_presigned_url("get_object", Params={"Bucket": "bucket", "Key": key},
                                                   ExpiresIn=expiry - now)
            if int(time.time()) == now:
                break
        ours_base, ours_query = ours.split("?")
        theirs_base, theirs_query = theirs.split("?")
        assert ours_base == theirs_base
        assert sorted(ours_query.split("&")) == sorted(theirs_query.split("&"))
    assert stream_io._s3_download_url("s3://bucket/k", "", "", s3_endpoint="h.example") == "https://h.example/bucket/k"
    assert "AWSAccessKeyId=AK" in stream_io._s3_download_url("s3://bucket/k", "AK", "SK")  # accel-object: V2
