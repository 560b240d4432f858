"""File-system options: their names (with Flink's and Hadoop's spellings), the three channels they
come from and how those merge (later ones winning): the YAML file named by ``FSTATE_FS_CONFIG``,
``FSTATE_FS_OPTIONS`` (``k=v,k=v`` or a JSON object), the process defaults
(:func:`set_default_fs_options`) and the options given to a call."""

from __future__ import annotations

import contextlib
import json
import os
import re
from typing import Any, Iterable, Iterator, Mapping

from ..errors import InvalidArgumentError
from .uri import strip_file_scheme

FS_OPTIONS_ENV = "FSTATE_FS_OPTIONS"
FS_CONFIG_ENV = "FSTATE_FS_CONFIG"

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


@contextlib.contextmanager
def default_fs_options(options: Mapping[str, Any] | None, *, export_env: bool = False) -> Iterator[FsOptions]:
    """:func:`set_default_fs_options` for a ``with`` block: the defaults (and ``FSTATE_FS_OPTIONS``) in
    force before it come back after it (a CLI command run in-process, a test)."""
    before, env_before = _DEFAULTS, os.environ.get(FS_OPTIONS_ENV)
    try:
        yield set_default_fs_options(options, export_env=export_env)
    finally:
        set_default_fs_options(before)
        if export_env:
            if env_before is None:
                os.environ.pop(FS_OPTIONS_ENV, None)
            else:
                os.environ[FS_OPTIONS_ENV] = env_before


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


def bool_option(opts: dict, name: str, default: bool = False) -> bool:
    if name not in opts:
        return default
    v = _BOOL.get(opts[name].strip().lower())
    if v is None:
        raise InvalidArgumentError(f"file-system option {name} must be true or false, not '{opts[name]}'")
    return v


def number_option(opts: dict, name: str, kind=float, default=None):
    if name not in opts:
        return default
    try:
        v = kind(opts[name])
    except ValueError:
        raise InvalidArgumentError(f"file-system option {name} must be a number, not '{opts[name]}'") from None
    if v < 0:
        raise InvalidArgumentError(f"file-system option {name} must not be negative")
    return v
