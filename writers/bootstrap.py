"""`fstate bootstrap --spec bootstrap.yaml`: a savepoint described in YAML, built from data sources.

```yaml
max_parallelism: 128
flink_version: "1.20"                  # optional: the Flink release that restores it (default 2.3)
views:                                 # optional: temp views for `sql` sources
  users: {path: data/users.parquet}
operators:
  - uid: counter                       # or uid_hash: 32 hex digits
    parallelism: 2
    keyed:
      source: {path: data/counts.csv, format: csv, options: {header: "true", inferSchema: "true"}}
      key: user
      key_type: STRING                 # optional: inferred from the column
      states:
        total: LONG                    # a VALUE state (type string; kind inferred)
        events: LIST<STRING>           # a LIST state of strings
        seen: {kind: MAP, type: "MAP<STRING, LONG>", column: seen_map}
      event_timers: wakeup             # a long column (or array<long>)
  - uid: source
    list_state:
      - {name: offsets, type: LONG, values: [17, 42]}
      - {name: marks, type: LONG, union: true, source: {sql: "SELECT m AS value FROM users"}}
    broadcast_state:
      - {name: rules, key_type: STRING, value_type: STRING, entries: {r1: allow, r2: deny}}
```
Paths are relative to the spec file.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Any

import yaml

from ..savepoint.errors import InvalidArgumentError
from .validation import CSV_HINT
from .writer import SavepointWriter

_FORMATS = ("parquet", "csv", "json", "orc")


def load_spec(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            spec = yaml.safe_load(f)
    except FileNotFoundError:
        raise InvalidArgumentError("spec file does not exist", path) from None
    except yaml.YAMLError as e:
        raise InvalidArgumentError(f"not valid YAML: {e}", path) from None
    if not isinstance(spec, dict) or not isinstance(spec.get("operators"), list) or not spec["operators"]:
        raise InvalidArgumentError("the spec needs a non-empty 'operators' list", path)
    return spec


def _source_label(src: Any, base: str) -> str:
    """How errors name a source: its path as resolved, or its SQL (shortened)."""
    if isinstance(src, dict) and "sql" in src:
        query = " ".join(str(src["sql"]).split())
        return f"sql: {query if len(query) <= 60 else query[:57] + '...'}"
    if isinstance(src, dict) and "path" in src:
        return _resolve(src["path"], base)
    return "?"


def _resolve(path: str, base: str) -> str:
    return path if os.path.isabs(path) or "://" in path else os.path.join(base, path)


def _format(src: dict, path: str) -> str:
    """A path source's format: as given, else by the file's extension, else Parquet."""
    return src.get("format") or os.path.splitext(path)[1].lstrip(".").lower() or "parquet"


def _source(spark, src: Any, base: str, what: str):
    """The DataFrame of a spec source; with an embedded ``SqlSession`` for ``spark``, its ArrowFrame."""
    from .arrow_frames import SqlSession, file_frame

    embedded = isinstance(spark, SqlSession)
    if not isinstance(src, dict):
        raise InvalidArgumentError(f"{what}: 'source' must be a mapping with 'path' or 'sql'")
    if "sql" in src:
        if embedded:
            from ..savepoint.errors import SqlError

            try:
                return spark.sql(str(src["sql"]))
            except SqlError as e:
                raise InvalidArgumentError(f"{what}: source sql: {e.problem}") from None
        from pyspark.errors import AnalysisException

        try:
            return spark.sql(src["sql"])
        except AnalysisException as e:  # a parse error too: one line, naming the source
            raise InvalidArgumentError(f"{what}: source sql: {str(e).strip().splitlines()[0]}") from None
    if "path" not in src:
        raise InvalidArgumentError(f"{what}: 'source' needs 'path' or 'sql'")
    path = _resolve(src["path"], base)
    fmt = _format(src, path)
    if fmt not in _FORMATS:
        raise InvalidArgumentError(f"{what}: unknown source format '{fmt}' ({', '.join(_FORMATS)})")
    if not os.path.exists(path) and "://" not in path:
        raise InvalidArgumentError(f"{what}: source {path} does not exist")
    if embedded:
        return file_frame(path, fmt, src.get("options") or {}, what)
    reader = spark.read.format(fmt)
    for k, v in (src.get("options") or {}).items():
        reader = reader.option(k, str(v).lower() if isinstance(v, bool) else str(v))
    from pyspark.errors import AnalysisException

    try:
        return reader.load(path)
    except AnalysisException as e:
        raise InvalidArgumentError(f"{what}: source {path}: {str(e).strip().splitlines()[0]}") from None


@contextmanager
def _hinted(src: Any, base: str):
    """Errors about a string column of ``src`` advise what fits its format: the CSV option inferSchema
    only for a CSV source that does not set it already."""
    try:
        yield
    except InvalidArgumentError as e:
        hint = source_hint(src, base)
        if CSV_HINT not in e.detail or hint == CSV_HINT:
            raise
        detail = e.detail.replace(f" ({CSV_HINT})", f" ({hint})" if hint else "")
        raise InvalidArgumentError(detail, e.path) from None


def source_hint(src: Any, base: str) -> str:
    """The hint for a string column of source ``src`` (its spec entry): CSV_HINT for a CSV file read
    without inferSchema, what inferSchema found for one read with it, nothing for other sources."""
    if not isinstance(src, dict) or "path" not in src:
        return ""
    if _format(src, _resolve(src["path"], base)) != "csv":
        return ""
    options = {str(k).lower(): str(v).lower() for k, v in (src.get("options") or {}).items()}
    if options.get("inferschema") == "true":
        return "inferSchema is set, so some value in that column is not a number or time"
    return CSV_HINT


def writer_from_spec(spec: dict, spec_path: str, spark, flink_version: str | None = None) -> SavepointWriter:
    """The writer a spec describes, its sources read by ``spark`` (a SparkSession) or, on the embedded
    engine, an ``arrow_frames.SqlSession`` (no JVM: files read by pyarrow, SQL run by DuckDB); ``flink_version`` (e.g. from ``--flink-version``) overrides the
    spec's ``flink_version``. Every source column is checked against its declared type here (by the
    writer), before a Spark job runs; every error names the spec file, and those about data its source."""
    try:
        return _writer_from_spec(spec, spec_path, spark, flink_version)
    except InvalidArgumentError as e:
        if e.path is not None or f"spec {spec_path}" in e.detail:
            raise
        raise InvalidArgumentError(e.detail, spec_path) from None


def _writer_from_spec(spec: dict, spec_path: str, spark, flink_version: str | None) -> SavepointWriter:
    base = os.path.dirname(os.path.abspath(spec_path))

    def origin(src: Any = None) -> str:
        return f"spec {spec_path}" + (f", source {_source_label(src, base)}" if src is not None else "")

    from .arrow_frames import SqlSession

    embedded = isinstance(spark, SqlSession)
    for name, src in (spec.get("views") or {}).items():
        frame = _source(spark, src, base, f"view {name}")
        if embedded:
            spark.register(name, frame)
        else:
            frame.createOrReplaceTempView(name)
    if flink_version is None and spec.get("flink_version"):
        flink_version = str(spec["flink_version"])
    w = SavepointWriter(int(spec.get("max_parallelism", 128)), None if embedded else spark,
                        flink_version=flink_version)
    for i, op in enumerate(spec["operators"]):
        if not isinstance(op, dict):
            raise InvalidArgumentError(f"operator #{i + 1} must be a mapping")
        uid, uid_hash = op.get("uid"), op.get("uid_hash")
        if not uid and not uid_hash:
            raise InvalidArgumentError(f"operator #{i + 1} needs 'uid' or 'uid_hash'")
        ident = dict(uid=uid, uid_hash=uid_hash, name=op.get("name"), parallelism=op.get("parallelism"),
                     max_parallelism=op.get("max_parallelism"))
        what = f"operator {uid or uid_hash}"
        unknown = set(op) - {"uid", "uid_hash", "name", "parallelism", "max_parallelism", "keyed", "list_state",
                             "broadcast_state"}
        if unknown:
            raise InvalidArgumentError(f"{what}: unknown keys {', '.join(sorted(unknown))}")
        if "keyed" in op:
            k = op["keyed"]
            df = _source(spark, k.get("source"), base, f"{what} keyed state")
            with _hinted(k.get("source"), base):
                w.with_keyed_state(df=df, key=k.get("key", "key"), states=k.get("states"), key_type=k.get("key_type"),
                                   event_timers=k.get("event_timers"), processing_timers=k.get("processing_timers"),
                                   origin=origin(k.get("source")), **ident)
        for ls in op.get("list_state") or []:
            name = ls.get("name")
            if not name:
                raise InvalidArgumentError(f"{what}: a list_state entry needs a 'name'")
            data = ls["values"] if "values" in ls else _source(spark, ls.get("source"), base, f"{what}/{name}")
            with _hinted(None if "values" in ls else ls.get("source"), base):
                w.with_list_state(state=name, data=data, type=ls.get("type"), column=ls.get("column", "value"),
                                  union=bool(ls.get("union", False)),
                                  origin=origin(None if "values" in ls else ls.get("source")), **ident)
        for bs in op.get("broadcast_state") or []:
            name = bs.get("name")
            if not name:
                raise InvalidArgumentError(f"{what}: a broadcast_state entry needs a 'name'")
            data = bs["entries"] if "entries" in bs else _source(spark, bs.get("source"), base, f"{what}/{name}")
            with _hinted(None if "entries" in bs else bs.get("source"), base):
                w.with_broadcast_state(state=name, data=data, key_type=bs.get("key_type"),
                                       value_type=bs.get("value_type"), key=bs.get("key", "key"),
                                       value=bs.get("value", "value"),
                                       origin=origin(None if "entries" in bs else bs.get("source")), **ident)
    return w


def source_paths(spec: dict, spec_path: str) -> list[str]:
    """The files and directories the `path` sources of a spec read (relative ones resolved as
    :func:`writer_from_spec` resolves them)."""
    base = os.path.dirname(os.path.abspath(spec_path))
    found: list[str] = []

    def visit(node: Any, is_source: bool) -> None:
        if isinstance(node, dict):
            if is_source and isinstance(node.get("path"), str):
                found.append(_resolve(node["path"], base))
            for key, value in node.items():
                visit(value, key == "source")
        elif isinstance(node, list):
            for item in node:
                visit(item, False)

    visit(spec.get("operators"), False)
    for src in (spec.get("views") or {}).values():
        visit(src, True)
    return found


def source_bytes(spec: dict, spec_path: str) -> int:
    """Bytes of the local files a spec's sources read (what the engine choice weighs; remote ones count
    for nothing)."""
    total = 0
    for path in source_paths(spec, spec_path):
        if os.path.isdir(path):
            total += sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)
        elif os.path.isfile(path):
            total += os.path.getsize(path)
    return total


def check_target_outside_sources(target: str, spec: dict, spec_path: str) -> None:
    """The new savepoint may not be, lie inside or contain a file the spec reads (nor the spec)."""
    from ..savepoint.io import is_within

    for path in [os.path.abspath(spec_path), *source_paths(spec, spec_path)]:
        if is_within(target, path) or is_within(path, target):
            raise InvalidArgumentError(f"--out overlaps {path}, which the spec reads: choose another --out", target)
