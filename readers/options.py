"""The options of the ``flink-savepoint`` Spark data source, in one place (no Spark needed here).

:func:`source_options` builds the option dict every fstate caller hands to
``spark.read.format("flink-savepoint")`` (SavepointReader, the SQL views and diff, the CLI);
:func:`savepoint_source_options` does so for an open :class:`~..savepoint.loader.Savepoint`.
:func:`parse_source_options` reads such a dict back (the data source's side): names are matched
case-insensitively (Spark lower-cases them), the option names of Flink's ``savepoint`` SQL
connector are accepted as aliases, and an unknown option is an error naming the known ones.

============================  =====================  ============================================
option                        Flink connector alias  meaning
============================  =====================  ============================================
``path``                      ``state.path``         savepoint/checkpoint directory, its
                                                     ``_metadata`` file or a URI (required)
``uid``                       ``operator.uid``,      operator uid, or its 32-hex-digit uid hash
                              ``operator.uid.hash``  (required; the hash alias takes a hash only)
``table``                                            ``list``, ``broadcast``, ``keyed``, ``timers``, ``matches`` (CEP)
``state``                                            state name (comma-separated keyed states)
``flat``, ``flatten``                                keyed: one row per element / key columns (default: SQL keys)
``ttlTimestamps``                                    keyed: a TTL state's values as {value, ttl_timestamp} (the
                                                     last access, epoch ms) instead of the bare value
``allowExternalPaths``                               follow state files outside the directory (default false)
``checkpointBaseDir``                                new place of a moved job checkpoint directory
``fsOptions``, ``fs.<name>``                         file-system options (see savepoint/io/)
``plan``                                             the SQL job's compiled plan (COMPILE PLAN JSON
                                                     file): names SQL keys and state fields
(none)                        ``state.backend.type`` ``hashmap`` or ``rocksdb``: checked, then
                                                     unused (fstate reads the format from the
                                                     snapshot itself)
============================  =====================  ============================================
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from ..savepoint.errors import InvalidArgumentError

FORMAT = "flink-savepoint"

#: fstate's own option names, as written in documentation and by :func:`source_options`
OPTION_NAMES = ("path", "uid", "table", "state", "flat", "flatten", "allowExternalPaths", "checkpointBaseDir",
                "fsOptions", "plan", "ttlTimestamps")
#: the option names of Flink's ``savepoint`` SQL connector (SavepointConnectorOptions) → fstate's
FLINK_CONNECTOR_ALIASES = {"state.path": "path", "operator.uid": "uid", "operator.uid.hash": "uid"}
#: Flink's option naming the state backend; fstate recognises the snapshot's format by itself
STATE_BACKEND_TYPE = "state.backend.type"
STATE_BACKEND_TYPES = ("hashmap", "rocksdb")
TABLE_KINDS = ("list", "broadcast", "keyed", "timers", "matches")
FS_OPTION_PREFIX = "fs."

_CANONICAL = {name.lower(): name for name in OPTION_NAMES}
_TRUE = {"true", "1", "yes"}
_FALSE = {"false", "0", "no"}
_UID_HASH = re.compile(r"^[0-9a-fA-F]{32}$")


@dataclass(frozen=True)
class SourceOptions:
    """The data source options, checked and under fstate's own names."""

    path: str
    uid: str
    table: str | None = None
    state: str | None = None
    flat: bool = False
    #: None: key columns for SQL operators (their key is a row), one ``key`` column otherwise
    flatten: bool | None = None
    #: keyed: TTL values with their last access ({value, ttl_timestamp})
    ttl_timestamps: bool = False
    allow_external_paths: bool = False
    checkpoint_base_dir: str | None = None
    fs_options: dict[str, Any] = field(default_factory=dict)
    plan: str | None = None

    def __post_init__(self):
        if not self.path or not self.uid:
            raise InvalidArgumentError("options 'path' and 'uid' are required (Flink's names: state.path and "
                                       "operator.uid or operator.uid.hash)")
        if self.table is not None and self.table not in TABLE_KINDS:
            raise InvalidArgumentError(f"unknown table kind '{self.table}' ({', '.join(TABLE_KINDS)})")

    @property
    def states(self) -> list[str] | None:
        """``state`` split at commas (keyed tables), None when not given."""
        return [name.strip() for name in self.state.split(",")] if self.state else None

    def spark_options(self) -> dict[str, str]:
        """These options as the data source receives them from Spark (a dict of strings)."""
        return source_options(self.path, self.uid, table=self.table, state=self.state, flat=self.flat,
                              flatten=self.flatten, ttl_timestamps=self.ttl_timestamps,
                              allow_external_paths=self.allow_external_paths,
                              checkpoint_base_dir=self.checkpoint_base_dir, fs_options=self.fs_options,
                              plan=self.plan)


def known_options() -> list[str]:
    """Every accepted option name, for messages."""
    return [*OPTION_NAMES, f"{FS_OPTION_PREFIX}<name>", *FLINK_CONNECTOR_ALIASES, STATE_BACKEND_TYPE]


def source_options(path: str, uid: str | None = None, *, table: str | None = None,
                   state: str | Iterable[str] | None = None, flat: bool | None = None, flatten: bool | None = None,
                   ttl_timestamps: bool | None = None, allow_external_paths: bool | None = None,
                   checkpoint_base_dir: str | None = None,
                   fs_options: Mapping[str, Any] | Iterable[tuple[str, Any]] | None = None,
                   plan: str | None = None) -> dict[str, str]:
    """The option dict for ``spark.read.format("flink-savepoint").options(**...)``; options given as
    None are left out (the data source's defaults apply). ``fs_options`` travel as one JSON
    ``fsOptions`` value: Spark plans a Python data source in a worker process, which needs them too."""
    options = {"path": path}
    if uid is not None:
        options["uid"] = uid
    if table is not None:
        options["table"] = table
    if state is not None and not isinstance(state, str):
        state = ",".join(state)
    if state:
        options["state"] = state
    for name, flag in (("flat", flat), ("flatten", flatten), ("ttlTimestamps", ttl_timestamps),
                       ("allowExternalPaths", allow_external_paths)):
        if flag is not None:
            options[name] = "true" if flag else "false"
    if checkpoint_base_dir:
        options["checkpointBaseDir"] = checkpoint_base_dir
    if fs_options:
        options["fsOptions"] = json.dumps(dict(fs_options))
    if plan:
        options["plan"] = plan
    return options


def savepoint_source_options(savepoint, uid: str | None = None, **kwargs) -> dict[str, str]:
    """:func:`source_options` for an open Savepoint: its ``_metadata``, external-path policy, moved
    checkpoint directory and file-system options, plus ``kwargs`` (table, state, flat, flatten, plan)."""
    return source_options(savepoint.location.metadata_path, uid,
                          allow_external_paths=savepoint.allow_external_paths,
                          checkpoint_base_dir=savepoint.checkpoint_base_dir,
                          fs_options=savepoint.fs_options, **kwargs)


def savepoint_source(savepoint, uid: str, **kwargs) -> SourceOptions:
    """The typed :class:`SourceOptions` of :func:`savepoint_source_options` (no dict of strings: for
    planning on this machine); ``kwargs`` given as None are left at their defaults."""
    return SourceOptions(savepoint.location.metadata_path, uid, allow_external_paths=savepoint.allow_external_paths,
                         checkpoint_base_dir=savepoint.checkpoint_base_dir, fs_options=dict(savepoint.fs_options or {}),
                         **{name: value for name, value in kwargs.items() if value is not None})


def parse_source_options(options: Mapping[str, Any]) -> SourceOptions:
    """Check data source options and bring them under fstate's names (see the module doc)."""
    given: dict[str, str] = {}  # fstate's name → value
    spelled: dict[str, str] = {}  # fstate's name → the option name it was given as
    fs_options: dict[str, Any] = {}
    backend_type = None
    for raw_name, value in options.items():
        key = str(raw_name).strip().lower()
        if value is None:
            continue
        value = str(value)
        if key.startswith(FS_OPTION_PREFIX):
            fs_options[raw_name[len(FS_OPTION_PREFIX):]] = value
            continue
        if key == STATE_BACKEND_TYPE:
            backend_type = value.strip().lower()
            continue
        name = _CANONICAL.get(key) or FLINK_CONNECTOR_ALIASES.get(key)
        if name is None:
            raise InvalidArgumentError(f"unknown option '{raw_name}' for the {FORMAT} data source "
                                       f"(known: {', '.join(known_options())})")
        if name in given:
            raise InvalidArgumentError(f"options '{spelled[name]}' and '{raw_name}' name the same thing: give one")
        if key == "operator.uid.hash" and not _UID_HASH.match(value):
            raise InvalidArgumentError(f"option operator.uid.hash must be 32 hex digits, not '{value}'")
        given[name], spelled[name] = value, str(raw_name)
    if backend_type is not None and backend_type not in STATE_BACKEND_TYPES:
        raise InvalidArgumentError(f"option {STATE_BACKEND_TYPE} must be one of {', '.join(STATE_BACKEND_TYPES)}, "
                                   f"not '{backend_type}'")
    table = given.get("table")
    raw_fs = given.get("fsOptions")
    if raw_fs:
        try:
            data = json.loads(raw_fs)
        except ValueError:
            raise InvalidArgumentError("option fsOptions must be a JSON object") from None
        if not isinstance(data, dict):
            raise InvalidArgumentError("option fsOptions must be a JSON object")
        fs_options = {**data, **fs_options}
    return SourceOptions(
        path=given.get("path", ""), uid=given.get("uid", ""), table=table, state=given.get("state") or None,
        flat=_flag(given, "flat", False), flatten=_flag(given, "flatten", None),
        ttl_timestamps=_flag(given, "ttlTimestamps", False),
        allow_external_paths=_flag(given, "allowExternalPaths", False),
        checkpoint_base_dir=given.get("checkpointBaseDir") or None, fs_options=fs_options,
        plan=given.get("plan") or None)


def _flag(given: Mapping[str, str], name: str, default: bool | None) -> bool | None:
    if name not in given:
        return default
    value = given[name].strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise InvalidArgumentError(f"option {name} must be true or false, not '{given[name]}'")
