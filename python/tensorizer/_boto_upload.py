"""S3 uploads through the caller's boto3 while the caller's botocore answers requests in-process.

Our uploads go through the engine's own S3 client, which no Python mock can see. tensorizer 2.11.1
uploads with boto3, so a caller that mocks botocore (moto's ``mock_s3`` / ``mock_aws``, as
2.11.1's own ``TestS3::test_upload`` does) catches its uploads in that mock. To be caught by the
same mock, an upload made while such a stub is active goes through boto3 as 2.11.1's does; every
other upload stays native.
"""

import sys
from typing import Any, Dict, Optional
from urllib.parse import urlparse


def botocore_is_stubbed() -> bool:
    """Whether the caller's botocore (already imported; never imported here) has an in-process
    responder: a "before-send" handler among its built-in handlers, which botocore itself never
    registers and moto's stubber does (active while its ``enabled`` is true)."""
    handlers = sys.modules.get("botocore.handlers")
    for entry in getattr(handlers, "BUILTIN_HANDLERS", ()):
        if len(entry) >= 2 and entry[0] == "before-send" and getattr(entry[1], "enabled", True):
            return True
    return False


def _endpoint_url(endpoint: Optional[str], force_http: Optional[bool]) -> Optional[str]:
    if not endpoint or "://" in endpoint:
        return endpoint
    return ("http://" if force_http else "https://") + endpoint


def boto3_upload(local_path: str, uri: str, **options: Any) -> None:
    """Uploads `local_path` to s3://bucket/key with boto3, with the credentials, endpoint and region
    the native upload would use (the options of ``stream_io._s3_options``)."""
    import boto3
    import botocore

    parsed = urlparse(uri)
    bucket, key = parsed.netloc, parsed.path.lstrip("/")
    config: Dict[str, Any] = {}
    auth: Dict[str, Any] = {}
    if options.get("s3_region"):
        config["region_name"] = options["s3_region"]
    if options.get("s3_access_key_id") == options.get("s3_secret_access_key") == "":
        config["signature_version"] = botocore.UNSIGNED
    else:
        auth = {"aws_access_key_id": options.get("s3_access_key_id"),
                "aws_secret_access_key": options.get("s3_secret_access_key"),
                "aws_session_token": options.get("s3_session_token")}
    client = boto3.session.Session().client(
        "s3", endpoint_url=_endpoint_url(options.get("s3_endpoint"), options.get("force_http")),
        config=boto3.session.Config(**config), **auth)
    client.upload_file(local_path, bucket, key)
