"""What the stream_io tests share: the loopback ports and credentials of the test servers, the test
data, the native module (skipping without it), starting a server script (scripts/servers), and an
uploader that records what it is given."""

from pathlib import Path

import pytest

import servers

PORT_BASE = 23600  # nginx 23680 / 24043, redis 23979, RGW 24080-24082; CTest uses 18000
HTTP_PORT, HTTPS_PORT, REDIS_PORT, S3_PORT = PORT_BASE + 80, PORT_BASE + 443, PORT_BASE + 379, PORT_BASE + 480
S3_KEY, S3_SECRET, S3_BUCKET = "TESTKEY", "TESTSECRET", "tz-test"
DATA = bytes(range(256)) * 40 + b"tail"  # 10244 bytes


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


class RecordingUploader:
    """Stands in for the native upload_file: records (the file's bytes, uri, options) per call."""

    def __init__(self):
        self.calls = []

    def __call__(self, path, uri, **options):
        self.calls.append((Path(path).read_bytes(), uri, options))
