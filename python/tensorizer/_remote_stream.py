"""The seekable read-only stream over a native source, and the temporary file behind s3:// writes.

Private to `tensorizer.stream_io`, which imports every name here (its public `CURLStreamFile` and
`RedisStreamFile` derive from `_RemoteStream`):

* `_open_source` opens a `tensorizer._C.Source` over a URI and learns its size, following HTTP
  redirects (`_resolve_redirects`, with URLs percent-encoded by `_quote_url`);
* `_RemoteStream` reads a byte range of such a source as a seekable binary stream with read-ahead;
* `_S3UploadFile` is a temporary local file that becomes an S3 object when closed;
* `_time_options` checks a `timeouts` mapping and makes it native options;
* `_os_error`, `_check_range` and `_remove_quietly` are the small helpers they share.

`_open_source` reads `_native`, `cache_dir` and `cache_max_size` from `tensorizer.stream_io` at each
call, so assigning them there (as tests and users do) takes effect as it did before the split.
"""

from __future__ import annotations

import email.message
import http.client
import io
import os
import re
import ssl
import tempfile
import threading
import urllib.parse
from io import SEEK_CUR, SEEK_END, SEEK_SET
from typing import Any, Dict, Mapping, Optional

# Small reads of remote streams are served from a read-ahead buffer of this size; larger reads go
# straight into the caller's buffer in one ranged request. `buffer_size` overrides it (0 = none).
_DEFAULT_READ_AHEAD_BYTES = 1 << 20
_REDIRECT_STATUSES = (301, 302, 303, 307, 308)
_REDIRECTS_MAX = 10
# The native engine's time limits, in seconds, accepted in a `timeouts` mapping.
_TIME_LIMITS = ("connect_timeout", "first_byte_timeout", "stall_timeout", "give_up_after", "deadline")


def _stream_io():
    """The public module `tensorizer.stream_io`, whose settings (`_native`, `cache_dir`,
    `cache_max_size`) are read from it at each call rather than copied here."""
    from . import stream_io

    return stream_io


def _os_error(e: BaseException, what: str) -> OSError:
    """`e` as an OSError whose message starts with `what`, keeping OSError subclasses
    (FileNotFoundError, PermissionError, TimeoutError, ...)."""
    message = f"{what}: {e}"
    if isinstance(e, OSError):
        try:
            return type(e)(message)
        except Exception:
            pass
    return OSError(message)


def _remove_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _check_range(begin: Optional[int], end: Optional[int]) -> int:
    begin = 0 if begin is None else begin
    if begin < 0:
        raise ValueError("Invalid begin, must be non-negative")
    if end is not None and end <= begin:
        raise ValueError(f"End marker must come strictly after begin marker (requested range: {begin} to {end})")
    return begin


def _time_options(timeouts: Optional[Mapping[str, Optional[float]]]) -> Dict[str, float]:
    """The native options for a `timeouts` mapping (seconds by limit name; None keeps a default)."""
    if timeouts is None:
        return {}
    unknown = sorted(set(timeouts) - set(_TIME_LIMITS))
    if unknown:
        raise TypeError(f"unknown timeouts {unknown}; the limits are {', '.join(_TIME_LIMITS)}")
    options = {name: float(seconds) for name, seconds in timeouts.items() if seconds is not None}
    # Checked here too (the engine checks again) so a bad value is a ValueError, not a failed open.
    for name, seconds in options.items():
        zero_allowed = name in ("give_up_after", "deadline")
        if not (0 <= seconds <= 86400) or (seconds == 0 and not zero_allowed):
            raise ValueError(f"timeouts[{name!r}] must be {'0 (none) to' if zero_allowed else 'more than 0 and at most'}"
                             f" 86400 seconds, got {seconds}")
    return options


def _quote_url(url: str) -> str:
    """Percent-encodes what may not appear raw in an HTTP request target (spaces, non-ASCII, ...),
    leaving existing %XX escapes and reserved characters alone."""
    parts = urllib.parse.urlsplit(url)
    path = urllib.parse.quote(parts.path, safe="/%!$&'()*+,;=:@~")
    query = urllib.parse.quote(parts.query, safe="/%!$&'()*+,;=:@~?")
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, query, parts.fragment))


def _resolve_redirects(url: str, tls: Dict[str, Any]) -> str:
    """Follows HTTP redirects from `url` with HEAD requests; returns the final URL."""
    # http.client has one timeout for every socket operation: the longer of connect and first byte.
    wait = max(tls.get("connect_timeout", 5.0), tls.get("first_byte_timeout", 10.0))
    for _ in range(_REDIRECTS_MAX):
        parts = urllib.parse.urlsplit(url)
        if parts.scheme.lower() == "https":
            context = ssl.create_default_context(cafile=tls.get("ca_file"))
            if tls.get("insecure"):
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
            conn = http.client.HTTPSConnection(parts.hostname, parts.port, timeout=wait, context=context)
        else:
            conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=wait)
        try:
            target = parts.path or "/"
            if parts.query:
                target += "?" + parts.query
            conn.request("HEAD", target, headers={"Accept-Encoding": "identity"})
            response = conn.getresponse()
            location = response.getheader("Location")
            status = response.status
        finally:
            conn.close()
        if status not in _REDIRECT_STATUSES or not location:
            return url
        url = _quote_url(urllib.parse.urljoin(url, location))
    raise OSError(f"more than {_REDIRECTS_MAX} redirects starting at {url}")


def _open_source(uri: str, options: Dict[str, Any]):
    """Opens a native source over `uri` and learns its size (the first round trip, which is when
    missing objects, rejected credentials and unreachable servers are found). HTTP redirects are
    followed. Raises OSError("Failed to open stream: ...")."""
    public = _stream_io()
    _C = public._native()
    if not uri.lower().startswith("redis://"):
        settings = (("cache_dir", public.cache_dir), ("cache_max_size", public.cache_max_size))
        options = {**{k: os.fspath(v) if k == "cache_dir" else v for k, v in settings if v is not None}, **options}

    def attempt(target):
        source = _C.Source.open(target, **options)
        source.size()
        return source

    try:
        return attempt(uri)
    except (TypeError, NotImplementedError):
        raise
    except Exception as e:
        is_http = uri.lower().startswith(("http://", "https://"))
        if not (is_http and re.search(r"HTTP (%s)\b" % "|".join(map(str, _REDIRECT_STATUSES)), str(e))):
            raise _os_error(e, "Failed to open stream") from e
        first_error = e
    try:
        final = _resolve_redirects(uri, options)
        return attempt(final)
    except (TypeError, NotImplementedError):
        raise
    except Exception as e:
        raise _os_error(e, "Failed to open stream") from first_error


class _RemoteStream(io.BufferedIOBase):
    """A seekable, read-only binary stream over a native source's byte range [begin, end).

    Positions are offsets in the whole object (as in tensorizer): the stream starts at `begin`, and
    reads stop at `end` (exclusive; default: the object's size). Small reads are served from a
    read-ahead buffer of `buffer_size` bytes; larger ones are one ranged read into the caller's
    buffer. Thread-safe (one lock around the position)."""

    def __init__(self, source, *, begin: Optional[int] = None, end: Optional[int] = None,
                 buffer_size: Optional[int] = None, name: Optional[str] = None, open_seconds: float = 0.0):
        super().__init__()
        begin = _check_range(begin, end)
        self._tz_source = source
        self._size = source.size()
        self._tz_begin = begin
        self._tz_end = self._size if end is None else min(end, self._size)
        self._pos = begin
        self._read_ahead = _DEFAULT_READ_AHEAD_BYTES if buffer_size is None else max(0, int(buffer_size))
        self._buffer = b""
        self._buffer_offset = 0
        self._lock = threading.Lock()
        self.name = name if name is not None else source.name
        self.response_headers = email.message.Message()
        self.popen_latencies = []
        self.http_response_latencies = [open_seconds]
        self.bytes_read = 0
        self.bytes_skipped = 0
        self.read_operations = 0

    @classmethod
    def _from_source(cls, source, **kwargs):
        stream = cls.__new__(cls)
        _RemoteStream.__init__(stream, source, **kwargs)
        return stream

    def _fork(self, begin: Optional[int] = None, end: Optional[int] = None):
        """Another stream over the same source with its own range (for parallel readers)."""
        return self._from_source(self._live_source(), begin=begin, end=end, buffer_size=self._read_ahead,
                                 name=self.name)

    def _live_source(self):
        if self.closed:
            raise ValueError("I/O operation on closed file.")
        return self._tz_source

    # -- reading -------------------------------------------------------------------------------

    def _read_at(self, offset: int, dst: memoryview) -> None:
        try:
            self._live_source().read_into(offset, dst)
        except (TypeError, ValueError):
            raise
        except Exception as e:
            raise _os_error(e, f"Failed to read {len(dst)} bytes at offset {offset} of {self.name}") from e
        self.read_operations += 1

    def _fill(self, dst: memoryview) -> None:
        """Fills dst with the bytes at the current position (the caller clamped it to the end)."""
        done = 0
        lo = self._pos - self._buffer_offset
        if 0 <= lo < len(self._buffer):
            done = min(len(dst), len(self._buffer) - lo)
            dst[:done] = self._buffer[lo:lo + done]
        rest = len(dst) - done
        if rest:
            at = self._pos + done
            if rest >= self._read_ahead:
                self._read_at(at, dst[done:])
            else:
                chunk = bytearray(min(self._read_ahead, self._tz_end - at))
                self._read_at(at, memoryview(chunk))
                self._buffer, self._buffer_offset = bytes(chunk), at
                dst[done:] = self._buffer[:rest]
        self._pos += len(dst)
        self.bytes_read += len(dst)

    def _available(self, wanted: Optional[int]) -> int:
        left = max(0, self._tz_end - self._pos)
        return left if wanted is None or wanted < 0 else min(wanted, left)

    def read(self, size: Optional[int] = None) -> bytes:  # 2.11.1's parameter names and defaults
        with self._lock:
            self._live_source()
            n = self._available(size)
            if n == 0:
                return b""
            out = bytearray(n)
            self._fill(memoryview(out))
            return bytes(out)

    def readinto(self, ba) -> int:
        with self._lock:
            self._live_source()
            with memoryview(ba) as view, view.cast("B") as dst:
                n = self._available(len(dst))
                if n:
                    self._fill(dst[:n])
                return n

    read1 = read
    readinto1 = readinto

    def readall(self) -> bytes:
        return self.read(-1)

    # -- positioning ---------------------------------------------------------------------------

    def seek(self, position: int, whence: int = SEEK_SET) -> int:
        with self._lock:
            self._live_source()
            if whence == SEEK_SET:
                target = position
            elif whence == SEEK_CUR:
                target = self._pos + position
            elif whence == SEEK_END:
                target = self._tz_end + position
            else:
                raise ValueError(f"invalid whence ({whence}, should be 0, 1 or 2)")
            if target < 0:
                raise ValueError(f"negative seek position {target}")
            if target > self._pos:
                self.bytes_skipped += target - self._pos
            self._pos = target
            return target

    def tell(self) -> int:
        self._live_source()
        return self._pos

    def size(self) -> int:
        """The whole object's size in bytes."""
        return self._size

    # -- properties of the stream --------------------------------------------------------------

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def writable(self) -> bool:
        return False

    def fileno(self) -> int:
        raise io.UnsupportedOperation(f"{type(self).__name__} has no file descriptor")

    def close(self) -> None:
        self._tz_source = None
        self._buffer = b""
        super().close()

    def __repr__(self):
        return f"<tensorizer.stream_io.{type(self).__name__} {self.name!r} [{self._tz_begin}, {self._tz_end})>"


class _S3UploadFile(io.BufferedRandom):
    """A temporary local file that becomes the S3 object `uri` when closed (or garbage collected).
    Leaving a ``with`` block by an exception discards it instead. The temporary file is removed
    either way."""

    def __init__(self, uri: str, options: Dict[str, Any], upload):
        fd, path = tempfile.mkstemp(prefix="tensorizer-s3-", suffix=".upload")
        try:
            super().__init__(io.FileIO(fd, "w+b", closefd=True))
        except BaseException:
            os.close(fd)
            _remove_quietly(path)
            raise
        self._tz_uri, self._tz_path, self._tz_options, self._tz_upload = uri, path, options, upload
        self._tz_discard = False

    @property
    def name(self):
        return self._tz_uri

    def close(self) -> None:
        if self.closed:
            return
        try:
            super().close()
            if not self._tz_discard:
                try:
                    self._tz_upload(self._tz_path, self._tz_uri, **self._tz_options)
                except (TypeError, NotImplementedError):
                    raise
                except Exception as e:
                    raise _os_error(e, f"Failed to upload {self._tz_uri}") from e
        finally:
            _remove_quietly(self._tz_path)

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None:
            self._tz_discard = True
        self.close()
        return False
