"""How s3:// opens find their credentials and endpoint, and how presigned S3 URLs are signed.

Private to `tensorizer.stream_io`, which imports every name here:

* `_get_s3cfg_values` reads the s3cmd config (`_ParsedCredentials`), as 2.11.1 does;
* `_botocore_session`, `_botocore_credentials` and `_botocore_endpoint` ask botocore, where it is
  installed, for the keys and endpoint_url that 2.11.1's boto3 clients would have found;
* `_resolve_s3` (and `_uri_options`, for what TensorSerializer / TensorDeserializer open themselves)
  turn these into the native engine's options (format/FORMAT.md §12.1);
* `_presign_v2` / `_presign_v4` sign the URLs of `stream_io._s3_download_url` (which stays there:
  its default endpoint is that module's `default_s3_read_endpoint` at import); `_parse_s3_uri` and
  `_is_caios` are 2.11.1's small helpers.

`tensorizer.stream_io`'s settings and replaceable helpers (`_s3_default_config_paths`,
`default_s3_read_endpoint`, `default_s3_write_endpoint`, `_enforce_scheme`, `_get_s3cfg_values`)
are read from that module at each call, so assigning them there takes effect as before the split.
"""

from __future__ import annotations

import functools
import os
import time
import typing
import urllib.parse
from typing import Any, Dict, Optional, Tuple


def _stream_io():
    """The public module `tensorizer.stream_io`, whose settings and replaceable helpers are read from
    it at each call rather than copied here."""
    from . import stream_io

    return stream_io


class _ParsedCredentials(typing.NamedTuple):
    """What an s3cmd config provides (2.11.1's record; None where absent)."""

    config_file: Optional[str]
    s3_endpoint: Optional[str]
    s3_access_key: Optional[str]
    s3_secret_key: Optional[str]
    use_https: Optional[bool]


@functools.lru_cache(maxsize=None)
def _get_s3cfg_values(config_paths=None) -> _ParsedCredentials:
    """The [default] section of the first readable s3cmd config among `config_paths` (a path or a
    tuple of them; `_s3_default_config_paths` when empty), as in 2.11.1: cached, all fields None
    when no file is readable, ValueError when the file has no [default] section."""
    import configparser

    if not config_paths:
        config_paths = _stream_io()._s3_default_config_paths
    elif isinstance(config_paths, (str, bytes, os.PathLike)):
        config_paths = (config_paths,)
    config = configparser.ConfigParser()
    for config_path in config_paths:
        if config.read((config_path,)):
            break
    else:
        return _ParsedCredentials(None, None, None, None, None)
    if "default" not in config:
        raise ValueError(f"No default section in {config_path}")
    section = config["default"]
    use_https = {"True": True, "False": False}.get(section.get("use_https"))
    return _ParsedCredentials(os.fsdecode(config_path), section.get("host_base"), section.get("access_key"),
                              section.get("secret_key"), use_https)


def _parse_s3_uri(uri: str) -> Tuple[str, str]:
    """(bucket, key) of s3://bucket/key; ValueError for another scheme (2.11.1's helper)."""
    parts = urllib.parse.urlparse(uri)
    if parts.scheme.lower() != "s3":
        raise ValueError(f"Invalid S3 URI: {uri}")
    return parts.netloc, parts.path.lstrip("/")


def _is_caios(endpoint: str) -> bool:
    """Whether `endpoint` is CoreWeave AI Object Storage (virtual-hosted addressing only)."""
    host = urllib.parse.urlparse(endpoint if "//" in endpoint else "//" + endpoint).netloc
    return host.lower() in {"cwobject.com", "cwlota.com"}


def _botocore_session():
    """A fresh botocore session, or None without botocore. Fresh at each open, as 2.11.1's boto3
    clients are, so environment and config-file changes are seen."""
    try:
        import botocore.session
    except ImportError:
        return None
    return botocore.session.Session()


def _botocore_credentials(session) -> Dict[str, str]:
    """Keys (and session token) from botocore's credential chain: the environment, profiles, assume
    role, web identity / IRSA, SSO caches, container and instance metadata. Empty when none."""
    credentials = session.get_credentials() if session is not None else None
    if credentials is None:
        return {}
    frozen = credentials.get_frozen_credentials()  # refreshed first where they expire
    out = {"s3_access_key_id": frozen.access_key, "s3_secret_access_key": frozen.secret_key}
    if frozen.token:
        out["s3_session_token"] = frozen.token
    return out


def _botocore_endpoint(session) -> Optional[str]:
    """The endpoint_url of the active profile's s3 section, else of the profile (as 2.11.1 asks)."""
    if session is None:
        return None
    scoped = session.get_scoped_config()
    s3_section = scoped.get("s3")
    return (isinstance(s3_section, dict) and s3_section.get("endpoint_url")) or scoped.get("endpoint_url") or None


def _resolve_s3(s3_access_key_id, s3_secret_access_key, s3_endpoint, s3_config_path, s3_session_token,
                force_http, for_write: bool) -> Dict[str, Any]:
    """The native options for an s3:// open. The native client resolves credentials and endpoint
    itself (explicit, the s3cmd config, the AWS environment, ~/.aws/credentials; format/FORMAT.md
    §12.1); this adds, in 2.11.1's order, what only Python can see:

    * the s3cmd config found through `_s3_default_config_paths` (handed on by path);
    * where no keys are given or in that config and botocore is installed, botocore's credentials;
    * where s3_endpoint, the config's host_base, AWS_ENDPOINT_URL_S3 and AWS_ENDPOINT_URL name no
      endpoint: botocore's configured endpoint_url (http:// allowed, as from the environment), else
      `default_s3_write_endpoint` / `default_s3_read_endpoint` as they are now.
    """
    public = _stream_io()
    out = {"s3_access_key_id": s3_access_key_id, "s3_secret_access_key": s3_secret_access_key,
           "s3_session_token": s3_session_token, "s3_endpoint": s3_endpoint,
           "s3_config_path": None if s3_config_path is None else os.fsdecode(s3_config_path),
           "force_http": None if force_http is None else bool(force_http)}
    if s3_config_path is not None and not os.path.exists(s3_config_path):
        return {k: v for k, v in out.items() if v is not None}  # the native client reports it
    parsed = _ParsedCredentials(None, None, None, None, None)
    if None in (s3_access_key_id, s3_secret_access_key):  # as there, explicit keys skip the config
        try:
            parsed = public._get_s3cfg_values(s3_config_path)
        except ValueError:
            pass
        out["s3_config_path"] = out["s3_config_path"] or parsed.config_file
        if out["s3_config_path"] is None:
            # None of _s3_default_config_paths is readable: the native client must not read
            # ~/.s3cfg on its own (those paths are the only ones 2.11.1 looks at).
            out["s3_no_config"] = True
    session = None
    keys_in_config = parsed.s3_access_key and parsed.s3_secret_key
    if s3_access_key_id is None and s3_secret_access_key is None and not keys_in_config:
        session = _botocore_session()
        found = _botocore_credentials(session)
        if s3_session_token is not None:
            found.pop("s3_session_token", None)
        out.update(found)
    if not (s3_endpoint or parsed.s3_endpoint or os.environ.get("AWS_ENDPOINT_URL_S3")
            or os.environ.get("AWS_ENDPOINT_URL")):
        endpoint = _botocore_endpoint(session or _botocore_session())
        if endpoint and endpoint.lower().startswith("http://"):
            out["force_http"] = True
        default = public.default_s3_write_endpoint if for_write else public.default_s3_read_endpoint
        out["s3_endpoint"] = endpoint or default
    elif s3_endpoint:
        # As 2.11.1, an explicit endpoint goes through `_enforce_scheme`, looked up at each open, so
        # code that replaces it (2.11.1's own tests do, to reach an http:// server) decides what is
        # allowed. An http:// result reaches the native client with force_http, which keeps it.
        config_http = force_http is None and parsed.use_https is False
        url = public._enforce_scheme(s3_endpoint, False, bool(force_http) or config_http)
        out["s3_endpoint"] = url
        if url.lower().startswith("http://"):
            out["force_http"] = True
    return {k: v for k, v in out.items() if v is not None}


def _uri_options(spec: str, for_write: bool = False) -> Dict[str, Any]:
    """Native options for a URI that TensorSerializer / TensorDeserializer open themselves: for s3://
    what `open_stream` would use (see _resolve_s3), else none."""
    if not spec.lower().startswith("s3://"):
        return {}
    return _resolve_s3(None, None, None, None, None, None, for_write)


def _presign_v2(bucket: str, quoted_key: str, access_key: str, secret_key: str, token: Optional[str],
                expiry: int) -> str:
    """The query of a V2 (HMAC-SHA1) presigned GET of /bucket/key expiring at `expiry`."""
    import base64
    import hashlib
    import hmac

    amz = f"x-amz-security-token:{token}\n" if token else ""
    to_sign = f"GET\n\n\n{expiry}\n{amz}/{bucket}/{quoted_key}"
    signature = base64.b64encode(hmac.new(secret_key.encode(), to_sign.encode(), hashlib.sha1).digest()).decode()
    query = {"AWSAccessKeyId": access_key, "Signature": signature, "Expires": str(expiry)}
    if token:
        query["x-amz-security-token"] = token
    return urllib.parse.urlencode(query, quote_via=urllib.parse.quote)


def _presign_v4(host: str, path: str, region: str, access_key: str, secret_key: str, token: Optional[str],
                expires_s: int, now: int) -> str:
    """The query of a SigV4 presigned GET of `path` on `host` (UNSIGNED-PAYLOAD, host signed)."""
    import hashlib
    import hmac

    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
    scope = f"{stamp[:8]}/{region}/s3/aws4_request"
    query = {"X-Amz-Algorithm": "AWS4-HMAC-SHA256", "X-Amz-Credential": f"{access_key}/{scope}",
             "X-Amz-Date": stamp, "X-Amz-Expires": str(expires_s), "X-Amz-SignedHeaders": "host"}
    if token:
        query["X-Amz-Security-Token"] = token
    canonical_query = "&".join(f"{urllib.parse.quote(k, safe='-_.~')}={urllib.parse.quote(v, safe='-_.~')}"
                               for k, v in sorted(query.items()))
    canonical = f"GET\n{path}\n{canonical_query}\nhost:{host}\n\nhost\nUNSIGNED-PAYLOAD"
    to_sign = f"AWS4-HMAC-SHA256\n{stamp}\n{scope}\n{hashlib.sha256(canonical.encode()).hexdigest()}"
    signing_key = ("AWS4" + secret_key).encode()
    for part in (stamp[:8], region, "s3", "aws4_request"):
        signing_key = hmac.new(signing_key, part.encode(), hashlib.sha256).digest()
    signature = hmac.new(signing_key, to_sign.encode(), hashlib.sha256).hexdigest()
    return canonical_query + "&X-Amz-Signature=" + signature
