"""The table layer's side of the SQL field-name seam: decoded state types → ``sql_plan.field_names``."""

from __future__ import annotations

from types import SimpleNamespace

from fstate.readers import tables
from fstate.savepoint import sql_plan
from fstate.savepoint.types import INT, LONG, STRING, MapType, RowDataType, RowType, SortedMapType, TtlType, TupleType
from fstate.savepoint.types.logical import LogicalType
from tests.savepoint.test_sql_plan import _plan


def _state(name, kind, value_type, element_type=None):
    return SimpleNamespace(name=name, kind=kind, value_type=value_type, element_type=element_type)


def test_sql_field_names_from_decoded_types():
    plan = _plan()
    aggregate = sql_plan.describe_node(plan, plan.nodes[2])
    join = sql_plan.describe_node(plan, plan.nodes[5])
    key = RowType([STRING])
    accumulators = TtlType(LONG, RowType([LONG] * 8))  # TTL is looked through
    names = tables.sql_field_names(aggregate, key, _state("accState", "VALUE", accumulators))
    assert names.key == ("k",) and names.value[:2] == ("count", "total_sum")
    rows = MapType(TupleType([LONG, STRING, INT, LONG]), INT)
    names = tables.sql_field_names(join, key, _state("left-records", "MAP", rows))
    assert (names.map_key, names.map_value, names.value) == (("id", "k", "v", "ts"), None, None)
    # scalars are no rows; without a plan every row is positional
    assert tables.sql_field_names(aggregate, STRING, _state("accState", "VALUE", LONG)).value is None
    assert tables.sql_field_names(None, key, _state("accState", "VALUE", RowType([LONG, LONG]))).value == ("f0", "f1")


def test_a_sorted_map_is_named_by_the_sort_key():
    """A retractable Top-N's ``sorted-map`` (a VALUE state holding a sorted map): its key is the sort key."""
    plan = _plan()
    rank = sql_plan.describe_node(plan, plan.nodes[6])
    key = RowType([STRING])
    sort_key = RowDataType((LogicalType("BIGINT"),), (LONG,))
    for value in (SortedMapType(sort_key, LONG, b""), TtlType(LONG, SortedMapType(sort_key, LONG, b""))):
        names = tables.sql_field_names(rank, key, _state("sorted-map", "VALUE", value))
        assert (names.key, names.map_key, names.map_value, names.value) == (("k",), ("v",), None, None)
    names = tables.sql_field_names(rank, key, _state("data-state", "MAP", MapType(sort_key, RowType([LONG]))))
    assert names.map_key == ("v",)
    # another arity than the plan's sort key: positional
    two = SortedMapType(RowDataType((LogicalType("BIGINT"),) * 2, (LONG, LONG)), LONG, b"")
    assert tables.sql_field_names(rank, key, _state("sorted-map", "VALUE", two)).map_key == ("f0", "f1")
