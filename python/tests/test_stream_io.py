"""tensorizer.stream_io (format/FORMAT.md §12): open_stream's dispatch, local files, the remote stream
class over a byte source, CAInfo, S3 uploads on close; and real servers (nginx over HTTP/HTTPS,
Redis, Ceph RGW for S3) started on loopback by scripts/servers/*.sh, skipped when they cannot start
or when tensorizer._C is not built."""

import io
import os
import urllib.parse
from pathlib import Path

import pytest

from tensorizer import stream_io
from tensorizer.stream_io import CAInfo, CURLStreamFile, RedisStreamFile, open_stream

from stream_servers import DATA, RecordingUploader


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
