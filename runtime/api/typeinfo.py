"""Types of keys and state values: Flink's serializers where Flink has one, fstate's pickle otherwise.

``Types.LONG`` etc. are the format core's TypeInfo nodes, so state declared with them is written
with Flink's own serializers (and real Flink restores it). A state declared without a type, or with
``Types.PICKLED``, holds any Python value, written with fstate's ``PickleSerializerSnapshot`` (fstate
reads it; Flink, rightly, refuses it).
"""

from __future__ import annotations

from typing import Any

from ...savepoint import types as savepoint_types


class Types:
    STRING = savepoint_types.STRING
    LONG = savepoint_types.LONG
    INT = savepoint_types.INT
    SHORT = savepoint_types.SHORT
    BYTE = savepoint_types.BYTE
    BOOLEAN = savepoint_types.BOOLEAN
    DOUBLE = savepoint_types.DOUBLE
    FLOAT = savepoint_types.FLOAT
    CHAR = savepoint_types.CHAR
    BIG_DEC = savepoint_types.BIG_DECIMAL
    BIG_INT = savepoint_types.BIG_INTEGER
    BYTES = savepoint_types.BYTES
    LOCAL_DATE = savepoint_types.LOCAL_DATE
    LOCAL_TIME = savepoint_types.LOCAL_TIME
    LOCAL_DATE_TIME = savepoint_types.LOCAL_DATE_TIME
    INSTANT = savepoint_types.INSTANT
    SQL_TIMESTAMP = savepoint_types.SQL_TIMESTAMP
    PICKLED = savepoint_types.PICKLED

    @staticmethod
    def TUPLE(*fields: savepoint_types.TypeInfo) -> savepoint_types.TypeInfo:
        """``Types.TUPLE(Types.LONG, Types.STRING)`` (or one list argument): Flink's TupleN."""
        if len(fields) == 1 and isinstance(fields[0], (list, tuple)):
            fields = tuple(fields[0])
        return savepoint_types.TupleType(tuple(fields))

    @staticmethod
    def LIST(element: savepoint_types.TypeInfo) -> savepoint_types.TypeInfo:
        return savepoint_types.ListType(element)

    @staticmethod
    def MAP(key: savepoint_types.TypeInfo, value: savepoint_types.TypeInfo) -> savepoint_types.TypeInfo:
        return savepoint_types.MapType(key, value)

    @staticmethod
    def ROW(*fields: savepoint_types.TypeInfo) -> savepoint_types.TypeInfo:
        if len(fields) == 1 and isinstance(fields[0], (list, tuple)):
            fields = tuple(fields[0])
        return savepoint_types.RowType(tuple(fields))


def or_pickled(t: savepoint_types.TypeInfo | None) -> savepoint_types.TypeInfo:
    return savepoint_types.PICKLED if t is None else t


def infer_key_type(key: Any) -> savepoint_types.TypeInfo:
    """The key type used when ``key_by`` got none: str → String, int → Long, float → Double,
    bool → Boolean, a tuple of those → TupleN; anything else is pickled. (Pass ``key_type`` to
    match a Flink job whose keys are Integer, Short, ...)"""
    if isinstance(key, bool):
        return savepoint_types.BOOLEAN
    if isinstance(key, int):
        return savepoint_types.LONG
    if isinstance(key, str):
        return savepoint_types.STRING
    if isinstance(key, float):
        return savepoint_types.DOUBLE
    if isinstance(key, tuple) and key and all(isinstance(x, (bool, int, str, float)) for x in key):
        return savepoint_types.TupleType(tuple(infer_key_type(x) for x in key))
    return savepoint_types.PICKLED


def check_encodable(t: savepoint_types.TypeInfo, what: str) -> None:
    from ...savepoint.errors import UnsupportedSerializerError

    if not t.fully_decodable:
        raise UnsupportedSerializerError(f"{what} has type {t.name}, whose values the runtime cannot decode "
                                         "or encode (Kryo/Avro/custom serializers)")
