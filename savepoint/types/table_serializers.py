"""The serializer (TypeInfo node) the table runtime uses for a LogicalType, built from scratch.

:func:`table_serializer` gives the node of ``InternalTypeInfo.of(type)``'s serializer: a
``RowDataSerializer`` for ROW, the table data serializers (StringData, DecimalData, TimestampData,
ArrayData, MapData) and the basic serializers for the fixed-size types, as Flink's
``InternalSerializers`` chooses them; its snapshot writes as Flink's does (the LogicalTypes
Java-serialized by :mod:`.logical_java`).
"""

from __future__ import annotations

import struct

from ..errors import UnsupportedSerializerError
from . import scalars, table
from .base import TypeInfo
from .logical import LogicalType
from .logical_java import java_element_serializer, java_logical_type

MULTISET_COUNT = LogicalType("INTEGER", False)


def table_serializer(t: LogicalType) -> TypeInfo:
    """The TypeInfo node of Flink's internal serializer for ``t`` (``InternalSerializers.create``)."""
    basic = {"BOOLEAN": scalars.BOOLEAN, "TINYINT": scalars.BYTE, "SMALLINT": scalars.SHORT, "INTEGER": scalars.INT,
             "DATE": scalars.INT, "TIME_WITHOUT_TIME_ZONE": scalars.INT, "BIGINT": scalars.LONG,
             "FLOAT": scalars.FLOAT, "DOUBLE": scalars.DOUBLE, "BINARY": scalars.BYTES, "VARBINARY": scalars.BYTES}
    if t.root in basic:
        return basic[t.root]
    if t.root in ("CHAR", "VARCHAR"):
        return table.TableDataType(table.STRING_DATA, 3, b"", t)
    if t.root == "DECIMAL":
        return table.TableDataType(table.DECIMAL_DATA, 3, struct.pack(">ii", t.precision, t.scale), t)
    if t.root in ("TIMESTAMP_WITHOUT_TIME_ZONE", "TIMESTAMP_WITH_LOCAL_TIME_ZONE"):
        return table.TableDataType(table.TIMESTAMP_DATA, 1, struct.pack(">i", t.precision), t)
    if t.root == "ARRAY":
        (element,) = t.children
        payload = java_logical_type(element) + java_element_serializer(element)
        return table.TableDataType(table.ARRAY_DATA, 3, payload, t)
    if t.root in ("MAP", "MULTISET"):
        key, value = t.children if t.root == "MAP" else (t.children[0], MULTISET_COUNT)
        payload = (java_logical_type(key) + java_logical_type(value)
                   + java_element_serializer(key) + java_element_serializer(value))
        return table.TableDataType(table.MAP_DATA, 3, payload, LogicalType("MAP", True, children=(key, value)))
    if t.root == "ROW":
        return table.RowDataType(t.children, tuple(table_serializer(c) for c in t.children), t.field_names)
    if t.root == "RAW":
        java_logical_type(t)  # refuses RAW types other than the data views
        null = table.TableDataType(table.NULL_DATA, 3, b"", LogicalType("NULL", True))
        return table.RawValueDataType(null)
    raise UnsupportedSerializerError(f"fstate cannot write the serializer of {t.name}")
