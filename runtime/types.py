"""Types of keys and state values: Flink's serializers where Flink has one, fstate's pickle otherwise.

``Types.LONG`` etc. are the format core's TypeInfo nodes, so state declared with them is written
with Flink's own serializers (and real Flink restores it). A state declared without a type, or with
``Types.PICKLED``, holds any Python value, written with fstate's ``PickleSerializerSnapshot`` (fstate
reads it; Flink, rightly, refuses it).
"""

from __future__ import annotations

from typing import Any

from ..savepoint.types import typeinfo


class Types:
    STRING = typeinfo.STRING
    LONG = typeinfo.LONG
    INT = typeinfo.INT
    SHORT = typeinfo.SHORT
    BYTE = typeinfo.BYTE
    BOOLEAN = typeinfo.BOOLEAN
    DOUBLE = typeinfo.DOUBLE
    FLOAT = typeinfo.FLOAT
    CHAR = typeinfo.CHAR
    BIG_DEC = typeinfo.BIG_DECIMAL
    BIG_INT = typeinfo.BIG_INTEGER
    BYTES = typeinfo.BYTES
    LOCAL_DATE = typeinfo.LOCAL_DATE
    LOCAL_TIME = typeinfo.LOCAL_TIME
    LOCAL_DATE_TIME = typeinfo.LOCAL_DATE_TIME
    INSTANT = typeinfo.INSTANT
    SQL_TIMESTAMP = typeinfo.SQL_TIMESTAMP
    PICKLED = typeinfo.PICKLED

    @staticmethod
    def TUPLE(*fields: typeinfo.TypeInfo) -> typeinfo.TypeInfo:
        """``Types.TUPLE(Types.LONG, Types.STRING)`` (or one list argument): Flink's TupleN."""
        if len(fields) == 1 and isinstance(fields[0], (list, tuple)):
            fields = tuple(fields[0])
        return typeinfo.TupleType(tuple(fields))

    @staticmethod
    def LIST(element: typeinfo.TypeInfo) -> typeinfo.TypeInfo:
        return typeinfo.ListType(element)

    @staticmethod
    def MAP(key: typeinfo.TypeInfo, value: typeinfo.TypeInfo) -> typeinfo.TypeInfo:
        return typeinfo.MapType(key, value)

    @staticmethod
    def ROW(*fields: typeinfo.TypeInfo) -> typeinfo.TypeInfo:
        if len(fields) == 1 and isinstance(fields[0], (list, tuple)):
            fields = tuple(fields[0])
        return typeinfo.RowType(tuple(fields))


def or_pickled(t: typeinfo.TypeInfo | None) -> typeinfo.TypeInfo:
    return typeinfo.PICKLED if t is None else t


def infer_key_type(key: Any) -> typeinfo.TypeInfo:
    """The key type used when ``key_by`` got none: str → String, int → Long, float → Double,
    bool → Boolean, a tuple of those → TupleN; anything else is pickled. (Pass ``key_type`` to
    match a Flink job whose keys are Integer, Short, ...)"""
    if isinstance(key, bool):
        return typeinfo.BOOLEAN
    if isinstance(key, int):
        return typeinfo.LONG
    if isinstance(key, str):
        return typeinfo.STRING
    if isinstance(key, float):
        return typeinfo.DOUBLE
    if isinstance(key, tuple) and key and all(isinstance(x, (bool, int, str, float)) for x in key):
        return typeinfo.TupleType(tuple(infer_key_type(x) for x in key))
    return typeinfo.PICKLED


def check_encodable(t: typeinfo.TypeInfo, what: str) -> None:
    from ..savepoint.errors import UnsupportedSerializerError

    if not t.fully_decodable:
        raise UnsupportedSerializerError(f"{what} has type {t.name}, whose values the runtime cannot decode "
                                         "or encode (Kryo/Avro/custom serializers)")
