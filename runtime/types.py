"""Types of keys and state values: Flink's serializers where Flink has one, fstate's pickle otherwise.

``Types.LONG`` etc. are the format core's TypeInfo nodes, so state declared with them is written
with Flink's own serializers (and real Flink restores it). A state declared without a type, or with
``Types.PICKLED``, holds any Python value, written with fstate's ``PickleSerializerSnapshot`` (fstate
reads it; Flink, rightly, refuses it).
"""

from __future__ import annotations

from typing import Any

from ..savepoint.types import typeinfo as T


class Types:
    STRING = T.STRING
    LONG = T.LONG
    INT = T.INT
    SHORT = T.SHORT
    BYTE = T.BYTE
    BOOLEAN = T.BOOLEAN
    DOUBLE = T.DOUBLE
    FLOAT = T.FLOAT
    CHAR = T.CHAR
    BIG_DEC = T.BIG_DECIMAL
    BIG_INT = T.BIG_INTEGER
    BYTES = T.BYTES
    LOCAL_DATE = T.LOCAL_DATE
    LOCAL_TIME = T.LOCAL_TIME
    LOCAL_DATE_TIME = T.LOCAL_DATE_TIME
    INSTANT = T.INSTANT
    SQL_TIMESTAMP = T.SQL_TIMESTAMP
    PICKLED = T.PICKLED

    @staticmethod
    def TUPLE(*fields: T.TypeInfo) -> T.TypeInfo:
        """``Types.TUPLE(Types.LONG, Types.STRING)`` (or one list argument): Flink's TupleN."""
        if len(fields) == 1 and isinstance(fields[0], (list, tuple)):
            fields = tuple(fields[0])
        return T.TupleType(tuple(fields))

    @staticmethod
    def LIST(element: T.TypeInfo) -> T.TypeInfo:
        return T.ListType(element)

    @staticmethod
    def MAP(key: T.TypeInfo, value: T.TypeInfo) -> T.TypeInfo:
        return T.MapType(key, value)

    @staticmethod
    def ROW(*fields: T.TypeInfo) -> T.TypeInfo:
        if len(fields) == 1 and isinstance(fields[0], (list, tuple)):
            fields = tuple(fields[0])
        return T.RowType(tuple(fields))


def or_pickled(t: T.TypeInfo | None) -> T.TypeInfo:
    return T.PICKLED if t is None else t


def infer_key_type(key: Any) -> T.TypeInfo:
    """The key type used when ``key_by`` got none: str → String, int → Long, float → Double,
    bool → Boolean, a tuple of those → TupleN; anything else is pickled. (Pass ``key_type`` to
    match a Flink job whose keys are Integer, Short, ...)"""
    if isinstance(key, bool):
        return T.BOOLEAN
    if isinstance(key, int):
        return T.LONG
    if isinstance(key, str):
        return T.STRING
    if isinstance(key, float):
        return T.DOUBLE
    if isinstance(key, tuple) and key and all(isinstance(x, (bool, int, str, float)) for x in key):
        return T.TupleType(tuple(infer_key_type(x) for x in key))
    return T.PICKLED


def check_encodable(t: T.TypeInfo, what: str) -> None:
    from ..savepoint.errors import UnsupportedSerializerError

    if not t.fully_decodable:
        raise UnsupportedSerializerError(f"{what} has type {t.name}, whose values the runtime cannot decode "
                                         "or encode (Kryo/Avro/custom serializers)")
