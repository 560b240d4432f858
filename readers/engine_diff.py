"""``fstate diff`` on the embedded engine: the same comparison as the Spark one (``views.SparkComparer``),
on Arrow tables in this process. Rows are compared by their JSON in Spark's ``to_json`` spelling
(``engine_files.spark_json_row``, maps as sorted entries), so counts and examples are Spark's."""

from __future__ import annotations

import collections
from typing import Any

import pyarrow

from ..savepoint.loader import Savepoint
from . import engine
from .engine_files import spark_json_row
from .options import savepoint_source
from .planning import build_table
from .views import compare_savepoints


def diff(old_path: str, new_path: str, uid: str | None = None, examples: int = 3, *,
         allow_external_paths: bool = False, checkpoint_base_dir: str | None = None, fs_options=None,
         progress: engine.Progress | None = None) -> list[dict[str, Any]]:
    """``views.diff`` without Spark (same result)."""
    return compare_savepoints(EmbeddedComparer(progress), old_path, new_path, uid, examples,
                              allow_external_paths=allow_external_paths, checkpoint_base_dir=checkpoint_base_dir,
                              fs_options=fs_options)


class EmbeddedComparer:
    """Tables as Arrow tables read by the embedded engine."""

    def __init__(self, progress: engine.Progress | None = None):
        self.progress = progress

    def load(self, sp: Savepoint, uid: str, table: str, state: str | None) -> pyarrow.Table:
        planned = build_table(savepoint_source(sp, uid, table=table, state=state))
        return engine.read_table(planned, self.progress)

    @staticmethod
    def count(table: pyarrow.Table) -> int:
        return table.num_rows

    @staticmethod
    def columns(table: pyarrow.Table) -> list[str]:
        return table.column_names

    @staticmethod
    def multisets(a: pyarrow.Table, b: pyarrow.Table, cols: list[str], examples: int):
        old, new = collections.Counter(_json_rows(a, cols)), collections.Counter(_json_rows(b, cols))
        added = sum(count - old[value] for value, count in new.items() if count > old[value])
        removed = sum(count - new[value] for value, count in old.items() if count > new[value])
        differing = sorted(value for value in set(old) | set(new) if old[value] != new[value])
        return added, removed, differing[:examples]

    @staticmethod
    def by_identity(a: pyarrow.Table, b: pyarrow.Table, ids: list[str], vals: list[str], examples: int):
        old, old_unmatched = _by_id(a, ids, vals)
        new, new_unmatched = _by_id(b, ids, vals)
        changed_examples, added_examples = [], []
        changed = 0
        added = len(new_unmatched) + sum(len(rows) for key, rows in new.items() if key not in old)
        removed = len(old_unmatched) + sum(len(rows) for key, rows in old.items() if key not in new)
        for key in sorted(set(old) | set(new)):
            if key in old and key in new:
                for identity, before in old[key]:
                    for _, after in new[key]:
                        if before != after:
                            changed += 1
                            changed_examples.append({"key": identity, "old": before, "new": after})
            elif key in new:
                added_examples.extend({"key": identity, "new": after} for identity, after in new[key])
        added_examples.extend({"key": identity, "new": after} for identity, after in new_unmatched)
        shown = changed_examples[:examples]
        shown += added_examples[:max(0, examples - len(shown))]
        return added, removed, changed, shown


def _json_rows(table: pyarrow.Table, cols: list[str]) -> list[str]:
    part = table.select(cols)
    return [spark_json_row(row, part.schema) for row in part.to_pylist()]


def _by_id(table: pyarrow.Table, ids: list[str], vals: list[str]):
    """Rows grouped by their identity columns (as JSON): {identity: [(first id value, values JSON)]};
    rows with a null identity column match nothing (as in Spark's join), listed apart."""
    values_schema = pyarrow.schema([_canonical_field(table.schema.field(name)) for name in vals])
    id_schema = pyarrow.schema([table.schema.field(name) for name in ids])
    grouped: dict[str, list] = collections.defaultdict(list)
    unmatched = []
    for row in table.to_pylist():
        identity = _plain(engine.python_value(row[ids[0]], table.schema.field(ids[0]).type)) if ids else None
        values = spark_json_row({name: _canonical_value(row[name], table.schema.field(name).type) for name in vals},
                                values_schema)
        if any(row[name] is None for name in ids):
            unmatched.append((identity, values))
            continue
        grouped[spark_json_row({name: row[name] for name in ids}, id_schema)].append((identity, values))
    return grouped, unmatched


def _canonical_field(field: pyarrow.Field) -> pyarrow.Field:
    """A map column as Spark's ``array_sort(map_entries(...))``: a list of key/value structs."""
    if not pyarrow.types.is_map(field.type):
        return field
    entry = pyarrow.struct([pyarrow.field("key", field.type.key_type, False), field.type.item_field])
    return pyarrow.field(field.name, pyarrow.list_(pyarrow.field("element", entry, False)), field.nullable)


def _canonical_value(value, arrow_type: pyarrow.DataType):
    if value is None or not pyarrow.types.is_map(arrow_type):
        return value
    entries = [{"key": key, "value": item} for key, item in value]
    return sorted(entries, key=lambda entry: (_order(entry["key"]), _order(entry["value"])))


def _order(value) -> tuple:
    """A sort key close to Spark's ordering: nulls first, numbers by value, strings by their UTF-8 bytes."""
    if value is None:
        return (0,)
    if isinstance(value, (bool, int, float)):
        return (1, value)
    if isinstance(value, str):
        return (2, value.encode("utf-8"))
    if isinstance(value, bytes):
        return (2, value)
    return (3, repr(value))


def _plain(value):
    """A value as Spark's ``Row.asDict(recursive=True)`` gives it."""
    if isinstance(value, engine.Row):
        return {name: _plain(item) for name, item in zip(value.__fields__, value)}
    if isinstance(value, list):
        return [_plain(item) for item in value]
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    return value
