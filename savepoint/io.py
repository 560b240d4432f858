"""The IO seam: every file fstate reads or writes goes through a :class:`FileIO`.

``io_for(path, options)`` is the single entry point. Local paths and ``file:`` URIs are served by
:class:`LocalFileIO`; ``s3://`` (and Flink's spellings ``s3a://``, ``s3p://``, ``s3n://``),
``gs://`` and ``hdfs://`` by :class:`RemoteFileIO` over ``pyarrow.fs`` (S3FileSystem,
GcsFileSystem, HadoopFileSystem where pyarrow supports them on the machine).

File-system options (endpoint, region, path-style access, credentials, retries) come from, later
ones winning: the YAML file named by ``FSTATE_FS_CONFIG``, ``FSTATE_FS_OPTIONS`` (``k=v,k=v`` or a
JSON object), the process defaults (:func:`set_default_fs_options`, set by the CLI's
``--fs-option``/``--fs-config``), and the options given to a call (``fs_options=`` of the Python API).
Credentials otherwise come from where the cloud SDKs look (AWS environment variables, profile
files, instance metadata). Options travel with the work: a :class:`~.streams.StreamSource` carries
them to the Spark executor that opens the file, so executors need no configuration of their own.

Remote errors become :class:`~.errors.StorageError` (or MissingStateFileError) naming the URI;
throttling, network failures and server errors are retried with backoff first.
"""

from __future__ import annotations

import configparser
import json
import os
import posixpath
import re
import threading
import time
from abc import ABC, abstractmethod
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Mapping
from urllib.parse import unquote, urlparse

from .errors import FStateError, InvalidArgumentError, MissingStateFileError, SavepointNotFoundError, StorageError

METADATA_FILE = "_metadata"
FS_OPTIONS_ENV = "FSTATE_FS_OPTIONS"
FS_CONFIG_ENV = "FSTATE_FS_CONFIG"
COPY_CHUNK = 8 * 1024 * 1024

# ---------------------------------------------------------------------------------------------
# paths and URIs


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


# ---------------------------------------------------------------------------------------------
# options

_COMMON = {"retries", "retry_wait"}
KNOWN_OPTIONS = {
    "s3": {"endpoint", "region", "path_style", "access_key", "secret_key", "session_token", "profile", "anonymous",
           "scheme", "connect_timeout", "request_timeout", "role_arn", "session_name", "external_id", "ca_file"} | _COMMON,
    "gcs": {"endpoint", "scheme", "anonymous", "access_token", "project_id", "default_bucket_location"} | _COMMON,
    "hdfs": {"user", "kerb_ticket", "replication", "buffer_size"} | _COMMON,
}
_ALL_KNOWN = set().union(*KNOWN_OPTIONS.values())
_ALIASES = {
    "endpoint_override": "endpoint", "endpoint_url": "endpoint",
    "path_style_access": "path_style", "force_path_style": "path_style", "path_style_addressing": "path_style",
    "endpoint_region": "region", "aws_region": "region",
    "access_key_id": "access_key", "aws_access_key_id": "access_key",
    "secret_access_key": "secret_key", "aws_secret_access_key": "secret_key",
    "aws_session_token": "session_token", "aws_profile": "profile",
    "max_attempts": "retries", "retry_max_attempts": "retries", "attempts_maximum": "retries",
    "tls_ca_file_path": "ca_file",
}
_SCOPES = {"s3": "s3", "s3a": "s3", "s3n": "s3", "s3p": "s3", "gs": "gcs", "gcs": "gcs", "hdfs": "hdfs"}
_SECRET = re.compile(r"secret|token|password|access_key")
_BOOL = {"true": True, "1": True, "yes": True, "on": True, "false": False, "0": False, "no": False, "off": False}

FsOptions = tuple[tuple[str, str], ...]


def canonical_option(key: str) -> str:
    """An option name as fstate stores it: ``endpoint`` or scoped ``s3.endpoint``. Accepts Flink's
    and Hadoop's spellings (``s3.endpoint``, ``s3.path.style.access``, ``fs.s3a.access.key``, ...)."""
    k = key.strip().lower().replace("-", "_")
    if k.startswith("fs.") and k[3:].split(".", 1)[0] in _SCOPES:
        k = k[3:]
    scope = None
    head, dot, rest = k.partition(".")
    if dot and head in _SCOPES:
        scope, k = _SCOPES[head], rest
    k = k.replace(".", "_")
    k = _ALIASES.get(k, k)
    known = KNOWN_OPTIONS[scope] if scope else _ALL_KNOWN
    if k not in known:
        raise InvalidArgumentError(
            f"unknown file-system option '{key}' (known: {', '.join(sorted(known))}; prefix with s3., gcs. or hdfs. "
            "to apply to one file system)")
    return f"{scope}.{k}" if scope else k


def normalize_fs_options(options: Mapping[str, Any] | Iterable[tuple[str, Any]] | None) -> FsOptions:
    """Canonical, hashable, picklable form of an options mapping (values as strings)."""
    if not options:
        return ()
    items = options.items() if isinstance(options, Mapping) else options
    out: dict[str, str] = {}
    for k, v in items:
        if v is None:
            continue
        out[canonical_option(str(k))] = str(v).lower() if isinstance(v, bool) else str(v)
    return tuple(sorted(out.items()))


def parse_fs_option_args(items: Iterable[str] | None) -> dict[str, str]:
    """``["endpoint=http://h:9000", "path_style=true"]`` (the CLI's repeated ``--fs-option``)."""
    result = {}
    for item in items or []:
        k, sep, v = item.partition("=")
        if not sep or not k.strip():
            raise InvalidArgumentError(f"--fs-option expects key=value, got '{item}'")
        result[k.strip()] = v.strip()
    return result


def _flatten(d: Mapping, prefix: str = "") -> dict[str, Any]:
    out = {}
    for k, v in d.items():
        name = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(_flatten(v, name + "."))
        else:
            out[name] = v
    return out


def load_fs_config(path: str) -> dict[str, Any]:
    """A YAML file of options; nested mappings join with '.' (``s3: {endpoint: ...}`` = ``s3.endpoint``);
    an optional top-level ``fs`` mapping is taken as the whole file."""
    import yaml

    try:
        with open(strip_file_scheme(path), encoding="utf-8") as f:
            data = yaml.safe_load(f)
    except OSError as e:
        raise InvalidArgumentError(f"cannot read the file-system config: {e.strerror or e}", path) from None
    except yaml.YAMLError as e:
        raise InvalidArgumentError(f"not valid YAML: {e}", path) from None
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise InvalidArgumentError("the file-system config must be a mapping of option: value", path)
    if set(data) == {"fs"} and isinstance(data["fs"], Mapping):
        data = data["fs"]
    return _flatten(data)


_ENV_CACHE: dict[tuple, dict[str, Any]] = {}


def _env_options() -> dict[str, Any]:
    """Options from FSTATE_FS_CONFIG and FSTATE_FS_OPTIONS (parsed again only when they change)."""
    cfg = os.environ.get(FS_CONFIG_ENV)
    try:
        mtime = os.stat(strip_file_scheme(cfg)).st_mtime_ns if cfg else None
    except OSError:
        mtime = None
    key = (cfg, mtime, os.environ.get(FS_OPTIONS_ENV))
    cached = _ENV_CACHE.get(key)
    if cached is None:
        cached = _parse_env_options()
        _ENV_CACHE.clear()
        _ENV_CACHE[key] = cached
    return dict(cached)


def _parse_env_options() -> dict[str, Any]:
    out: dict[str, Any] = {}
    cfg = os.environ.get(FS_CONFIG_ENV)
    if cfg:
        out.update(load_fs_config(cfg))
    raw = os.environ.get(FS_OPTIONS_ENV, "").strip()
    if raw:
        if raw.startswith("{"):
            try:
                data = json.loads(raw)
            except ValueError as e:
                raise InvalidArgumentError(f"{FS_OPTIONS_ENV} is not valid JSON: {e}") from None
            out.update(_flatten(data))
        else:
            out.update(parse_fs_option_args([p for p in raw.split(",") if p.strip()]))
    return out


_DEFAULTS: FsOptions = ()


def set_default_fs_options(options: Mapping[str, Any] | None, *, export_env: bool = False) -> FsOptions:
    """Options used by every call in this process that gives none of its own (the CLI sets them from
    ``--fs-option``/``--fs-config``). ``export_env`` also puts them into ``FSTATE_FS_OPTIONS`` so that
    processes started afterwards (a local Spark's JVM and its Python workers) inherit them."""
    global _DEFAULTS
    _DEFAULTS = normalize_fs_options(options)
    if export_env:
        if _DEFAULTS:
            os.environ[FS_OPTIONS_ENV] = json.dumps(dict(_DEFAULTS))
        else:
            os.environ.pop(FS_OPTIONS_ENV, None)
    return _DEFAULTS


def resolve_fs_options(options: Mapping[str, Any] | FsOptions | None = None) -> FsOptions:
    """The options in force: config file and env, then the process defaults, then ``options``."""
    merged: dict[str, str] = dict(normalize_fs_options(_env_options()))
    merged.update(_DEFAULTS)
    if options:
        merged.update(normalize_fs_options(options))
    return tuple(sorted(merged.items()))


def options_for(family: str, options: FsOptions) -> dict[str, str]:
    """The options that apply to one file-system family: unscoped ones, overridden by scoped ones."""
    out = {k: v for k, v in options if "." not in k and k in KNOWN_OPTIONS.get(family, set())}
    out.update({k.split(".", 1)[1]: v for k, v in options if k.startswith(family + ".")})
    return out


def describe_options(options: FsOptions) -> str:
    """For messages: secrets masked."""
    return ", ".join(f"{k}={'***' if _SECRET.search(k) else v}" for k, v in options) or "none"


def _bool_option(opts: dict, name: str, default: bool = False) -> bool:
    if name not in opts:
        return default
    v = _BOOL.get(opts[name].strip().lower())
    if v is None:
        raise InvalidArgumentError(f"file-system option {name} must be true or false, not '{opts[name]}'")
    return v


def _num_option(opts: dict, name: str, kind=float, default=None):
    if name not in opts:
        return default
    try:
        v = kind(opts[name])
    except ValueError:
        raise InvalidArgumentError(f"file-system option {name} must be a number, not '{opts[name]}'") from None
    if v < 0:
        raise InvalidArgumentError(f"file-system option {name} must not be negative")
    return v


# ---------------------------------------------------------------------------------------------
# the interface


class FileIO(ABC):
    """Minimal file-system interface used by the format core, the readers and the writers."""

    @abstractmethod
    def read(self, path: str) -> bytes: ...

    @abstractmethod
    def read_range(self, path: str, offset: int, length: int) -> bytes:
        """At most ``length`` bytes from ``offset`` (all to the end when ``length`` < 0); never more
        than the file holds, whatever ``length`` says."""

    @abstractmethod
    def exists(self, path: str) -> bool: ...

    @abstractmethod
    def is_dir(self, path: str) -> bool: ...

    @abstractmethod
    def size(self, path: str) -> int: ...

    @abstractmethod
    def list_dir(self, path: str) -> list[str]:
        """Names of the entries directly in a directory, sorted."""

    @abstractmethod
    def join(self, base: str, name: str) -> str: ...

    # -- writing -----------------------------------------------------------------------------
    @abstractmethod
    def open_output(self, path: str):
        """A context manager giving a binary stream that creates (or replaces) ``path``; the file
        is complete when the block ends without an error."""

    @abstractmethod
    def open_input(self, path: str):
        """A context manager giving a seekable binary stream over ``path``."""

    @abstractmethod
    def delete(self, path: str) -> None:
        """Remove a file; no error if it is already gone."""

    @abstractmethod
    def list_files(self, path: str) -> list[str]:
        """Every file under directory ``path`` (recursively), as full paths/URIs; [] if none."""

    def write(self, path: str, data: bytes) -> None:
        """Create (or replace) ``path`` with ``data`` as a whole."""
        with self.open_output(path) as f:
            f.write(data)

    def accepts(self, path: str) -> bool:
        """Whether this IO serves ``path`` (its scheme, bucket or host)."""
        return not is_remote(path)

    @property
    def atomic_rename(self) -> bool:
        """Whether a directory can be renamed into place (local: yes; object stores: no)."""
        return False


class LocalFileIO(FileIO):
    """Local files. Every OS-level failure (missing file, permissions, a path with a NUL byte from a
    corrupt handle, a file that is a directory) becomes an FStateError naming the path."""

    def _p(self, path: str) -> str:
        return strip_file_scheme(path)

    @contextmanager
    def _errors(self, p: str):
        try:
            yield
        except FileNotFoundError:
            raise MissingStateFileError("file does not exist", p) from None
        except IsADirectoryError:
            raise FStateError("is a directory, expected a file", p) from None
        except PermissionError:
            raise FStateError("permission denied", p) from None
        except (OSError, ValueError) as e:
            raise FStateError(f"cannot read: {e}", repr(p) if "\x00" in p else p) from None

    def read(self, path: str) -> bytes:
        p = self._p(path)
        with self._errors(p):
            with open(p, "rb") as f:
                return f.read()

    def read_range(self, path: str, offset: int, length: int) -> bytes:
        p = self._p(path)
        with self._errors(p):
            with open(p, "rb") as f:
                # never ask for more than the file holds: a corrupt length must not allocate gigabytes
                available = max(0, os.fstat(f.fileno()).st_size - offset)
                f.seek(offset)
                return f.read(available if length is None or length < 0 else min(length, available))

    def exists(self, path: str) -> bool:
        p = self._p(path)
        with self._errors(p):
            return os.path.exists(p)

    def is_dir(self, path: str) -> bool:
        p = self._p(path)
        with self._errors(p):
            return os.path.isdir(p)

    def size(self, path: str) -> int:
        p = self._p(path)
        with self._errors(p):
            return os.path.getsize(p)

    def list_dir(self, path: str) -> list[str]:
        p = self._p(path)
        with self._errors(p):
            return sorted(os.listdir(p))

    def join(self, base: str, name: str) -> str:
        return os.path.join(self._p(base), name)

    @contextmanager
    def open_output(self, path: str):
        p = self._p(path)
        try:
            f = open(p, "wb")
        except OSError as e:
            raise FStateError(f"cannot write: {e.strerror or e}", p) from None
        with f:
            yield f

    @contextmanager
    def open_input(self, path: str):
        p = self._p(path)
        with self._errors(p):
            f = open(p, "rb")
        with f:
            yield f

    def write(self, path: str, data: bytes) -> None:
        with self.open_output(path) as f:
            f.write(data)

    def delete(self, path: str) -> None:
        try:
            os.remove(self._p(path))
        except FileNotFoundError:
            pass

    def list_files(self, path: str) -> list[str]:
        p = self._p(path)
        out = []
        for root, _, files in os.walk(p):
            out += [os.path.join(root, f) for f in files]
        return sorted(out)

    @property
    def atomic_rename(self) -> bool:
        return True


# ---------------------------------------------------------------------------------------------
# remote file systems through pyarrow.fs

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


def _aws_profile(name: str) -> dict[str, str]:
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


def _s3_filesystem(opts: dict[str, str]):
    import pyarrow.fs as pafs

    kw: dict[str, Any] = {}
    if "profile" in opts:
        prof = _aws_profile(opts["profile"])
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
    if _bool_option(opts, "anonymous"):
        kw["anonymous"] = True
    if "path_style" in opts:
        # pyarrow: virtual-host addressing unless an endpoint is given; path style = never virtual
        kw["force_virtual_addressing"] = not _bool_option(opts, "path_style")
    for name in ("connect_timeout", "request_timeout"):
        v = _num_option(opts, name)
        if v is not None:
            kw[name] = v
    if opts.get("ca_file"):
        kw["tls_ca_file_path"] = opts["ca_file"]
    attempts = int(_num_option(opts, "retries", int, 3))
    kw["retry_strategy"] = pafs.AwsStandardS3RetryStrategy(max_attempts=max(1, attempts))
    return pafs.S3FileSystem(**kw)


def _gcs_filesystem(opts: dict[str, str]):
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
    if _bool_option(opts, "anonymous"):
        kw["anonymous"] = True
    if opts.get("access_token"):
        kw["access_token"] = opts["access_token"]
        kw["credential_token_expiration"] = dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1)
    for name in ("project_id", "default_bucket_location"):
        if opts.get(name):
            kw[name] = opts[name]
    return pafs.GcsFileSystem(**kw)


def _hdfs_filesystem(authority: str, opts: dict[str, str]):
    import pyarrow.fs as pafs

    host, _, port = authority.partition(":")
    kw: dict[str, Any] = {"host": host or "default", "port": int(port) if port.isdigit() else 0}
    for name in ("user", "kerb_ticket"):
        if opts.get(name):
            kw[name] = opts[name]
    for name in ("replication", "buffer_size"):
        v = _num_option(opts, name, int)
        if v is not None:
            kw[name] = v
    try:
        return pafs.HadoopFileSystem(**kw)
    except (OSError, ImportError) as e:
        raise StorageError(f"cannot connect to HDFS (pyarrow needs libhdfs, JAVA_HOME and the Hadoop CLASSPATH): {e}",
                           f"hdfs://{authority}") from None


class _Output:
    """A remote output stream that reports failures as StorageError naming the URI."""

    def __init__(self, io: "RemoteFileIO", uri: str, stream):
        self._io, self._uri, self._stream = io, uri, stream

    def write(self, data) -> int:
        try:
            return self._stream.write(data)
        except OSError as e:
            raise self._io._translate(e, self._uri, "write") from None

    def tell(self) -> int:
        return self._stream.tell()

    def close(self) -> None:
        try:
            self._stream.close()
        except OSError as e:
            raise self._io._translate(e, self._uri, "write") from None


class RemoteFileIO(FileIO):
    """Files on S3 (s3, s3a, s3n, s3p), Google Cloud Storage (gs) or HDFS through ``pyarrow.fs``.

    Paths are full URIs. Picklable (the pyarrow file system is made again where it is used); one
    instance per family, host and options per process (see :func:`io_for`)."""

    def __init__(self, family: str, authority: str = "", options: FsOptions = ()):
        self.family = family
        self.authority = authority  # HDFS name node (host:port); buckets are part of the paths
        self.options = options
        self._opts = options_for(family, options)
        self.retries = max(1, int(_num_option(self._opts, "retries", int, 3)))
        self.retry_wait = float(_num_option(self._opts, "retry_wait", float, 0.5))
        self._fs = None
        self._lock = threading.Lock()

    def __getstate__(self):
        return {"family": self.family, "authority": self.authority, "options": self.options}

    def __setstate__(self, state):
        self.__init__(state["family"], state["authority"], state["options"])

    def __repr__(self) -> str:
        return f"RemoteFileIO({self.family}, options: {describe_options(self.options)})"

    # -- plumbing ------------------------------------------------------------------------------
    @property
    def fs(self):
        if self._fs is None:
            with self._lock:
                if self._fs is None:
                    try:
                        if self.family == "s3":
                            self._fs = _s3_filesystem(self._opts)
                        elif self.family == "gcs":
                            self._fs = _gcs_filesystem(self._opts)
                        else:
                            self._fs = _hdfs_filesystem(self.authority, self._opts)
                    except ImportError as e:
                        raise StorageError(f"pyarrow cannot open {self.family} file systems here: {e}") from None
        return self._fs

    def accepts(self, path: str) -> bool:
        if family_of(path) != self.family:
            return False
        return self.family != "hdfs" or split_uri(path)[1] == self.authority

    def _p(self, uri: str) -> str:
        if "\x00" in uri:
            raise FStateError("a path with a NUL byte", repr(uri))
        fam, authority, key = split_uri(uri)
        if fam != self.family:
            raise FStateError(f"internal: {self.family} file system asked for {uri}")
        if self.family == "hdfs":
            return "/" + key
        if not authority:
            raise InvalidArgumentError("a bucket name is missing", uri)
        return f"{authority}/{key}" if key else authority

    def _bucket_exists(self, uri: str) -> bool | None:
        if self.family == "hdfs":
            return None
        import pyarrow.fs as pafs

        try:
            return self.fs.get_file_info(split_uri(uri)[1]).type != pafs.FileType.NotFound
        except OSError:
            return None

    def _translate(self, e: BaseException, uri: str, op: str) -> FStateError:
        message = str(e).strip() or type(e).__name__
        if isinstance(e, FileNotFoundError):
            kind = "missing"
        elif isinstance(e, PermissionError):
            kind = "denied"
        else:
            kind, _ = classify_error(message)
        if kind == "missing" and self._bucket_exists(uri) is False:
            kind = "no_bucket"
        if kind == "missing":
            return MissingStateFileError("file does not exist", uri)
        if kind == "no_bucket":
            return StorageError(f"bucket '{split_uri(uri)[1]}' does not exist", uri)
        if self.family == "s3" and kind in ("denied", "server") and not _bool_option(self._opts, "anonymous") \
                and not aws_credentials_apparent(self._opts):
            return StorageError(
                "no AWS credentials found (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE or "
                "~/.aws/credentials, or pass --fs-option access_key=... secret_key=...; anonymous=true for public "
                f"buckets); {op} failed: {message}", uri)
        if kind == "denied":
            return StorageError(f"access denied ({op}): {message}", uri)
        if kind == "throttled":
            return StorageError(f"throttled by the server ({op}), still after {self.retries} attempts: {message}",
                                uri, transient=True)
        if kind == "network":
            return StorageError(f"cannot reach the storage endpoint ({op}), still after {self.retries} attempts: "
                                f"{message}", uri, transient=True)
        if kind == "server":
            return StorageError(f"storage server error ({op}), still after {self.retries} attempts: {message}", uri,
                                transient=True)
        return StorageError(f"{op} failed: {message}", uri)

    def _call(self, uri: str, op: str, fn: Callable[[], Any]):
        """Run ``fn``, retrying transient failures (throttling, network, 5xx) with backoff; any
        failure becomes an FStateError naming ``uri``."""
        for attempt in range(self.retries):
            try:
                return fn()
            except FStateError:
                raise
            except (OSError, ValueError) as e:
                if isinstance(e, OSError) and not isinstance(e, (FileNotFoundError, PermissionError)):
                    kind, retryable = classify_error(str(e))
                    if retryable and attempt + 1 < self.retries and not (
                            self.family == "s3" and kind == "server" and not aws_credentials_apparent(self._opts)
                            and not _bool_option(self._opts, "anonymous")):
                        time.sleep(min(self.retry_wait * (2 ** attempt), 10.0))
                        continue
                if isinstance(e, ValueError):
                    raise FStateError(f"{op} failed: {e}", uri) from None
                raise self._translate(e, uri, op) from None
        raise AssertionError("unreachable")

    def _info(self, uri: str):
        return self._call(uri, "stat", lambda: self.fs.get_file_info(self._p(uri)))

    # -- reading -------------------------------------------------------------------------------
    def read(self, path: str) -> bytes:
        def go():
            with self.fs.open_input_file(self._p(path)) as f:
                return f.read()
        return self._call(path, "read", go)

    def read_range(self, path: str, offset: int, length: int) -> bytes:
        def go():
            with self.fs.open_input_file(self._p(path)) as f:
                # never ask for more than the object holds: a corrupt length must not allocate gigabytes
                available = max(0, f.size() - offset)
                n = available if length is None or length < 0 else min(length, available)
                return f.read_at(n, offset) if n > 0 else b""
        return self._call(path, "read", go)

    def exists(self, path: str) -> bool:
        import pyarrow.fs as pafs

        return self._info(path).type != pafs.FileType.NotFound

    def is_dir(self, path: str) -> bool:
        import pyarrow.fs as pafs

        return self._info(path).type == pafs.FileType.Directory

    def size(self, path: str) -> int:
        import pyarrow.fs as pafs

        info = self._info(path)
        if info.type == pafs.FileType.NotFound:
            if self._bucket_exists(path) is False:
                raise StorageError(f"bucket '{split_uri(path)[1]}' does not exist", path)
            raise MissingStateFileError("file does not exist", path)
        if info.type != pafs.FileType.File:
            raise FStateError("is a directory, expected a file", path)
        return info.size

    def _listing(self, path: str, recursive: bool):
        import pyarrow.fs as pafs

        sel = pafs.FileSelector(self._p(path).rstrip("/"), recursive=recursive, allow_not_found=True)
        return self._call(path, "list", lambda: self.fs.get_file_info(sel))

    def list_dir(self, path: str) -> list[str]:
        return sorted(posixpath.basename(i.path.rstrip("/")) for i in self._listing(path, False))

    def list_files(self, path: str) -> list[str]:
        import pyarrow.fs as pafs

        base = path.rstrip("/")
        root = self._p(base).rstrip("/")
        out = []
        for i in self._listing(path, True):
            if i.type == pafs.FileType.File and i.path.startswith(root + "/"):
                out.append(base + "/" + i.path[len(root) + 1:])
        return sorted(out)

    def join(self, base: str, name: str) -> str:
        return join(base, name)

    @contextmanager
    def open_input(self, path: str):
        f = self._call(path, "read", lambda: self.fs.open_input_file(self._p(path)))
        try:
            yield _Input(self, path, f)
        finally:
            f.close()

    # -- writing -------------------------------------------------------------------------------
    @contextmanager
    def open_output(self, path: str):
        stream = self._call(path, "write", lambda: self.fs.open_output_stream(self._p(path)))
        out = _Output(self, path, stream)
        try:
            yield out
        except BaseException:
            try:
                stream.close()  # pyarrow cannot abort an upload: the caller deletes what it wrote
            except OSError:
                pass
            raise
        out.close()

    def write(self, path: str, data: bytes) -> None:
        """One request (retried as a whole): the object appears complete or not at all."""
        def go():
            with self.fs.open_output_stream(self._p(path)) as f:
                f.write(data)
        self._call(path, "write", go)

    def delete(self, path: str) -> None:
        def go():
            try:
                self.fs.delete_file(self._p(path))
            except FileNotFoundError:
                pass
        self._call(path, "delete", go)


class _Input:
    """A remote input file whose reads report failures as FStateErrors naming the URI."""

    def __init__(self, io: RemoteFileIO, uri: str, f):
        self._io, self._uri, self._f = io, uri, f

    def read(self, n: int = -1) -> bytes:
        return self._io._call(self._uri, "read", lambda: self._f.read(n if n is not None and n >= 0 else None))

    def seek(self, pos: int, whence: int = 0) -> int:
        return self._f.seek(pos, whence)

    def tell(self) -> int:
        return self._f.tell()

    def size(self) -> int:
        return self._f.size()


# ---------------------------------------------------------------------------------------------
# the entry point

_LOCAL = LocalFileIO()
_CACHE: dict[tuple, RemoteFileIO] = {}
_CACHE_LOCK = threading.Lock()


def io_for(path: str, options: Mapping[str, Any] | FsOptions | None = None) -> FileIO:
    """The FileIO for ``path``: local paths and ``file:`` URIs, ``s3://``/``s3a://``/``s3n://``/``s3p://``,
    ``gs://`` and ``hdfs://``. ``options`` (a mapping or normalized tuple) are merged over the
    process defaults and the environment (see the module doc)."""
    scheme = scheme_of(path)
    if scheme == "file":
        return _LOCAL
    family = FAMILIES.get(scheme)
    if family is None:
        raise StorageError(f"file system scheme '{scheme}://' is not supported (local paths, file:, s3://, s3a://, "
                           "s3n://, s3p://, gs:// and hdfs:// are)", path)
    opts = resolve_fs_options(options)
    authority = split_uri(path)[1] if family == "hdfs" else ""
    key = (family, authority, opts)
    io = _CACHE.get(key)
    if io is None:
        with _CACHE_LOCK:
            io = _CACHE.setdefault(key, RemoteFileIO(family, authority, opts))
    return io


def copy_range(src: str, start: int, length: int, dst: str, options: FsOptions | None = None) -> None:
    """Stream ``length`` bytes of ``src`` from ``start`` into a new file ``dst`` (any two file
    systems), in chunks; an error if ``src`` holds fewer bytes."""
    src_io, dst_io = io_for(src, options), io_for(dst, options)
    with src_io.open_input(src) as fin, dst_io.open_output(dst) as fout:
        fin.seek(start)
        remaining = length
        while remaining > 0:
            chunk = fin.read(min(remaining, COPY_CHUNK))
            if not chunk:
                raise MissingStateFileError(f"state file is shorter than its handle says ({start + length} bytes)", src)
            fout.write(chunk)
            remaining -= len(chunk)


def iter_chunks(src: str, start: int, length: int, options: FsOptions | None = None) -> Iterator[bytes]:
    """The bytes of a range, in chunks of at most COPY_CHUNK (never the whole file in memory)."""
    io = io_for(src, options)
    with io.open_input(src) as fin:
        fin.seek(start)
        remaining = length
        while remaining > 0:
            chunk = fin.read(min(remaining, COPY_CHUNK))
            if not chunk:
                raise MissingStateFileError(f"state file is shorter than its handle says ({start + length} bytes)", src)
            remaining -= len(chunk)
            yield chunk


@dataclass(frozen=True)
class SavepointLocation:
    """Where a savepoint lives: its directory (exclusive dir for relative handles) and `_metadata`."""

    directory: str
    metadata_path: str
    io: FileIO


def locate(path: str, options: Mapping[str, Any] | FsOptions | None = None) -> SavepointLocation:
    """Accept a savepoint/checkpoint directory, its `_metadata` file, a `chk-N` dir, a file: URI or
    a remote URI (s3://bucket/prefix, ...)."""
    io = io_for(path, options)
    local = strip_file_scheme(path) if scheme_of(path) == "file" else path
    local = local.rstrip("/") or "/"
    if is_remote(local) and not split_uri(local)[1]:
        raise InvalidArgumentError("a bucket name is missing", path)
    if not io.exists(local):
        if is_remote(local) and isinstance(io, RemoteFileIO) and io._bucket_exists(local) is False:
            raise StorageError(f"bucket '{split_uri(local)[1]}' does not exist", path)
        raise SavepointNotFoundError("no such file or directory", path)
    if io.is_dir(local):
        meta = io.join(local, METADATA_FILE)
        if io.exists(meta):
            return SavepointLocation(local, meta, io)
        candidates = [
            n for n in io.list_dir(local)
            if (n.startswith("chk-") or n.startswith("savepoint-")) and io.exists(io.join(io.join(local, n), METADATA_FILE))
        ]
        if len(candidates) == 1:
            # a savepoint target directory (or a job's checkpoint directory) holding exactly one
            only = io.join(local, candidates[0])
            return SavepointLocation(only, io.join(only, METADATA_FILE), io)
        hint = f"; it contains {', '.join(candidates)}: pass one of them" if candidates else ""
        raise SavepointNotFoundError(f"not a savepoint or checkpoint directory (no {METADATA_FILE} file){hint}", path)
    directory = parent_of(local)
    return SavepointLocation(directory, local, io)


__all__ = ["FileIO", "LocalFileIO", "RemoteFileIO", "io_for", "locate", "SavepointLocation", "METADATA_FILE",
           "strip_file_scheme", "scheme_of", "is_remote", "family_of", "split_uri", "join", "parent_of",
           "is_within", "canonical", "set_default_fs_options", "resolve_fs_options", "normalize_fs_options",
           "parse_fs_option_args", "load_fs_config", "copy_range", "iter_chunks", "classify_error",
           "StorageError", "describe_options"]
