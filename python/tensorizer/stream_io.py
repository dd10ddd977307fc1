"""Opening local files and http(s)://, s3:// and redis:// URIs as binary streams (format/FORMAT.md §12).

`open_stream` dispatches on the scheme like tensorizer's. Remote reads are served by the native
engine (`tensorizer._C.Source`: a keep-alive HTTP range client, SigV4-signed S3 requests, a Redis
client) instead of a curl subprocess, wrapped in a seekable read-only stream. The native source is
kept as the stream's `_tz_source`, so `TensorDeserializer` can read through it directly. Writes to
s3:// go to a temporary file that is uploaded on close. Local files use the built-in `open` and
need nothing native. The remote stream and that upload file are in `_remote_stream`, the S3
credential and endpoint resolution in `_s3_config`; their names are importable from here as before.

Differences from tensorizer 2.11.1 (`CURLStreamFile`, `RedisStreamFile`, `CAInfo` keep their names
and signatures):

* No curl executable is needed. Streams are truly seekable: seeking backwards costs nothing (no new
  process), `SEEK_END` works, reads at the end of the object or of `end` return short / empty results
  like a file instead of raising ``IOError("Requested X != Y")``.
* HTTP redirects (301, 302, 303, 307, 308) are followed (2.11.1 refuses them). The server must
  offer byte ranges (``Accept-Ranges: bytes``); 2.11.1 could stream from one that does not.
* URLs with spaces or other characters that must be escaped are percent-encoded (curl sent them raw);
  existing ``%XX`` escapes are kept.
* Redis: keys are sent as binary-safe commands, so tensor names with spaces or quotes (every
  structured name) work; `end` is honoured as the end of the stream (2.11.1 ignores it).
* S3: AWS session tokens work, from ``AWS_SESSION_TOKEN`` (with the environment's keys) or the
  keyword-only `s3_session_token` argument (tensorizer issue #186). Requests are signed with SigV4;
  another `s3_signature_version` gives a warning (2.11.1 also signs with SigV4 in practice, §12.1).
  Credentials and endpoint resolve as the native engine does (format/FORMAT.md §12.1: explicit keys, the
  s3cmd config, the AWS environment and ~/.aws/credentials, else unsigned reads), and, with botocore
  installed, keys found nowhere before come from botocore's chain (profiles, credential_process, web
  identity / IRSA, SSO, instance metadata), as 2.11.1's boto3 clients found them; an endpoint found
  nowhere before is botocore's configured endpoint_url, else `default_s3_read_endpoint` /
  `default_s3_write_endpoint` as they are at the open (see `_resolve_s3`).
* A ``with open_stream("s3://...", "wb")`` block left by an exception discards the temporary file
  instead of uploading a partial object. As in tensorizer, ``"ab"`` does not append.
* `CAInfo(capath=...)` works by bundling the directory's PEM certificates into a temporary CA file.
* ``file://`` URIs open local files; a `bytes` path is decoded like a str; an `int` is used as an
  open file descriptor (not closed with the stream). 2.11.1 fails on all three.
* `fileno()` on remote streams raises ``io.UnsupportedOperation`` (2.11.1 returned -1);
  `response_headers` is an empty message (the native client does not expose them).
* Every network wait is bounded, and the keyword-only `timeouts` argument (a mapping of seconds)
  sets the limits: ``connect_timeout`` (5), ``first_byte_timeout`` (10), ``stall_timeout`` (10:
  no byte moved for that long), ``give_up_after`` (20: a request fails once this much time went
  to failed attempts, their fruitless waits and backoff; 0 = only the attempt count limits) and
  ``deadline`` (0 = none: a hard limit per request that cuts even moving transfers). A silent or
  dead server, or a stalled transfer, fails within about ``give_up_after`` (TimeoutError, naming
  the limit that fired); slow transfers that keep moving are never cut.
"""

from __future__ import annotations

import email.message
import functools
import http.client
import io
import os
import re
import ssl
import sys
import tempfile
import threading
import time
import typing
import urllib.parse
import warnings
import weakref
from io import SEEK_CUR, SEEK_END, SEEK_SET
from typing import Any, Dict, Mapping, Optional, Tuple, Union

from . import _boto_upload
from ._remote_stream import (
    _DEFAULT_READ_AHEAD_BYTES, _REDIRECT_STATUSES, _REDIRECTS_MAX, _TIME_LIMITS, _check_range, _open_source,
    _os_error, _quote_url, _RemoteStream, _remove_quietly, _resolve_redirects, _S3UploadFile, _time_options,
)
from ._s3_config import (
    _botocore_credentials, _botocore_endpoint, _botocore_session, _get_s3cfg_values, _is_caios, _parse_s3_uri,
    _ParsedCredentials, _presign_v2, _presign_v4, _resolve_s3, _uri_options,
)

# Bound here though no code below uses them (the code that did moved to _remote_stream / _s3_config;
# serialization and tests reach some as stream_io.<name>), so every name this module had still resolves.
_KEPT_NAMES = (email, functools, http, re, ssl, threading, SEEK_CUR, SEEK_END, SEEK_SET, _DEFAULT_READ_AHEAD_BYTES,
               _REDIRECT_STATUSES, _REDIRECTS_MAX, _TIME_LIMITS, _resolve_redirects, _botocore_endpoint,
               _get_s3cfg_values, _ParsedCredentials, _uri_options)

__all__ = ["open_stream", "CURLStreamFile", "RedisStreamFile", "CAInfo"]

# Read at every s3:// open (not copied at import), so reassigning them redirects the next open, as
# in 2.11.1. They are the last resort, after s3_endpoint, the s3cmd config's host_base and
# AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL.
default_s3_read_endpoint = "accel-object.ord1.coreweave.com"
default_s3_write_endpoint = "object.ord1.coreweave.com"

# Where the s3cmd config is looked for when no s3_config_path is given (2.11.1's name and value);
# read at every open, so tests can point it elsewhere.
if sys.platform != "win32":
    _s3_default_config_paths = (os.path.expanduser("~/.s3cfg"),)
else:  # s3cmd's own default on Windows, and ~\.s3cfg where it was placed by hand
    _s3_default_config_paths = tuple(map(os.path.expanduser, (r"~\.s3cfg", r"~\AppData\Roaming\s3cmd.ini")))

# The node-local cache of http(s):// and s3:// objects (an extension; backends/CACHE.md): a load
# also keeps a copy in this directory, keyed by URI + ETag, and the next open of the unchanged object
# reads the copy. None follows TENSORIZER_CACHE_DIR (unset: no cache). `cache_max_size` bounds it
# (bytes, or a string such as "20G"; None follows TENSORIZER_CACHE_MAX_SIZE, else half the file
# system). Both are read at every open.
cache_dir: Optional[str] = None
cache_max_size: Optional[Union[int, str]] = None


def _parse_redis_uri(uri: str) -> Tuple[str, int, str]:
    """(host, port, key prefix) of redis://host[:port]/prefix, port 6379 by default (2.11.1's helper)."""
    parts = urllib.parse.urlparse(uri)
    if parts.scheme.lower() != "redis":
        raise ValueError(f"Invalid Redis URI: {uri}")
    return parts.hostname, 6379 if parts.port is None else parts.port, parts.path.lstrip("/")


def _enforce_scheme(endpoint: str, allow_http: bool = False, force_http: bool = False) -> str:
    """`endpoint` as a URL: https:// added (http:// with `force_http`); http:// kept only with
    `allow_http` or `force_http`, else ValueError (2.11.1's rule, which the native client applies)."""
    scheme, *location = endpoint.split("://", maxsplit=1)
    scheme = scheme.lower() if location else None
    if scheme is None:
        return ("http://" if force_http else "https://") + endpoint
    if scheme == "https":
        return "http://" + endpoint[8:] if force_http else endpoint
    if (force_http or allow_http) and scheme == "http":
        return endpoint
    raise ValueError("Non-HTTPS endpoint URLs are not allowed.")


def _native():
    try:
        from . import _C
    except ImportError as e:
        raise ImportError(
            "remote streams (http(s)://, s3://, redis://) need tensorizer's native module tensorizer._C,"
            f" which could not be imported: {e}"
        ) from e
    return _C


class CAInfo:
    """How HTTPS certificates are verified: against `cacert` (a PEM file), `capath` (a directory of
    PEM certificates), or not at all (`allow_untrusted=True`). Exactly one must be given; pass
    ``certificate_handling=None`` for the default verification against the system store."""

    __slots__ = ("_curl_flags", "_options", "_bundle_finalizer", "__weakref__")

    def __init__(self, *, cacert: Optional[str] = None, capath: Optional[str] = None, allow_untrusted: bool = False):
        if (cacert is not None) + (capath is not None) + bool(allow_untrusted) != 1:
            raise ValueError(
                "Exactly one of cacert, capath, or allow_untrusted=True must be specified. For default"
                " certificate verification behaviour, use certificate_handling=None instead of an explicit"
                " CAInfo instance"
            )
        self._bundle_finalizer = None
        if cacert is not None:
            if not os.path.isfile(cacert):
                raise ValueError("Invalid cacert file path, see https://curl.se/docs/manpage.html#--cacert")
            self._curl_flags = ("--cacert", os.fspath(cacert))
            self._options = {"ca_file": os.fspath(cacert)}
        elif capath is not None:
            if not os.path.isdir(capath):
                raise ValueError("Invalid capath directory path, see https://curl.se/docs/manpage.html#--capath")
            self._curl_flags = ("--capath", os.fspath(capath))
            self._options = None  # the bundle is made on first use
        else:
            self._curl_flags = ("--insecure",)
            self._options = {"insecure": True}

    @property
    def curl_flags(self):
        """The equivalent curl options, as tensorizer's CAInfo exposes them."""
        return self._curl_flags

    def remote_options(self) -> Dict[str, Any]:
        """The native engine's TLS options (``ca_file`` or ``insecure``) for this setting."""
        if self._options is None:
            self._options = {"ca_file": self._make_bundle(self._curl_flags[1])}
        return dict(self._options)

    def _make_bundle(self, directory: str) -> str:
        # A CA directory holds PEM files (and c_rehash's <hash>.N links to them): concatenate each
        # distinct certificate file into one bundle the TLS client can load as a CA file.
        seen, pems = set(), []
        for entry in sorted(os.listdir(directory)):
            path = os.path.realpath(os.path.join(directory, entry))
            if path in seen or not os.path.isfile(path):
                continue
            seen.add(path)
            try:
                with open(path, "rb") as f:
                    data = f.read()
            except OSError:
                continue
            if b"-----BEGIN CERTIFICATE-----" in data:
                pems.append(data if data.endswith(b"\n") else data + b"\n")
        if not pems:
            raise ValueError(f"capath {directory} holds no PEM certificates")
        fd, bundle = tempfile.mkstemp(prefix="tensorizer-capath-", suffix=".pem")
        with os.fdopen(fd, "wb") as f:
            f.write(b"".join(pems))
        self._bundle_finalizer = weakref.finalize(self, _remove_quietly, bundle)
        return bundle

    def __eq__(self, other):
        return isinstance(other, CAInfo) and self._curl_flags == other._curl_flags

    def __hash__(self):
        return hash(self._curl_flags)

    def __repr__(self):
        return f"CAInfo{self._curl_flags}"


def _tls_options(certificate_handling: Optional[CAInfo]) -> Dict[str, Any]:
    if certificate_handling is None:
        return {}
    if not isinstance(certificate_handling, CAInfo):
        raise TypeError(
            "certificate_handling must either be None (for default SSL certificate verification), or a"
            f" CAInfo object, not {certificate_handling.__class__.__name__}"
        )
    return certificate_handling.remote_options()


class CURLStreamFile(_RemoteStream):
    """A seekable read-only stream over an http(s):// URL (range requests), named after tensorizer's
    curl-based class but served by the native HTTP client (no curl needed; see the module notes).

    `begin` is the first byte and start position, `end` the exclusive end of the readable range.
    `headers` are sent with every request. `buffer_size` is the read-ahead for small reads.
    `certificate_handling` is a `CAInfo` or None; `timeouts` the time limits (see the module
    docstring). Raises OSError("Failed to open stream: ...") when the URL cannot be read (404,
    refused connection, rejected certificate, no range support; TimeoutError for a silent server)."""

    def __init__(self, uri: str, begin: Optional[int] = None, end: Optional[int] = None,
                 headers: Optional[Dict[str, Any]] = None, *, buffer_size: Optional[int] = None,
                 certificate_handling: Optional[CAInfo] = None,
                 timeouts: Optional[Mapping[str, Optional[float]]] = None) -> None:
        _check_range(begin, end)
        options = _tls_options(certificate_handling)
        options.update(_time_options(timeouts))
        if headers:
            options["headers"] = [(str(k), str(v)) for k, v in headers.items()]
        uri = _quote_url(uri)
        started = time.monotonic()
        try:
            source = _open_source(uri, options)
        except TypeError as e:
            if headers and "headers" in str(e):
                raise NotImplementedError("custom HTTP headers need the native option 'headers' (not available"
                                          " in this build of tensorizer._C)") from e
            raise
        super().__init__(source, begin=begin, end=end, buffer_size=buffer_size, name=uri,
                         open_seconds=time.monotonic() - started)
        self._headers = headers
        self._certificate_handling = certificate_handling


class RedisStreamFile(_RemoteStream):
    """A seekable read-only stream over a Redis "virtual file" (format/FORMAT.md §13):
    ``redis://host[:port]/<prefix>`` names keys ``<prefix>:<name>:<offset>``. `begin` is the start
    position, `end` the exclusive end; `buffer_size` is the read-ahead for small reads; `timeouts`
    the time limits (see the module docstring). Raises OSError("Failed to open stream: ...") when no
    keys exist under the prefix or Redis is unreachable (TimeoutError when it does not answer)."""

    def __init__(self, uri: str, *, begin: Optional[int] = None, end: Optional[int] = None,
                 buffer_size: Optional[int] = None, timeouts: Optional[Mapping[str, Optional[float]]] = None) -> None:
        _check_range(begin, end)
        started = time.monotonic()
        source = _open_source(uri, _time_options(timeouts))
        self.setup_latency = time.monotonic() - started
        super().__init__(source, begin=begin, end=end, buffer_size=buffer_size, name=uri,
                         open_seconds=self.setup_latency)
        self.response_latencies = []


def _s3_options(s3_access_key_id, s3_secret_access_key, s3_endpoint, s3_config_path, force_http, s3_region_name,
                s3_signature_version, s3_session_token, certificate_handling, timeouts=None,
                for_write: bool = False) -> Dict[str, Any]:
    if s3_signature_version is not None and s3_signature_version.lower() not in ("v4", "s3v4"):
        warnings.warn(
            f"s3_signature_version={s3_signature_version!r} is not supported; requests are signed with SigV4",
            stacklevel=3,
        )
    options = _tls_options(certificate_handling)
    options.update(_time_options(timeouts))
    options.update(_resolve_s3(s3_access_key_id, s3_secret_access_key, s3_endpoint, s3_config_path,
                               s3_session_token, force_http, for_write))
    if s3_region_name is not None:
        options["s3_region"] = s3_region_name
    return options


def _uploader():
    if _boto_upload.botocore_is_stubbed():
        return _boto_upload.boto3_upload  # the caller's mock must see it, as it sees 2.11.1's
    upload = getattr(_native(), "upload_file", None)
    if upload is None:
        raise NotImplementedError(
            "writing arbitrary bytes to s3:// needs tensorizer._C.upload_file(local_path, uri, **remote),"
            " which this build lacks (TensorSerializer writes .tensors files to s3:// without it)"
        )
    return upload


def s3_upload(path: str, target_uri: str, s3_access_key_id: Optional[str] = None,
              s3_secret_access_key: Optional[str] = None, s3_endpoint: Optional[str] = None,
              s3_region_name: Optional[str] = None, s3_signature_version: Optional[str] = None, *,
              s3_config_path=None, force_http: Optional[bool] = None, s3_session_token: Optional[str] = None,
              certificate_handling: Optional[CAInfo] = None,
              timeouts: Optional[Mapping[str, Optional[float]]] = None) -> None:
    """Uploads the local file `path` to `target_uri` (s3://bucket/key). Returns when S3 has it."""
    options = _s3_options(s3_access_key_id, s3_secret_access_key, s3_endpoint, s3_config_path, force_http,
                          s3_region_name, s3_signature_version, s3_session_token, certificate_handling, timeouts,
                          for_write=True)
    try:
        _uploader()(os.fspath(path), target_uri, **options)
    except (TypeError, NotImplementedError):
        raise
    except Exception as e:
        raise _os_error(e, f"Failed to upload {target_uri}") from e


def s3_download(path_uri: str, s3_access_key_id: Optional[str] = None, s3_secret_access_key: Optional[str] = None,
                s3_endpoint: Optional[str] = None, s3_region_name: Optional[str] = None,
                s3_signature_version: Optional[str] = None, buffer_size: Optional[int] = None,
                begin: Optional[int] = None, end: Optional[int] = None,
                certificate_handling: Optional[CAInfo] = None, *, s3_config_path=None,
                force_http: Optional[bool] = None, s3_session_token: Optional[str] = None,
                timeouts: Optional[Mapping[str, Optional[float]]] = None) -> CURLStreamFile:
    """A read stream over s3://bucket/key (a `CURLStreamFile`, as in tensorizer)."""
    _check_range(begin, end)
    options = _s3_options(s3_access_key_id, s3_secret_access_key, s3_endpoint, s3_config_path, force_http,
                          s3_region_name, s3_signature_version, s3_session_token, certificate_handling, timeouts)
    started = time.monotonic()
    source = _open_source(path_uri, options)
    return CURLStreamFile._from_source(source, begin=begin, end=end, buffer_size=buffer_size, name=path_uri,
                                       open_seconds=time.monotonic() - started)


def _s3_download_url(path_uri: str, s3_access_key_id: Optional[str], s3_secret_access_key: Optional[str],
                     s3_endpoint: Optional[str] = default_s3_read_endpoint, s3_region_name: Optional[str] = None,
                     s3_signature_version: Optional[str] = None) -> str:
    """A presigned GET URL for s3://bucket/key, as 2.11.1 made with boto3 for curl (ours reads S3
    natively and does not use it; kept for code that calls it). SigV4 ("v4") by default, the V2
    query signature ("s3") for accel-object endpoints as there; an unsigned plain URL for "" / ""
    keys, or for None / None where botocore finds no credentials. The expiry is aligned to a day
    boundary 1-2 days ahead, so clients make identical URLs. The default endpoint is frozen at import
    as there (None means `default_s3_read_endpoint` now); one without a scheme gets https://."""
    bucket, key = _parse_s3_uri(path_uri)
    given = s3_endpoint or default_s3_read_endpoint
    endpoint = given if "://" in given else "https://" + given
    if s3_access_key_id is None and s3_secret_access_key is None:
        found = _botocore_credentials(_botocore_session())
        s3_access_key_id = found.get("s3_access_key_id", "")
        s3_secret_access_key = found.get("s3_secret_access_key", "")
        token = found.get("s3_session_token")
    else:
        token = None
    parts = urllib.parse.urlsplit(endpoint)
    quoted_key = urllib.parse.quote(key, safe="/~")
    if _is_caios(endpoint):
        host, path = f"{bucket}.{parts.netloc}", f"/{quoted_key}"
    else:
        host, path = parts.netloc, f"/{bucket}/{quoted_key}"
    base = f"{parts.scheme}://{host}{path}"
    if s3_access_key_id == s3_secret_access_key == "":
        return base
    day_s = 86400
    now = int(time.time())
    expiry = now - now % day_s + 2 * day_s
    if not s3_signature_version:
        s3_signature_version = "s3" if "accel-object" in given.lower().split(".") else "v4"
    if s3_signature_version.lower() == "s3":
        return base + "?" + _presign_v2(bucket, quoted_key, s3_access_key_id, s3_secret_access_key, token, expiry)
    region = (s3_region_name or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
              or "us-east-1")
    query = _presign_v4(host, path, region, s3_access_key_id, s3_secret_access_key, token, expiry - now, now)
    return base + "?" + query


def _local_path_of_file_uri(uri: str) -> str:
    parts = urllib.parse.urlsplit(uri)
    if parts.netloc not in ("", "localhost"):
        raise ValueError(f"file:// URIs must name a local path: {uri}")
    return urllib.parse.unquote(parts.path)


def open_stream(
    path_uri: Union[str, bytes, os.PathLike, int],
    mode: str = "rb",
    s3_access_key_id: Optional[str] = None,
    s3_secret_access_key: Optional[str] = None,
    s3_endpoint: Optional[str] = None,
    s3_config_path: Optional[Union[str, bytes, os.PathLike]] = None,
    buffer_size: Optional[int] = None,
    force_http: Optional[bool] = None,
    *,
    begin: Optional[int] = None,
    end: Optional[int] = None,
    s3_region_name: Optional[str] = None,
    s3_signature_version: Optional[str] = None,
    certificate_handling: Optional[CAInfo] = None,
    s3_session_token: Optional[str] = None,
    timeouts: Optional[Mapping[str, Optional[float]]] = None,
) -> Union[CURLStreamFile, RedisStreamFile, typing.BinaryIO]:
    """Opens a local path, ``file://``, ``http(s)://``, ``s3://`` or ``redis://`` location.

    * http(s):// and redis://: mode "rb" only; a seekable `CURLStreamFile` / `RedisStreamFile`
      reading [begin, end) (`end` exclusive).
    * s3://: "rb" gives a `CURLStreamFile` over the object; "wb", "ab", "wb+", "ab+" give a temporary
      file uploaded when closed ("ab" does not append). Credentials: `s3_access_key_id` and
      `s3_secret_access_key` ("" and "" for unsigned requests to public buckets), else
      `s3_config_path` / `_s3_default_config_paths`, else botocore's credential chain where botocore is
      installed, else the AWS environment and ~/.aws/credentials, with `s3_session_token` or
      AWS_SESSION_TOKEN. Endpoint: `s3_endpoint`, the s3cmd host_base, AWS_ENDPOINT_URL_S3,
      AWS_ENDPOINT_URL, botocore's endpoint_url, else `default_s3_read_endpoint` /
      `default_s3_write_endpoint` (format/FORMAT.md §12.1). `force_http` uses
      http:// for the endpoint; `s3_region_name` sets the signing region.
    * anything else, an os.PathLike, or an int file descriptor: the built-in ``open(path, mode,
      buffering=buffer_size or io.DEFAULT_BUFFER_SIZE)``, positioned at `begin`; binary modes only
      (ValueError otherwise); write modes create missing parent directories.

    `buffer_size` is the read-ahead of remote streams (default 1 MiB). `certificate_handling` is a
    `CAInfo` for https:// and S3 over https. `timeouts` maps time limits to seconds for remote
    streams, e.g. ``{"first_byte_timeout": 5, "give_up_after": 15}`` (the names and defaults are in
    the module docstring). Remote opens raise OSError("Failed to open stream: ...")
    (FileNotFoundError for a missing object, PermissionError for rejected credentials where the
    engine reports those kinds).
    """
    if isinstance(path_uri, int) and not isinstance(path_uri, bool):
        return _open_local(path_uri, mode, buffer_size, begin)
    path_uri, scheme = _path_and_scheme(path_uri)
    normalized_mode = "".join(sorted(mode))

    if scheme in ("http", "https", "redis"):
        return _open_http_or_redis(path_uri, scheme, normalized_mode, begin, end, buffer_size, certificate_handling,
                                   timeouts)
    if scheme == "s3":
        if normalized_mode not in ("br", "bw", "ab", "+bw", "+ab"):
            raise ValueError('Only the modes "rb", "wb[+]", and "ab[+]" are valid when opening s3:// streams.')
        if "w" in mode or "a" in mode:
            options = _s3_options(s3_access_key_id, s3_secret_access_key, s3_endpoint, s3_config_path, force_http,
                                  s3_region_name, s3_signature_version, s3_session_token, certificate_handling,
                                  timeouts, for_write=True)
            return typing.cast(typing.BinaryIO, _S3UploadFile(path_uri, options, _uploader()))
        return s3_download(path_uri, s3_access_key_id, s3_secret_access_key, s3_endpoint, s3_region_name,
                           s3_signature_version, buffer_size, begin, end, certificate_handling,
                           s3_config_path=s3_config_path, force_http=force_http, s3_session_token=s3_session_token,
                           timeouts=timeouts)
    if scheme == "file":
        path_uri = _local_path_of_file_uri(path_uri)
    return _open_local(path_uri, mode, buffer_size, begin)


def _path_and_scheme(path_uri: Union[str, bytes, os.PathLike]) -> Tuple[str, Optional[str]]:
    """`path_uri` as a str, and its URI scheme in lower case (None for a path without "://" and for
    any os.PathLike, which is always a local path)."""
    local_only = isinstance(path_uri, os.PathLike)
    path_uri = os.fsdecode(path_uri) if isinstance(path_uri, (bytes, os.PathLike)) else path_uri
    if not isinstance(path_uri, str):
        raise TypeError(f"open_stream expects a path, URI or file descriptor, not {type(path_uri).__name__}")
    scheme, sep, _ = path_uri.partition("://")
    scheme = scheme.lower() if sep and not local_only else None
    return path_uri, scheme


def _open_http_or_redis(path_uri: str, scheme: str, normalized_mode: str, begin: Optional[int], end: Optional[int],
                        buffer_size: Optional[int], certificate_handling: Optional[CAInfo],
                        timeouts: Optional[Mapping[str, Optional[float]]]) -> Union[CURLStreamFile, RedisStreamFile]:
    """`open_stream` for http(s):// and redis:// URIs (`scheme` in lower case): read-only streams."""
    if scheme in ("http", "https"):
        if normalized_mode != "br":
            raise ValueError('Only the mode "rb" is valid when opening http(s):// streams.')
        return CURLStreamFile(path_uri, begin=begin, end=end, buffer_size=buffer_size,
                              certificate_handling=certificate_handling, timeouts=timeouts)
    if normalized_mode != "br":
        raise ValueError('Only the mode "rb" is valid when opening redis:// streams.')
    return RedisStreamFile(path_uri, begin=begin, end=end, buffer_size=buffer_size, timeouts=timeouts)


def _open_local(path: Union[str, int], mode: str, buffer_size: Optional[int], begin: Optional[int]) -> typing.BinaryIO:
    if "b" not in mode:
        raise ValueError('Only binary modes ("rb", "wb", "wb+", etc.) are valid when opening local file streams.')
    if isinstance(path, str) and any(c in mode for c in "wax"):
        parent = os.path.dirname(path)
        if parent:
            os.makedirs(parent, exist_ok=True)
    buffering = io.DEFAULT_BUFFER_SIZE if buffer_size is None else buffer_size
    handle = open(path, mode, buffering=buffering, closefd=not isinstance(path, int))
    try:
        # As tensorizer: start at `begin` (also in append modes, for "ab+" reads). A descriptor the
        # caller passed keeps its position unless `begin` is given; pipes are never sought.
        if begin or (isinstance(path, str) and handle.seekable()):
            handle.seek(begin or 0)
    except BaseException:
        handle.close()
        raise
    return typing.cast(typing.BinaryIO, handle)
