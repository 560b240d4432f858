"""The ``pyarrow.fs`` file systems behind :class:`~.remote.RemoteFileIO`, made from fstate's
options: S3 (with AWS profiles), Google Cloud Storage and HDFS."""

from __future__ import annotations

import configparser
import os
import re
from typing import Any

from ..errors import InvalidArgumentError, StorageError
from .options import bool_option, number_option


def aws_profile(name: str) -> dict[str, str]:
    """Keys and region of a named profile from the shared credentials/config files."""
    env = os.environ
    found: dict[str, str] = {}
    for path, section in ((env.get("AWS_CONFIG_FILE") or os.path.expanduser("~/.aws/config"),
                           "default" if name == "default" else f"profile {name}"),
                          (env.get("AWS_SHARED_CREDENTIALS_FILE") or os.path.expanduser("~/.aws/credentials"), name)):
        cp = configparser.ConfigParser()
        try:
            cp.read(path)
        except configparser.Error as e:
            raise InvalidArgumentError(f"cannot parse AWS config: {e}", path) from None
        if cp.has_section(section):
            found.update({k: v for k, v in cp.items(section)})
    if not found:
        raise InvalidArgumentError(f"AWS profile '{name}' is not in ~/.aws/credentials or ~/.aws/config")
    return found


def s3_filesystem(opts: dict[str, str]):
    import pyarrow.fs as pafs

    kw: dict[str, Any] = {}
    if "profile" in opts:
        prof = aws_profile(opts["profile"])
        for src, dst in (("aws_access_key_id", "access_key"), ("aws_secret_access_key", "secret_key"),
                         ("aws_session_token", "session_token"), ("region", "region")):
            if prof.get(src) and dst not in opts:
                kw[dst] = prof[src]
    for name in ("access_key", "secret_key", "session_token", "region", "role_arn", "session_name", "external_id"):
        if opts.get(name):
            kw[name] = opts[name]
    if ("access_key" in kw) != ("secret_key" in kw):
        raise InvalidArgumentError("file-system options access_key and secret_key go together")
    endpoint = opts.get("endpoint")
    scheme = opts.get("scheme")
    if endpoint:
        m = re.match(r"^(https?)://", endpoint, re.I)
        if m:
            scheme = scheme or m.group(1).lower()
            endpoint = endpoint[m.end():]
        kw["endpoint_override"] = endpoint.rstrip("/")
    if scheme:
        if scheme not in ("http", "https"):
            raise InvalidArgumentError(f"file-system option scheme must be http or https, not '{scheme}'")
        kw["scheme"] = scheme
    if bool_option(opts, "anonymous"):
        kw["anonymous"] = True
    if "path_style" in opts:
        # pyarrow: virtual-host addressing unless an endpoint is given; path style = never virtual
        kw["force_virtual_addressing"] = not bool_option(opts, "path_style")
    for name in ("connect_timeout", "request_timeout"):
        v = number_option(opts, name)
        if v is not None:
            kw[name] = v
    if opts.get("ca_file"):
        kw["tls_ca_file_path"] = opts["ca_file"]
    attempts = int(number_option(opts, "retries", int, 3))
    kw["retry_strategy"] = pafs.AwsStandardS3RetryStrategy(max_attempts=max(1, attempts))
    return pafs.S3FileSystem(**kw)


def gcs_filesystem(opts: dict[str, str]):
    import datetime as dt

    import pyarrow.fs as pafs

    if not hasattr(pafs, "GcsFileSystem"):
        raise StorageError("this pyarrow was built without Google Cloud Storage support")
    kw: dict[str, Any] = {}
    endpoint = opts.get("endpoint")
    scheme = opts.get("scheme")
    if endpoint:
        m = re.match(r"^(https?)://", endpoint, re.I)
        if m:
            scheme = scheme or m.group(1).lower()
            endpoint = endpoint[m.end():]
        kw["endpoint_override"] = endpoint.rstrip("/")
    if scheme:
        kw["scheme"] = scheme
    if bool_option(opts, "anonymous"):
        kw["anonymous"] = True
    if opts.get("access_token"):
        kw["access_token"] = opts["access_token"]
        kw["credential_token_expiration"] = dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1)
    for name in ("project_id", "default_bucket_location"):
        if opts.get(name):
            kw[name] = opts[name]
    return pafs.GcsFileSystem(**kw)


def hdfs_filesystem(authority: str, opts: dict[str, str]):
    import pyarrow.fs as pafs

    host, _, port = authority.partition(":")
    kw: dict[str, Any] = {"host": host or "default", "port": int(port) if port.isdigit() else 0}
    for name in ("user", "kerb_ticket"):
        if opts.get(name):
            kw[name] = opts[name]
    for name in ("replication", "buffer_size"):
        v = number_option(opts, name, int)
        if v is not None:
            kw[name] = v
    try:
        return pafs.HadoopFileSystem(**kw)
    except (OSError, ImportError) as e:
        raise StorageError(f"cannot connect to HDFS (pyarrow needs libhdfs, JAVA_HOME and the Hadoop CLASSPATH): {e}",
                           f"hdfs://{authority}") from None
