"""Every TypeInfo node class has a branch in every visitor; the visitors keep their old answers."""

from __future__ import annotations

import pytest

import fstate.readers.arrow_schema as arrow_schema
import fstate.readers.schema as spark_schema
import fstate.savepoint._fastpath as fastpath
import fstate.savepoint.types.key_hash as key_hash
import fstate.writers.flink_target as flink_target
import fstate.writers.spec as spec
import fstate.writers.validation as validation
from fstate.savepoint.errors import InvalidArgumentError
from fstate.savepoint.types import (BIG_DECIMAL, BIG_INTEGER, INT, LONG, PICKLED, SCALARS, STRING, TIME_WINDOW,
                                    VOID_NAMESPACE, ArrayListType, EitherType, EnumType, GenericArrayType,
                                    ListType, MapType, NullableType, OpaqueType, PojoType, RowType, SetType,
                                    TimerType, TtlType, TupleType, TypeInfo, TypeInfoVisitor, scalar, visit)
from fstate.savepoint.types import visitor as visitor_module
from fstate.savepoint.types.cep import KINDS as CEP_KINDS, CepType
from fstate.savepoint.types import table
from fstate.savepoint.types.sorted_map import SortedMapType, SortKeyOrder
from fstate.savepoint.types.logical import LogicalType
from fstate.savepoint.types.visitor import ABSTRACT_NODES, BRANCHES, MissingVisitorBranchError

#: The visitors of the code base (importing their modules above registers them as subclasses).
VISITOR_MODULES = (arrow_schema, spark_schema, fastpath, key_hash, spec, flink_target, validation)


def _subclasses(cls) -> set[type]:
    found = set()
    for sub in cls.__subclasses__():
        if sub.__module__.startswith("fstate."):
            found.add(sub)
        found |= _subclasses(sub)
    return found


NODE_CLASSES = sorted(_subclasses(TypeInfo) - set(ABSTRACT_NODES), key=lambda c: c.__qualname__)
VISITORS = sorted(_subclasses(TypeInfoVisitor), key=lambda c: c.__qualname__)


def _samples() -> dict[type, list[TypeInfo]]:
    samples: dict[type, list[TypeInfo]] = {}
    for t in [*SCALARS.values(), TIME_WINDOW, TupleType((LONG, STRING)), RowType((INT, BIG_DECIMAL), ("a", "b")),
              ListType(BIG_INTEGER), ArrayListType(LONG), SetType(STRING), MapType(STRING, BIG_DECIMAL),
              NullableType(LONG, 8), EitherType(INT, STRING), GenericArrayType(STRING, "java.lang.String"),
              TimerType(LONG, VOID_NAMESPACE), TtlType(LONG, STRING),
              PojoType("com.acme.Order", [("amount", "com.acme.Order", BIG_DECIMAL), ("id", "com.acme.Order", LONG)]),
              PojoType("com.acme.Gone", [("x", "com.acme.Gone", None)]), EnumType("com.acme.Color", ("RED", "GREEN")),
              PICKLED, OpaqueType("org.apache.flink.api.java.typeutils.runtime.kryo.KryoSerializerSnapshot", 2, b"",
                                  "com.acme.Thing"),
              *_table_samples()]:
        samples.setdefault(type(t), []).append(t)
    # CEP
    for kind in CEP_KINDS:
        samples.setdefault(CepType, []).append(
            CepType(kind, (TupleType((STRING, LONG)),)) if kind == "Lockable" else CepType(kind))
    samples[CepType].append(CepType("NFAState", outer_version=1, supports_previous_timestamp=False))
    return samples


def _table_samples() -> list[TypeInfo]:
    varchar = LogicalType("VARCHAR", True, length=10)
    decimal = LogicalType("DECIMAL", False, precision=20, scale=2)
    string_data = table.TableDataType(table.STRING_DATA, 3, b"", varchar)
    decimal_data = table.TableDataType(table.DECIMAL_DATA, 3, bytes(8), decimal)
    row = table.RowDataType((LogicalType("BIGINT"), varchar, decimal), (LONG, string_data, decimal_data))
    sort_key = table.RowDataType((LogicalType("BIGINT", False),), (LONG,))
    return [row, table.RowDataType(None, arity=2), string_data, decimal_data,
            table.RawValueDataType(LONG), table.ExternalType(LONG, b"", False, LogicalType("BIGINT"), "java.lang.Long"),
            SortedMapType(sort_key, LONG, b"", order=(SortKeyOrder(0, True, False),)), SortedMapType(sort_key, LONG, b"")]


SAMPLES = _samples()


def test_the_visitors_are_found():
    names = {v.__qualname__ for v in VISITORS}
    assert {"SparkTypeVisitor", "ValueConverterVisitor", "ArrowTypeVisitor", "FastPathSpecVisitor", "ValueHashVisitor",
            "TypeNameVisitor"} <= names


@pytest.mark.parametrize("node_class", NODE_CLASSES, ids=lambda c: c.__qualname__)
def test_every_node_class_has_a_branch(node_class):
    assert node_class in BRANCHES, f"{node_class.__qualname__} is missing from visitor.BRANCHES"
    method = BRANCHES[node_class]
    assert method in vars(TypeInfoVisitor), f"TypeInfoVisitor has no {method}"
    for visitor_class in VISITORS:
        assert getattr(visitor_class, method) is not getattr(TypeInfoVisitor, method), (
            f"{visitor_class.__qualname__} has no branch for {node_class.__qualname__} ({method})")


def _instance(visitor_class, t: TypeInfo):
    if visitor_class is validation.SourceTypeVisitor:  # checks a column: the one fstate itself reads
        return visitor_class(spark_schema.spark_type(t), "column 'x'")
    return visitor_class()


@pytest.mark.parametrize("node_class", NODE_CLASSES, ids=lambda c: c.__qualname__)
def test_every_visitor_answers_for_every_node(node_class):
    assert node_class in SAMPLES, f"add a {node_class.__qualname__} to this test's samples"
    for t in SAMPLES[node_class]:
        for visitor_class in VISITORS:
            try:
                visit(t, _instance(visitor_class, t))
            except InvalidArgumentError:
                # types write specs cannot name; types Flink 1.x has no serializer for (Set)
                assert visitor_class is spec.TypeNameVisitor or (
                    visitor_class is flink_target.Flink1Types and node_class is SetType)


def test_a_missing_branch_fails_loudly():
    class Unlisted(TypeInfo):
        pass

    with pytest.raises(MissingVisitorBranchError, match="Unlisted.*has no visitor branch.*SparkTypeVisitor"):
        visit(Unlisted(), spark_schema.SparkTypeVisitor())

    class ScalarsOnly(TypeInfoVisitor[str]):
        def visit_scalar(self, node):
            return node.name

    assert visit(LONG, ScalarsOnly()) == "Long"
    with pytest.raises(MissingVisitorBranchError, match="ScalarsOnly has no branch for TypeInfo node class ListType"
                                                        ".*ScalarsOnly.visit_list"):
        visit(ListType(LONG), ScalarsOnly())
    assert set(BRANCHES.values()) == {m for m in vars(TypeInfoVisitor) if m.startswith("visit_")}
    assert visitor_module.visit is visit


def test_fast_path_specs():
    codes = {t.name: fastpath.type_spec(t) for t in SCALARS.values()}
    assert codes["String"] == codes["StringValue"] == fastpath.STRING
    assert codes["Long"] == codes["LongValue"] == fastpath.LONG
    assert codes["Double"] == codes["DoubleValue"] == fastpath.DOUBLE
    assert codes["Character"] == codes["CharValue"] == fastpath.CHAR
    assert codes["VoidNamespace"] == codes["GlobalWindow"] == codes["Void"] == codes["Tuple0"] == fastpath.ZERO
    assert {n for n, c in codes.items() if c is None} == {
        "BigDecimal", "BigInteger", "Date", "SqlDate", "SqlTime", "SqlTimestamp", "LocalDate", "LocalTime",
        "LocalDateTime", "Instant", "byte[]", "int[]", "long[]", "short[]", "float[]", "double[]", "char[]",
        "boolean[]", "String[]"}
    assert fastpath.type_spec(TIME_WINDOW) == fastpath.WINDOW
    assert fastpath.type_spec(TupleType((LONG, NullableType(STRING)))) == (
        fastpath.TUPLE, (fastpath.LONG, (fastpath.NULLABLE, 0, fastpath.STRING)))
    assert fastpath.type_spec(TtlType(LONG, INT)) == (fastpath.TTL, fastpath.INT)
    assert fastpath.type_spec(TupleType((LONG, BIG_DECIMAL))) is None
    assert fastpath.type_spec(RowType((LONG,))) is None


def test_value_hash():
    assert key_hash.has_value_hash(TupleType((LONG, NullableType(STRING))))
    assert key_hash.has_value_hash(RowType((INT, scalar("Character"))))
    assert key_hash.has_value_hash(PICKLED)
    assert not key_hash.has_value_hash(BIG_DECIMAL)
    assert not key_hash.has_value_hash(scalar("DoubleValue"))  # Flink's DoubleValue has no value hashCode
    assert not key_hash.has_value_hash(TupleType((LONG, ListType(LONG))))
    assert not key_hash.has_value_hash(EnumType("com.acme.Color", ("RED",)))
    for t in SCALARS.values():  # the answer matches whether java_hash works
        sample = {"String": "a", "Character": "a", "Boolean": True, "Double": 1.0, "Float": 1.0}.get(t.kind, 1)
        if key_hash.has_value_hash(t):
            t.java_hash(sample)
        else:
            with pytest.raises(Exception):
                t.java_hash(sample)


def test_type_names_round_trip():
    for t, names in spec.SCALAR_NAMES:
        assert spec.type_name(t) == names[0]
        for name in names:
            assert spec.parse_type(name) is t
    for text in ("MAP<STRING, LIST<LONG>>", "ROW<a INT, b NULLABLE<DOUBLE>>", "TUPLE<LONG, STRING>",
                 "EITHER<INT, STRING>", "ENUM<com.acme.Color: RED, GREEN>",
                 "POJO<com.acme.Order: amount DECIMAL, id LONG>", "LIST<INT[]>"):
        assert spec.type_name(spec.parse_type(text)) == text
    for t in (TIME_WINDOW, PICKLED, SetType(LONG), scalar("LongValue"), TupleType((LONG,), "scala.Tuple1")):
        with pytest.raises(InvalidArgumentError):
            spec.type_name(t)


def test_spark_types():
    from pyspark.sql import types as spark_types

    assert spark_schema.spark_type(SetType(LONG)) == spark_types.ArrayType(spark_types.LongType(), True)
    assert spark_schema.spark_type(OpaqueType("x.Snapshot", 1, b"")) == spark_types.BinaryType()
    assert spark_schema.converter(ArrayListType(BIG_INTEGER))([1, None]) == [1, None]
    assert spark_schema.converter(ListType(LONG)) is None


def test_cep_spark_types():
    from pyspark.sql import types as spark_types

    nfa = spark_schema.spark_type(CepType("NFAState"))
    (partial, completed) = nfa.fields
    assert (partial.name, completed.name) == ("partial_matches", "completed_matches")
    state = partial.dataType.elementType
    assert state.names == ["state_name", "previous_entry", "version", "start_timestamp", "previous_timestamp",
                           "start_event"]
    assert state["previous_entry"].dataType.names == ["event_id", "page_name"]
    assert state["start_event"].dataType.names == ["id", "timestamp"]
    assert state["version"].dataType == spark_types.ArrayType(spark_types.IntegerType(), True)
    node = spark_schema.spark_type(CepType("Lockable", (CepType("SharedBufferNode"),)))
    assert node.names == ["lock_count", "element"]
    edge = node["element"].dataType["edges"].dataType.elementType
    assert edge.names == ["lock_count", "edge"]
    assert edge["edge"].dataType.names == ["target", "version"]
    assert not key_hash.has_value_hash(CepType("EventId"))
    assert fastpath.type_spec(CepType("NFAState")) is None
