"""The TypeInfo tree: one node class per Flink serializer (see :mod:`.base`), and its visitor.

Callers import the nodes from here: ``from fstate.savepoint.types import TupleType, LONG``.
Modules: :mod:`.base` (the ``TypeInfo`` base), :mod:`.scalars`, :mod:`.composites`, :mod:`.pojo`,
:mod:`.pickled`, :mod:`.table` (the table runtime's serializers, with :mod:`.logical` and
:mod:`.table_binary`; written from scratch by :mod:`.logical_java` and :mod:`.table_serializers`;
:mod:`.sorted_map`, a Top-N's ``SortedMapSerializer``), :mod:`.cep` (the nodes), :mod:`.visitor` (``TypeVisitor``, ``PreOrderTypeVisitor`` and ``visit``), :mod:`.roles`
(what a node is structurally: a list, a map, a TTL wrapper, ...), :mod:`.key_hash`,
:mod:`.snapshots` (serializer snapshots ↔ trees) and :mod:`.hashing` (Java hash codes, key groups).
"""

from .base import Decoder, Encoder, TypeInfo
from .cep import CepType
from .composites import (ROW_KINDS, ArrayListType, Composite, EitherType, GenericArrayType, ListType, MapType,
                         NullableType, RowType, SetType, TimerType, TTL_FIELDS, TtlType, TtlValue,
                         TupleType)
from .pickled import PICKLED, OpaquePickle, OpaqueType, PickledType, trusted_pickles
from .pojo import EnumType, PojoType
from .scalars import (BIG_DECIMAL, BIG_INTEGER, BOOLEAN, BYTE, BYTES, CHAR, DOUBLE, FLOAT, INSTANT, INT, LOCAL_DATE,
                      LOCAL_DATE_TIME, LOCAL_TIME, LONG, SCALAR_KINDS, SCALARS, SHORT, SQL_DATE, SQL_TIME, SQL_TIMESTAMP,
                      STRING, TIME_WINDOW, VOID_NAMESPACE, Scalar, ScalarKind, TimeWindowType, scalar)
from .logical import LogicalType
from .sorted_map import SortedMapType
from .table import ExternalType, RawValueDataType, RowDataType, TableDataType
from .visitor import MissingVisitorBranchError, PreOrderTypeVisitor, TypeInfoVisitor, TypeVisitor, visit

__all__ = [
    "Decoder", "Encoder", "TypeInfo",
    "Scalar", "SCALARS", "SCALAR_KINDS", "ScalarKind", "scalar", "TimeWindowType", "TIME_WINDOW",
    "STRING", "LONG", "INT", "SHORT", "BYTE", "BOOLEAN", "DOUBLE", "FLOAT", "CHAR", "BIG_DECIMAL", "BIG_INTEGER",
    "BYTES", "VOID_NAMESPACE", "LOCAL_DATE", "LOCAL_TIME", "LOCAL_DATE_TIME", "INSTANT", "SQL_TIMESTAMP",
    "SQL_DATE", "SQL_TIME",
    "Composite", "TupleType", "RowType", "ROW_KINDS", "ListType", "ArrayListType", "SetType", "MapType",
    "NullableType", "EitherType", "GenericArrayType", "TimerType", "TTL_FIELDS", "TtlType", "TtlValue",
    "PojoType", "EnumType",
    "PickledType", "PICKLED", "OpaquePickle", "OpaqueType", "trusted_pickles",
    "TypeInfoVisitor", "TypeVisitor", "PreOrderTypeVisitor", "visit", "MissingVisitorBranchError",
    "CepType",
    # table runtime
    "LogicalType", "RowDataType", "TableDataType", "RawValueDataType", "ExternalType",
    "SortedMapType",
]
