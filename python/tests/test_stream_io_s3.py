"""tensorizer.stream_io's S3 side: reads, writes and credentials against a Ceph RGW started on
loopback (scripts/servers/rgw.sh; skipped when it cannot start or tensorizer._C is not built), and
the S3 helpers that need no server (s3cmd config parsing, endpoint schemes, presigned URLs)."""

import os
import shutil
import subprocess
import sys
import time
import urllib.parse

import pytest

from tensorizer import stream_io
from tensorizer.stream_io import CURLStreamFile, open_stream

from stream_servers import DATA, S3_BUCKET, S3_KEY, S3_PORT, S3_SECRET, RecordingUploader, native, start_server


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


# tensorizer 2.11.1's own S3 upload test and the moto 4 it mocks S3 with (scripts/setup.sh).
TENSORIZER_2111_TESTS = "/opt/tz-peers/tensorizer-2.11.1-tests/test_stream_io.py"
MOTO4 = "/opt/tz-peers/moto-4.2.14"


def test_tensorizer_2111_s3_upload_test_passes_on_ours(tmp_path):
    # 2.11.1's TestS3::test_upload mocks botocore with moto in the test's own process and uploads
    # through open_stream: our upload must be caught by the same mock, as 2.11.1's boto3 upload is.
    if not (os.path.exists(TENSORIZER_2111_TESTS) and os.path.isdir(MOTO4)):
        pytest.skip("tensorizer 2.11.1's test_stream_io.py or moto 4.2.14 not installed (scripts/setup.sh)")
    env = {**os.environ, "PYTHONPATH": MOTO4}
    script = ("import sys, pytest, tensorizer, tensorizer._C, moto\n"
              "assert tensorizer.__version__ != '2.11.1' and moto.__version__ == '4.2.14', tensorizer.__file__\n"
              f"sys.exit(pytest.main([{TENSORIZER_2111_TESTS!r}, '-q', '-p', 'no:cacheprovider',"
              " '-k', 'TestS3 and test_upload']))\n")
    out = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0 and "1 passed" in out.stdout, out.stdout[-3000:] + out.stderr[-3000:]


def test_uploads_stay_native_unless_botocore_answers_in_process(monkeypatch):
    from tensorizer import _boto_upload

    assert stream_io._uploader() is not _boto_upload.boto3_upload or _boto_upload.botocore_is_stubbed()
    moto = pytest.importorskip("moto")
    with moto.mock_aws():
        assert _boto_upload.botocore_is_stubbed()
        assert stream_io._uploader() is _boto_upload.boto3_upload
    assert not _boto_upload.botocore_is_stubbed()
