"""TypeInfo → Spark SQL types, and the per-value adjustments Spark needs.

The TypeInfo tree is the source of truth; this module is the only place that knows Spark's types.
"""

from __future__ import annotations

import pickle
import decimal
from decimal import Decimal
from typing import Any, Callable

from pyspark.sql import types as st

from ..savepoint.errors import FStateError
from ..savepoint.types import typeinfo as T

DECIMAL = st.DecimalType(38, 18)
BIG_INTEGER = st.DecimalType(38, 0)

_SCALARS: dict[str, st.DataType] = {
    "String": st.StringType(), "Long": st.LongType(), "Integer": st.IntegerType(), "Short": st.ShortType(),
    "Byte": st.ByteType(), "Boolean": st.BooleanType(), "Double": st.DoubleType(), "Float": st.FloatType(),
    "Character": st.StringType(), "BigDecimal": DECIMAL, "BigInteger": BIG_INTEGER,
    "Void": st.StringType(), "Date": st.TimestampType(), "SqlDate": st.DateType(), "SqlTime": st.TimeType(6),
    "SqlTimestamp": st.TimestampType(), "LocalDate": st.DateType(), "LocalTime": st.TimeType(6),
    "LocalDateTime": st.TimestampNTZType(), "Instant": st.TimestampType(), "byte[]": st.BinaryType(),
    "int[]": st.ArrayType(st.IntegerType(), False), "long[]": st.ArrayType(st.LongType(), False),
    "short[]": st.ArrayType(st.ShortType(), False), "float[]": st.ArrayType(st.FloatType(), False),
    "double[]": st.ArrayType(st.DoubleType(), False), "char[]": st.ArrayType(st.StringType(), False),
    "boolean[]": st.ArrayType(st.BooleanType(), False), "String[]": st.ArrayType(st.StringType(), True),
    "VoidNamespace": st.StringType(), "GlobalWindow": st.StringType(), "Tuple0": st.StringType(),
}


def spark_type(t: T.TypeInfo) -> st.DataType:
    if isinstance(t, T.Scalar):
        return _SCALARS[t.kind]
    if isinstance(t, T.NullableType):
        return spark_type(t.inner)
    if isinstance(t, T.TtlType):
        return spark_type(t.value)
    if isinstance(t, (T.TupleType, T.RowType, T.EitherType)):
        return st.StructType([st.StructField(n, spark_type(c), True) for n, c in zip(t.field_names, t.children)])
    if isinstance(t, T.PojoType):
        if not t.decodable:
            return st.BinaryType()
        return st.StructType([st.StructField(n, spark_type(c), True) for n, _, c in t.fields])
    if isinstance(t, T.TimeWindowType):
        return st.StructType([st.StructField("start", st.LongType(), False),
                              st.StructField("end", st.LongType(), False)])
    if isinstance(t, (T.ListType, T.GenericArrayType)):
        return st.ArrayType(spark_type(t.children[0]), True)
    if isinstance(t, T.MapType):
        return st.MapType(spark_type(t.key), spark_type(t.value), True)
    if isinstance(t, T.EnumType):
        return st.StringType()
    if isinstance(t, T.PickledType):
        return st.BinaryType()  # the pickle bytes (protocol 4) of fstate's runtime
    if isinstance(t, T.TimerType):
        return st.StructType([st.StructField("timestamp", st.LongType()),
                              st.StructField("key", spark_type(t.key)),
                              st.StructField("namespace", spark_type(t.namespace))])
    if not t.decodable:
        return st.BinaryType()
    raise FStateError(f"no Spark type for Flink type {t.name}")


# ---------------------------------------------------------------------------------------------
# value conversion: only where Python values differ from what Spark accepts


def converter(t: T.TypeInfo) -> Callable[[Any], Any] | None:
    """A function fixing up a decoded value for Spark, or None when the value is already fine."""
    if isinstance(t, T.Scalar):
        if t.kind == "BigDecimal":
            return _check_decimal(18, "BigDecimal")
        if t.kind == "BigInteger":
            return _bigint_to_decimal
        return None
    if isinstance(t, T.NullableType):
        return converter(t.inner)
    if isinstance(t, T.TtlType):
        return converter(t.value)
    if isinstance(t, T.PickledType):
        return _repickle
    if isinstance(t, (T.TupleType, T.RowType, T.EitherType, T.PojoType)):
        if isinstance(t, T.PojoType) and not t.decodable:
            return None
        convs = [converter(c) for c in (t.children if not isinstance(t, T.PojoType) else [f[2] for f in t.fields])]
        if not any(convs):
            return None

        def conv_struct(v):
            if v is None:
                return None
            return tuple(v if c is None or x is None else c(x) for c, x in zip(convs, v))

        return conv_struct
    if isinstance(t, (T.ListType, T.GenericArrayType)):
        c = converter(t.children[0])
        if c is None:
            return None
        return lambda v: None if v is None else [None if x is None else c(x) for x in v]
    if isinstance(t, T.MapType):
        ck, cv = converter(t.key), converter(t.value)
        if ck is None and cv is None:
            return None
        ck = ck or (lambda x: x)
        cv = cv or (lambda x: x)
        return lambda v: None if v is None else {ck(k): (None if x is None else cv(x)) for k, x in v.items()}
    return None


def _repickle(v):
    return bytes(v) if isinstance(v, T.OpaquePickle) else pickle.dumps(v, protocol=T.PickledType.PROTOCOL)


def _check_decimal(scale: int, what: str):
    quantum = Decimal(1).scaleb(-scale)
    limit = Decimal(10) ** (38 - scale)
    ctx = decimal.Context(prec=1000)

    def conv(v: Decimal):
        try:
            q = v.quantize(quantum, context=ctx)
        except decimal.InvalidOperation:
            q = None
        if q is None or q != v or abs(q) >= limit:
            raise FStateError(f"{what} value {v} does not fit Spark's DecimalType(38, {scale}) exactly")
        return q

    return conv


def _bigint_to_decimal(v: int):
    if abs(v) >= 10 ** 38:
        raise FStateError(f"BigInteger value {v} does not fit Spark's DecimalType(38, 0)")
    return Decimal(v)
