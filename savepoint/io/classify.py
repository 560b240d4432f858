"""What a remote file-system error means: missing, no bucket, denied, throttled, network, server,
other - and whether it is worth retrying; whether AWS credentials are visible at all."""

from __future__ import annotations

import os
import re
from typing import Mapping

_AWS_CODE = re.compile(r"AWS Error ([A-Z_]+)")
_HTTP_STATUS = re.compile(r"HTTP status (\d{3})")
_DENIED = {"ACCESS_DENIED", "INVALID_ACCESS_KEY_ID", "SIGNATURE_DOES_NOT_MATCH", "EXPIRED_TOKEN",
           "INVALID_CLIENT_TOKEN_ID", "UNRECOGNIZED_CLIENT", "MISSING_AUTHENTICATION_TOKEN",
           "INCOMPLETE_SIGNATURE", "INVALID_SIGNATURE", "REQUEST_EXPIRED", "CLIENT_SIGNING_FAILURE"}
_THROTTLED = {"SLOW_DOWN", "THROTTLING", "THROTTLING_EXCEPTION", "REQUEST_LIMIT_EXCEEDED", "TOO_MANY_REQUESTS",
              "PROVISIONED_THROUGHPUT_EXCEEDED", "REQUEST_THROTTLED", "BANDWIDTH_LIMIT_EXCEEDED"}
_NETWORK = {"NETWORK_CONNECTION", "REQUEST_TIMEOUT", "REQUEST_TIME_TOO_SKEWED"}
_SERVER = {"INTERNAL_FAILURE", "SERVICE_UNAVAILABLE", "INTERNAL_ERROR"}


def classify_error(message: str) -> tuple[str, bool]:
    """(kind, retryable) of a remote file-system error message: kind is one of ``missing``,
    ``no_bucket``, ``denied``, ``throttled``, ``network``, ``server``, ``other``."""
    m = _AWS_CODE.search(message)
    code = m.group(1) if m else ""
    st = _HTTP_STATUS.search(message)
    status = int(st.group(1)) if st else 0
    low = message.lower()
    if code == "NO_SUCH_BUCKET" or "bucket does not exist" in low or "nosuchbucket" in low:
        return "no_bucket", False
    if code in ("NO_SUCH_KEY", "RESOURCE_NOT_FOUND") or status == 404 or "path does not exist" in low:
        return "missing", False
    if code in _DENIED or status in (401, 403) or "permission denied" in low or "access denied" in low:
        return "denied", False
    if code in _THROTTLED or status in (429, 503) or "reduce your request rate" in low or "throttl" in low:
        return "throttled", True
    if (code in _NETWORK or "couldn't connect" in low or "could not connect" in low or "connection refused" in low
            or "timed out" in low or "timeout was reached" in low or "curlcode" in low):
        return "network", True
    if code in _SERVER or 500 <= status < 600:
        return "server", True
    return "other", False


def aws_credentials_apparent(opts: Mapping[str, str]) -> bool:
    """Whether any credential source the AWS SDK reads without a network call is present (explicit
    keys, role, profile option, environment, credential/config files, container or web identity)."""
    if opts.get("access_key") or opts.get("role_arn") or opts.get("profile"):
        return True
    env = os.environ
    if env.get("AWS_ACCESS_KEY_ID") or env.get("AWS_WEB_IDENTITY_TOKEN_FILE") or env.get("AWS_PROFILE") \
            or env.get("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI") or env.get("AWS_CONTAINER_CREDENTIALS_FULL_URI"):
        return True
    files = [env.get("AWS_SHARED_CREDENTIALS_FILE") or os.path.expanduser("~/.aws/credentials"),
             env.get("AWS_CONFIG_FILE") or os.path.expanduser("~/.aws/config")]
    return any(os.path.isfile(f) for f in files)
