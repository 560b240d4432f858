"""A small model of Flink's table ``LogicalType``s, read from their Java serialization.

Snapshots of the table runtime's serializers (``RowDataSerializer``, ``ArrayDataSerializer``,
``MapDataSerializer``, ``ExternalSerializer``) hold the field types as Java-serialized
``org.apache.flink.table.types.logical.*Type`` objects (each a complete object stream of its own).
:func:`read_logical_type` turns one such stream into a :class:`LogicalType` and keeps the exact bytes
on the node, so a snapshot writes back byte-identical.

A :class:`LogicalType` holds what the binary formats and the Spark types need: the type root (Flink's
``LogicalTypeRoot`` constant name), nullability, length / precision / scale, the timestamp kind, the
children (element, key and value, row fields), row field names and a RAW type's class.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from ..errors import UnsupportedSerializerError
from ..javaser import read_java_object

LOGICAL = "org.apache.flink.table.types.logical."

#: Roots whose values have a fixed size in a binary row / array slot, with that size in arrays.
FIXED_SIZES = {
    "BOOLEAN": 1, "TINYINT": 1, "SMALLINT": 2, "INTEGER": 4, "DATE": 4, "TIME_WITHOUT_TIME_ZONE": 4,
    "INTERVAL_YEAR_MONTH": 4, "FLOAT": 4, "BIGINT": 8, "INTERVAL_DAY_TIME": 8, "DOUBLE": 8,
}
STRING_ROOTS = ("CHAR", "VARCHAR")
BINARY_ROOTS = ("BINARY", "VARBINARY")
TIMESTAMP_ROOTS = ("TIMESTAMP_WITHOUT_TIME_ZONE", "TIMESTAMP_WITH_LOCAL_TIME_ZONE")
#: Every root whose values fstate decodes.
DECODABLE_ROOTS = frozenset(FIXED_SIZES) | {
    *STRING_ROOTS, *BINARY_ROOTS, *TIMESTAMP_ROOTS, "DECIMAL", "ARRAY", "MULTISET", "MAP", "ROW", "RAW", "NULL",
    "STRUCTURED_TYPE"}
#: Roots stored as a nested binary row (a STRUCTURED_TYPE, e.g. an aggregate's accumulator class, is one
#: by its attributes).
ROW_ROOTS = ("ROW", "STRUCTURED_TYPE")

#: SQL names of the roots (for display).
_SQL_NAMES = {
    "TIMESTAMP_WITHOUT_TIME_ZONE": "TIMESTAMP", "TIMESTAMP_WITH_LOCAL_TIME_ZONE": "TIMESTAMP_LTZ",
    "TIMESTAMP_WITH_TIME_ZONE": "TIMESTAMP_TZ", "TIME_WITHOUT_TIME_ZONE": "TIME", "INTEGER": "INT",
}


@dataclass(frozen=True)
class LogicalType:
    """One table type. ``serialized`` is the Java object stream it was read from (None when built
    by fstate); it is not part of equality."""

    root: str
    nullable: bool = True
    length: int | None = None
    precision: int | None = None
    scale: int | None = None
    kind: str | None = None
    children: tuple["LogicalType", ...] = ()
    field_names: tuple[str, ...] = ()
    raw_class: str | None = None
    serialized: bytes | None = field(default=None, compare=False, repr=False)

    # -- facts of the binary formats ---------------------------------------------------------
    @property
    def compact(self) -> bool:
        """DECIMAL(p <= 18) is stored as its unscaled long, TIMESTAMP(p <= 3) as epoch millis."""
        if self.root == "DECIMAL":
            return (self.precision or 0) <= 18
        if self.root in TIMESTAMP_ROOTS:
            return (self.precision or 0) <= 3
        return False

    @property
    def array_slot_size(self) -> int:
        """Bytes one element takes in the fixed part of a binary array."""
        return FIXED_SIZES.get(self.root, 8)

    @property
    def decodable(self) -> bool:
        return self.root in DECODABLE_ROOTS and all(c.decodable for c in self.children)

    # -- display -----------------------------------------------------------------------------
    @property
    def name(self) -> str:
        base = _SQL_NAMES.get(self.root, self.root)
        if self.root in STRING_ROOTS or self.root in BINARY_ROOTS:
            base = "STRING" if self.root == "VARCHAR" and self.length == 0x7FFFFFFF else f"{base}({self.length})"
        elif self.root == "DECIMAL":
            base = f"DECIMAL({self.precision}, {self.scale})"
        elif self.root in TIMESTAMP_ROOTS or self.root == "TIME_WITHOUT_TIME_ZONE":
            base = f"{base}({self.precision})"
        elif self.root in ("ARRAY", "MULTISET"):
            base = f"{base}<{self.children[0].name}>"
        elif self.root == "MAP":
            base = f"MAP<{self.children[0].name}, {self.children[1].name}>"
        elif self.root in ROW_ROOTS:
            fields = ", ".join(f"{n} {c.name}" for n, c in zip(self.field_names, self.children))
            base = f"ROW<{fields}>" if self.root == "ROW" else f"STRUCTURED<{self.raw_class}>({fields})"
        elif self.root == "RAW":
            base = f"RAW({self.raw_class})"
        if self.kind and self.kind != "REGULAR":
            base += f" *{self.kind}*"
        return base if self.nullable else base + " NOT NULL"


def logical_type(root: str, nullable: bool = True, **params: Any) -> LogicalType:
    """A LogicalType built by fstate (no serialized form)."""
    return LogicalType(root, nullable, **params)


def read_logical_type(buf: bytes, pos: int, source: str | None = None) -> tuple[LogicalType, int]:
    """One Java-serialized LogicalType at ``pos``; returns it (holding its exact bytes) and the end."""
    obj, end = read_java_object(buf, pos, source)
    return replace(from_java(obj, source), serialized=bytes(buf[pos:end])), end


def from_java(obj: Any, source: str | None = None) -> LogicalType:
    """A LogicalType from the dict :mod:`..javaser` makes of a ``*Type`` object."""
    if not isinstance(obj, dict) or "typeRoot" not in obj:
        cls = obj.get("@class") if isinstance(obj, dict) else type(obj).__name__
        raise UnsupportedSerializerError(f"not a Flink LogicalType: {cls}", source)
    root = obj["typeRoot"]
    params: dict[str, Any] = {}
    for name in ("length", "precision", "scale"):
        if isinstance(obj.get(name), int):
            params[name] = obj[name]
    if isinstance(obj.get("kind"), str):
        params["kind"] = obj["kind"]
    if root in ("ARRAY", "MULTISET"):
        params["children"] = (from_java(obj["elementType"], source),)
    elif root == "MAP":
        params["children"] = (from_java(obj["keyType"], source), from_java(obj["valueType"], source))
    elif root == "ROW":
        fields = _list_items(obj.get("fields"))
        params["children"] = tuple(from_java(f["type"], source) for f in fields)
        params["field_names"] = tuple(f["name"] for f in fields)
    elif root == "RAW":
        clazz = obj.get("clazz")
        params["raw_class"] = clazz.get("name") if isinstance(clazz, dict) else getattr(clazz, "name", None)
    elif root == "STRUCTURED_TYPE":
        attributes = _list_items(obj.get("attributes"))
        params["children"] = tuple(from_java(a["type"], source) for a in attributes)
        params["field_names"] = tuple(a["name"] for a in attributes)
        # Flink 2.1+ stores the class name; 1.x and 2.0 only the implementation class
        implementation = obj.get("implementationClass")
        params["raw_class"] = (obj.get("className") or (implementation.get("name") if isinstance(implementation, dict)
                                                        else None) or obj.get("@class"))
    elif root == "DISTINCT_TYPE":
        params["raw_class"] = obj.get("@class")
    return LogicalType(root, bool(obj.get("isNullable", True)), **params)


def _list_items(obj: Any) -> list:
    """The elements of a Java list as javaser reads it (an ArrayList, or a Collections wrapper)."""
    if isinstance(obj, list):
        return obj
    if isinstance(obj, dict):
        if "@items" in obj:
            return obj["@items"]
        if obj.get("@class") == "java.util.CollSer":  # List.of(...): the size (i32), then the elements
            return [item for item in obj.get("@written", []) if not isinstance(item, (bytes, bytearray))]
        for inner in ("list", "c"):  # Collections.unmodifiableList / unmodifiableCollection
            if inner in obj:
                return _list_items(obj[inner])
    raise UnsupportedSerializerError(f"cannot read the row fields of a RowType from {obj!r:.200}")


def data_type_logical(obj: Any, source: str | None = None) -> tuple[LogicalType, str | None]:
    """The LogicalType and conversion class of a Java-serialized ``DataType`` (ExternalSerializer)."""
    if not isinstance(obj, dict) or "logicalType" not in obj:
        raise UnsupportedSerializerError(f"not a Flink DataType: {obj!r:.200}", source)
    conversion = obj.get("conversionClass")
    return from_java(obj["logicalType"], source), conversion.get("name") if isinstance(conversion, dict) else None
