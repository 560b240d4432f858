"""Paths and URIs: local paths, ``file:`` URIs and remote URIs (``s3://``, ``s3a://``, ``s3n://``,
``s3p://``, ``gs://``, ``hdfs://``) - their scheme, family, parts, parent, containment and one
canonical spelling. Pure string work: no file system is touched (except ``realpath`` for local
containment)."""

from __future__ import annotations

import os
import posixpath
import re
from urllib.parse import unquote, urlparse

from ..errors import FStateError, InvalidArgumentError


def strip_file_scheme(path: str) -> str:
    """``file:/a/b``, ``file:///a/b`` and ``file://localhost/a/b`` → ``/a/b``; plain paths unchanged."""
    if path.startswith("file:"):
        parsed = urlparse(path)
        if parsed.netloc not in ("", "localhost"):
            raise FStateError(f"file URI with a host is not supported: {path}")
        return unquote(parsed.path) or "/"
    return path


_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")

#: URI scheme → file-system family (Flink spells S3 s3://, s3a:// (Hadoop), s3p:// (Presto))
FAMILIES = {"s3": "s3", "s3a": "s3", "s3n": "s3", "s3p": "s3", "gs": "gcs", "gcs": "gcs", "hdfs": "hdfs"}


def scheme_of(path: str) -> str:
    if path.startswith("file:"):
        return "file"
    m = _SCHEME.match(path)
    return path[: m.end() - 3].lower() if m else "file"


def is_remote(path: str) -> bool:
    return scheme_of(path) != "file"


def family_of(path: str) -> str:
    s = scheme_of(path)
    return "file" if s == "file" else FAMILIES.get(s, s)


def split_uri(uri: str) -> tuple[str, str, str]:
    """``s3a://bucket/a//b/`` → (``s3``, ``bucket``, ``a/b``): family, authority (bucket or
    host:port), key with '.' and '..' resolved and no leading/trailing slash."""
    m = _SCHEME.match(uri)
    if not m:
        raise InvalidArgumentError(f"not a URI: {uri}")
    rest = uri[m.end():]
    authority, _, key = rest.partition("/")
    key = posixpath.normpath("/" + key).lstrip("/") if key else ""
    return family_of(uri), authority, "" if key == "." else key


def join(base: str, name: str) -> str:
    """``name`` inside directory ``base`` (a local path or a URI)."""
    if is_remote(base):
        return base.rstrip("/") + "/" + name.lstrip("/")
    return os.path.join(strip_file_scheme(base), name)


def parent_of(path: str) -> str:
    """The directory holding ``path`` (a local path or a URI; a bucket root stays the root)."""
    if is_remote(path):
        m = _SCHEME.match(path)
        head, rest = path[: m.end()], path[m.end():].rstrip("/")
        if "/" not in rest:
            return head + rest
        return head + rest.rsplit("/", 1)[0]
    return os.path.dirname(strip_file_scheme(path).rstrip("/")) or "."


def is_within(path: str, directory: str) -> bool:
    """Whether ``path`` lies in ``directory`` (or is it). Local paths compare by real path; URIs by
    family (s3 = s3a = s3p), bucket/host and key prefix: another bucket, prefix or scheme is outside."""
    if is_remote(path) != is_remote(directory):
        return False
    if not is_remote(path):
        base = os.path.realpath(strip_file_scheme(directory))
        return os.path.commonpath([base, os.path.realpath(strip_file_scheme(path))]) == base
    fam, auth, key = split_uri(path)
    dfam, dauth, dkey = split_uri(directory)
    if (fam, auth) != (dfam, dauth):
        return False
    return not dkey or key == dkey or key.startswith(dkey + "/")


def canonical(path: str) -> str:
    """One spelling per location, for comparing paths: local → absolute path, URIs → family scheme
    (``s3a://b/x/`` → ``s3://b/x``)."""
    if not is_remote(path):
        return os.path.abspath(strip_file_scheme(path))
    fam, auth, key = split_uri(path)
    return f"{fam}://{auth}/{key}".rstrip("/") if key else f"{fam}://{auth}"
