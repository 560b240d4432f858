"""Savepoints written for the other Flink line (writers/flink_target.py, writers/rewrite.py): state
whose serializers differ there is re-encoded (keyed and operator state, values unchanged), the rest
carried as it is; Kryo state is carried with a warning, and refused where its operator must be
re-encoded. A synthetic Flink 1.20 (V4) savepoint; tests/flink/test_flink_upgrade_oracle.py has
Flink's own."""

from __future__ import annotations

import warnings

import pytest

from fstate.savepoint import handles, keyed
from fstate.savepoint import operator as operator_state
from fstate.savepoint.builder import SavepointBuilder
from fstate.savepoint.errors import FStateWarning, InvalidArgumentError
from fstate.savepoint.loader import Savepoint
from fstate.savepoint.metadata import OperatorState, SubtaskState
from fstate.savepoint.types import (LONG, STRING, ListType, MapType, NullableType, OpaqueType, PojoType, TupleType,
                                    visit)
from fstate.savepoint.types.hashing import key_group_for_hash
from fstate.savepoint.types.snapshots import KRYO_SNAPSHOT
from fstate.writers.flink_target import (Flink1Types, Flink2Types, carry_for_target, operator_carry_for_target,
                                         type_for_target)
from fstate.writers.modify import SavepointModifier
from fstate.writers.reencode import write_key_group_streams

MAX_P = 128
ORDER = "com.acme.Order"


def _order(tags: ListType, attrs: MapType) -> PojoType:
    return PojoType(ORDER, [("attrs", ORDER, attrs), ("id", ORDER, LONG), ("tags", ORDER, tags)])


#: MyPojo-like, as Flink 1.20 (a job naming the fields' types) and Flink 2.3 (its type extractor) have it
ORDER_1 = _order(ListType(STRING), MapType(STRING, LONG))
ORDER_2 = _order(NullableType(ListType(NullableType(STRING))), NullableType(MapType(NullableType(STRING), LONG)))
KRYO = OpaqueType(KRYO_SNAPSHOT, 2, b"", "com.acme.Thing")


def _orders(i: int) -> tuple:
    return ({"a": i, "b": None} if i % 3 else None, i, [f"t{i}", None] if i % 2 else [])


def _v4_savepoint(tmp_path, *, kryo: bool = False, convertible: bool = True) -> str:
    """keyed: String keys, VALUE orders, MAP of orders, LIST of longs, event timers; ops: list state
    of orders, broadcast state of orders; plain: a LONG list state (the same on both lines)."""
    path = str(tmp_path / "v4")
    builder = SavepointBuilder(path, metadata_version=4, inline_threshold=256)
    value_type = ORDER_1 if convertible else LONG
    states = [keyed.value_state_meta("order", "VALUE", value_type),
              keyed.value_state_meta("by-name", "MAP", MapType(STRING, value_type)),
              keyed.value_state_meta("seen", "LIST", LONG),
              keyed.timer_state_meta("event", STRING)]
    if kryo:
        states.append(keyed.value_state_meta("thing", "VALUE", KRYO))  # registered, never written
    meta = keyed.KeyedBackendMeta(keyed.CURRENT_VERSION, False, STRING, states)
    encoders = [keyed.PairEncoder(meta, i, MAX_P) for i in range(4)]
    pairs: dict[int, dict[int, list]] = {}
    for i in range(40):
        key = f"k{i}"
        kg = key_group_for_hash(STRING.java_hash(key), MAX_P)
        order = _orders(i) if convertible else i
        values = [order, {f"n{j}": order for j in range(i % 3)}, list(range(i % 4)), 1_000 + i]
        for sid, value in enumerate(values):
            pairs.setdefault(kg, {}).setdefault(sid, []).extend(encoders[sid].pairs(kg, key, value))
    keyed_handles = write_key_group_streams(meta, pairs, 2, MAX_P, builder.temp_dir, builder.inline_threshold)
    builder.add_operator_state(OperatorState(b"k" * 16, 2, MAX_P, {
        i: SubtaskState(managed_keyed=h) for i, h in keyed_handles.items()}))
    ops = builder.operator("ops", parallelism=2, max_parallelism=MAX_P)
    plain = builder.operator("plain", parallelism=2, max_parallelism=MAX_P)
    for i in range(2):
        data, offsets = operator_state.encode_operator_stream([
            (operator_state.list_state_meta("orders", ORDER_1), [_orders(10 * i + j) for j in range(3)]),
            (operator_state.broadcast_state_meta("rules", STRING, ORDER_1), {"r": _orders(7)})])
        ops.subtask(i).managed_operator = handles.OperatorStreamHandle(offsets, builder.stream(data))
        data, offsets = operator_state.encode_operator_stream([
            (operator_state.list_state_meta("offsets", LONG), [i, 10 + i])])
        plain.subtask(i).managed_operator = handles.OperatorStreamHandle(offsets, builder.stream(data))
    builder.commit()
    return path


def _keyed_rows(view) -> dict[str, list]:
    out: dict[str, list] = {}
    meta = view.keyed_meta
    for source in view.keyed_states():
        with source.open() as state:
            for sid, kg, _, key, ns, value in state.entries():
                out.setdefault(meta.states[sid].name, []).append((key, value))
    return {name: sorted(rows, key=repr) for name, rows in out.items()}


def _operator_rows(view) -> dict[str, list]:
    om = view.operator_meta
    return {s.name: (sorted(view.broadcast_state(s.name)) if s.kind == "BROADCAST" else
                     list(view.list_state(s.name))) for s in om.states}


def test_type_conversion_goes_both_ways():
    assert type_for_target(ORDER_1, 6, "s", source_version=4) == ORDER_2
    assert type_for_target(ORDER_2, 4, "s", source_version=6) == ORDER_1
    assert type_for_target(ORDER_2, 4, "s") == ORDER_1  # fstate's own types are Flink 2.x's
    for t in (ORDER_1, ORDER_2):
        assert type_for_target(t, 4, "s", source_version=4) is t and type_for_target(t, 6, "s", source_version=5) is t
    # nested: a POJO in a list, in a map value, in a tuple, in a POJO; a registered subclass
    inner = PojoType("com.acme.Line", [("skus", "com.acme.Line", ListType(LONG))])
    outer = PojoType("com.acme.Basket", [("lines", "com.acme.Basket", ListType(inner)),
                                         ("pair", "com.acme.Basket", TupleType((inner, STRING)))],
                     registered=[("com.acme.Line", inner)])
    up = visit(outer, Flink2Types("s"))
    lines = dict((n, t) for n, _, t in up.fields)["lines"]
    assert isinstance(lines, NullableType) and isinstance(lines.inner.element.inner, PojoType)
    assert lines.inner.element.inner.fields[0][2] == NullableType(ListType(NullableType(LONG)))
    assert up.registered[0][1] == lines.inner.element.inner
    assert visit(up, Flink1Types("s")) == outer
    # a List outside a POJO, and Kryo, are the same on both lines
    assert type_for_target(ListType(STRING), 6, "s", source_version=4) == ListType(STRING)
    assert type_for_target(KRYO, 6, "s", source_version=4) is KRYO


def test_a_1_20_savepoint_written_for_2_3_and_back(tmp_path):
    base = Savepoint.open(_v4_savepoint(tmp_path))
    keyed_view, ops_view, plain_view = base.operator("6b" * 16), base.operator("ops"), base.operator("plain")
    plan = carry_for_target(keyed_view, 6)
    assert plan is not None and set(plan.states) == {"order", "by-name", "seen", "_timer_state/event_user-timers"}
    assert plan.meta.states[0].value_type == ORDER_2
    assert operator_carry_for_target(ops_view, 6).states[0].value_type == ORDER_2
    assert carry_for_target(plain_view, 6) is None and operator_carry_for_target(plain_view, 6) is None
    assert carry_for_target(keyed_view, 4) is None  # 1.20 to 1.20: as it is

    up = tmp_path / "v6"
    SavepointModifier(base.path, flink_version="2.3").write(str(up))
    new = Savepoint.open(str(up))
    assert new.metadata.version == 6
    new_keyed, new_ops = new.operator("6b" * 16), new.operator("ops")
    assert new_keyed.keyed_meta.states[0].value_type == ORDER_2
    assert new_keyed.keyed_meta.states[1].value_type == MapType(STRING, ORDER_2)
    assert [s.value_type for s in new_ops.operator_meta.states] == [ORDER_2, ORDER_2]
    assert _keyed_rows(new_keyed) == _keyed_rows(keyed_view) and len(_keyed_rows(new_keyed)["order"]) == 40
    assert _operator_rows(new_ops) == _operator_rows(ops_view)
    # carried as it is: the same stream (inline here), the same header
    assert new.operator("plain").state.subtasks[0].managed_operator == plain_view.state.subtasks[0].managed_operator

    down = tmp_path / "v4-again"
    SavepointModifier(str(up), flink_version="1.20").write(str(down))
    again = Savepoint.open(str(down))
    assert again.metadata.version == 4
    assert again.operator("6b" * 16).keyed_meta.states == keyed_view.keyed_meta.states
    assert again.operator("ops").operator_meta.states == ops_view.operator_meta.states
    assert _keyed_rows(again.operator("6b" * 16)) == _keyed_rows(keyed_view)
    assert _operator_rows(again.operator("ops")) == _operator_rows(ops_view)


@pytest.mark.filterwarnings("ignore:operator 6b6b.* now has max parallelism 256")
def test_set_parallelism_and_max_parallelism_with_re_encoding(tmp_path):
    base = Savepoint.open(_v4_savepoint(tmp_path))
    out = tmp_path / "out"
    m = SavepointModifier(base.path, flink_version="2.3")
    m.set_parallelism("ops", 3).set_max_parallelism("6b" * 16, 256, 3)
    m.write(str(out))
    new = Savepoint.open(str(out))
    new_keyed, new_ops = new.operator("6b" * 16), new.operator("ops")
    assert (new_keyed.parallelism, new_keyed.max_parallelism, new_ops.parallelism) == (3, 256, 3)
    assert new_keyed.keyed_meta.states[0].value_type == ORDER_2
    assert _keyed_rows(new_keyed) == _keyed_rows(base.operator("6b" * 16))
    assert new_ops.operator_meta.states[0].value_type == ORDER_2
    assert sorted((v for _, _, v in new_ops.list_state("orders")), key=repr) == sorted(
        (v for _, _, v in base.operator("ops").list_state("orders")), key=repr)


def test_kryo_state_is_carried_with_a_warning_or_refused_where_it_would_be_re_encoded(tmp_path):
    carried = Savepoint.open(_v4_savepoint(tmp_path / "a", kryo=True, convertible=False))
    view = carried.operator("6b" * 16)
    with pytest.warns(FStateWarning, match=r"state 'thing': Kryo-serialized values are carried as they are; "
                                           r"Flink 1\.x wrote them with Kryo 2\.24, Flink 2\.x reads them with Kryo 5\.6"):
        assert carry_for_target(view, 6) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error", FStateWarning)
        assert carry_for_target(view, 4) is None  # the same line: nothing to say

    refused = Savepoint.open(_v4_savepoint(tmp_path / "b", kryo=True))
    with pytest.raises(InvalidArgumentError, match=r"operator 6b6b.*: its keyed state must be re-encoded for Flink 2\.x "
                                                   r"\(state 'order' is serialized differently there\), but state "
                                                   r"'thing' holds values of Kryo, which fstate cannot decode"):
        SavepointModifier(refused.path, flink_version="2.3").write(str(tmp_path / "new"))
    assert not (tmp_path / "new").exists()
