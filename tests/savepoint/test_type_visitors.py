"""Every TypeInfo node class has a branch in every visitor; the visitors keep their old answers."""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

import pytest

import fstate.savepoint.types.arrow_types as arrow_types
import fstate.savepoint.types.scalars as scalars_module
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
from fstate.savepoint.types import roles, visitor as visitor_module
from fstate.savepoint.types.cep import KINDS as CEP_KINDS, CepType
from fstate.savepoint.types import table
from fstate.savepoint.types.sorted_map import SortedMapType, SortKeyOrder
from fstate.savepoint.types.logical import LogicalType
from fstate.savepoint.types.visitor import (ABSTRACT_NODES, BASES, BRANCHES, CHILDREN, MissingVisitorBranchError,
                                            PreOrderTypeVisitor, TypeVisitor)
from tests.test_layering import module_files



def _import_every_module() -> dict[str, Path]:
    """Import every module of the package (so every visitor class is registered as a subclass): module
    name -> file."""
    files = {name: path for name, (path, _) in module_files("fstate").items()}
    for name in files:
        importlib.import_module(name)
    return files


MODULE_FILES = _import_every_module()


def _subclasses(cls) -> set[type]:
    found = set()
    for sub in cls.__subclasses__():
        if sub.__module__.startswith("fstate."):
            found.add(sub)
        found |= _subclasses(sub)
    return found


NODE_CLASSES = sorted(_subclasses(TypeInfo) - set(ABSTRACT_NODES), key=lambda c: c.__qualname__)
VISITORS = sorted(_subclasses(TypeInfoVisitor) - set(BASES), key=lambda c: c.__qualname__)


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


def _visitor_classes_in_source() -> set[str]:
    """module.Class of every class statement in the package's source whose bases name a visitor (a
    TypeInfoVisitor, or a class found so, to any depth)."""
    classes = {}
    for module, path in MODULE_FILES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                bases = {ast.unparse(base).split("[")[0].split(".")[-1] for base in node.bases}
                classes[f"{module}.{node.name}"] = bases
    found = {"TypeInfoVisitor"}
    while True:
        more = {name for name, bases in classes.items() if bases & found and name.split(".")[-1] not in found}
        if not more:
            return {name for name, bases in classes.items() if bases & found} - {
                f"{base.__module__}.{base.__qualname__}" for base in BASES}
        found |= {name.split(".")[-1] for name in more}


def test_the_visitors_are_found():
    """Every visitor class in the source is found (by importing every module), none listed by hand."""
    assert {f"{v.__module__}.{v.__qualname__}" for v in VISITORS} == _visitor_classes_in_source()
    assert {"SparkTypeVisitor", "ValueConverterVisitor", "ArrowTypeVisitor", "FastPathSpecVisitor", "ValueHashVisitor",
            "TypeNameVisitor", "ColumnarVisitor"} <= {v.__qualname__ for v in VISITORS}


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

    for base in BASES:
        with pytest.raises(TypeError, match="ScalarsOnly has no branch visit_time_window, visit_tuple"):
            class ScalarsOnly(base[str]):  # fails where it is defined, before any visit
                def visit_scalar(self, node):
                    return node.name

    with pytest.raises(TypeError, match="Direct derives from TypeInfoVisitor: derive from TypeVisitor"):
        type("Direct", (TypeInfoVisitor,), {method: (lambda self, node, *children: node)
                                            for method in BRANCHES.values()})

    class PartialBase(TypeVisitor[str], abstract=True):  # a partial base says so
        def visit_scalar(self, node):
            return node.name

    others = {method: (lambda self, node, *children: "other")
              for method in BRANCHES.values() if method != "visit_scalar"}
    complete = type("Complete", (PartialBase,), others)
    assert visit(LONG, complete()) == "Long" and visit(ListType(LONG), complete()) == "other"
    with pytest.raises(TypeError, match="visitor Incomplete has no branch visit_time_window"):
        type("Incomplete", (PartialBase,), {})
    assert set(BRANCHES.values()) == {m for m in vars(TypeInfoVisitor) if m.startswith("visit_")}
    assert visitor_module.visit is visit


def _visitor(base, branch):
    """A complete visitor of ``base`` whose every branch is ``branch``."""
    return type("Every", (base,), {method: branch for method in BRANCHES.values()})()


def test_each_branch_takes_the_children_the_dispatcher_hands_it():
    for node_class, method in BRANCHES.items():
        parameters = list(inspect.signature(getattr(TypeInfoVisitor, method)).parameters)[2:]  # after self, node
        assert len(parameters) == len(CHILDREN.get(node_class, ())), (node_class.__qualname__, parameters)
    count = _visitor(TypeVisitor, lambda self, node, *children: 1 + sum(
        sum(c or 0 for c in child) if isinstance(child, tuple) else child for child in children))
    for samples in SAMPLES.values():  # the dispatcher finds every sample's children
        for t in samples:
            assert visit(t, count) >= 1 + len(t.children) - (type(t) is CepType)


def test_post_order_hands_the_childrens_results():
    seen = []
    record = _visitor(TypeVisitor, lambda self, node, *children: seen.append((node.name, children)) or node.name)
    t = MapType(STRING, TupleType((ListType(LONG), INT)))
    assert visit(t, record) == t.name
    assert [name for name, _ in seen] == ["String", "Long", "List<Long>", "Integer", "Tuple2<List<Long>, Integer>",
                                          t.name]  # children first
    assert seen[-1][1] == ("String", "Tuple2<List<Long>, Integer>")
    assert seen[-2][1] == (("List<Long>", "Integer"),)  # a row's fields: one tuple
    gone = PojoType("com.acme.Gone", [("x", "com.acme.Gone", None), ("y", "com.acme.Gone", LONG)])
    seen.clear()
    visit(gone, record)
    assert seen[-1] == (gone.name, ((None, "Long"), (), ()))  # None where a field's class is gone


def test_pre_order_hands_thunks_the_branch_calls_or_not():
    seen = []

    def first_only(self, node, *children):
        seen.append(node.name)
        thunks = [c for child in children for c in (child if isinstance(child, tuple) else (child,))]
        assert all(callable(c) for c in thunks)
        return [node.name] + (thunks[0]() if thunks else [])

    t = MapType(TupleType((LONG, INT)), ListType(STRING))
    assert visit(t, _visitor(PreOrderTypeVisitor, first_only)) == [t.name, "Tuple2<Long, Integer>", "Long"]
    assert seen == [t.name, "Tuple2<Long, Integer>", "Long"]  # the parent first; a child whose thunk is not called is never visited
    assert len(visit(CepType("NFAState"), _visitor(PreOrderTypeVisitor, first_only))) > 1  # a CEP's child: its shape


def test_the_scalar_registry():
    """One entry per scalar kind names it for every consumer: Spark, Arrow, the compiled decoders and
    type strings read it, none keeps a table of its own; a scalar kind without an entry fails at import."""
    kinds = {t.kind for t in SCALARS.values()}
    assert set(scalars_module.SCALAR_KINDS) == kinds
    assert set(spark_schema.SCALAR_TYPES) == set(arrow_types.SCALAR_TYPES) == kinds
    assert {kind for kind, entry in scalars_module.SCALAR_KINDS.items() if entry.fast_path} == set(fastpath.SCALAR_CODES)
    assert {t.kind for t, _ in spec.SCALAR_NAMES} == {k for k, e in scalars_module.SCALAR_KINDS.items() if e.spec}
    scalars_module.check_registered(SCALARS)
    odd = scalars_module.Scalar("Odd", "com.acme.OddSerializerSnapshot", 4, None, None)
    with pytest.raises(TypeError, match=r"scalar kinds \['Odd'\] have no entry in SCALAR_KINDS"):
        scalars_module.check_registered({**SCALARS, "odd": odd})


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


def test_roles_answer_as_the_class_checks_they_replaced():
    """savepoint/types/roles.py says of every node what ``isinstance`` on its class said (a subclass such as
    SetType is a list), and looks through None and one TTL wrapper."""
    checks = {roles.as_list: ListType, roles.as_map: MapType, roles.as_ttl: TtlType, roles.as_row_data: table.RowDataType,
              roles.as_timer: TimerType, roles.as_nullable: NullableType, roles.as_opaque: OpaqueType,
              roles.as_cep: CepType}
    for samples in SAMPLES.values():
        for t in samples:
            for as_role, node_class in checks.items():
                assert (as_role(t) is t) == isinstance(t, node_class) and (as_role(t) in (t, None)), (as_role, t)
            assert (roles.role(t) == roles.OTHER) == (not any(isinstance(t, c) for c in checks.values()))
    assert all(as_role(None) is None for as_role in checks) and roles.role(None) is None
    assert roles.without_ttl(TtlType(LONG, STRING)) is STRING and roles.without_ttl(STRING) is STRING
    assert roles.without_ttl(None) is None


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
