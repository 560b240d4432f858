"""The keyed writer's compiled encoder (savepoint/pair_encoding.py, _encoding.c) against its Python
reference: the same spill records and key-group blocks for generated rows of every type it compiles
(nulls and edge values included), the same error where it declines, and the Python path where it has no
plan."""

from __future__ import annotations

import math
import random
import struct

import pyarrow
import pytest

from fstate.savepoint import keyed, pair_encoding
from fstate.savepoint.errors import FStateError
from fstate.writers import keyed_stream
from fstate.writers.spec import parse_type
from fstate.writers.writer import KeyedStateSpec

pytestmark = pytest.mark.skipif(not pair_encoding.available(), reason="the compiled encoder is not built")

_UNITS = ["a", "é", "ÿ", "€", "\u0800", "\uffff", "😀", "\U0010ffff", "z" * 200]


def _string(rng: random.Random) -> str:
    return "".join(rng.choice(_UNITS) for _ in range(rng.randrange(0, 6)))


#: per type string: its Arrow type and a value generator (edge values included)
_TYPES = {
    "STRING": (pyarrow.string(), _string),
    "LONG": (pyarrow.int64(), lambda r: r.choice([0, -1, 2**63 - 1, -2**63, 2**32, r.randrange(-2**63, 2**63)])),
    "INT": (pyarrow.int32(), lambda r: r.choice([0, -1, 2**31 - 1, -2**31, r.randrange(-2**31, 2**31)])),
    "SHORT": (pyarrow.int16(), lambda r: r.choice([0, -1, 2**15 - 1, -2**15, r.randrange(-2**15, 2**15)])),
    "BYTE": (pyarrow.int8(), lambda r: r.choice([0, -1, 127, -128, r.randrange(-128, 128)])),
    "BOOLEAN": (pyarrow.bool_(), lambda r: r.random() < 0.5),
    "DOUBLE": (pyarrow.float64(), lambda r: r.choice([0.0, -0.0, math.inf, -math.inf, math.nan, 5e-324,
                                                      1.7976931348623157e308, r.uniform(-1e9, 1e9)])),
    "FLOAT": (pyarrow.float32(), lambda r: r.choice([0.0, -0.0, math.inf, -math.inf, math.nan, 1.5, 3.4028234663852886e38,
                                                     1.401298464324817e-45, r.uniform(-1e6, 1e6)])),
    "BYTES": (pyarrow.binary(), lambda r: bytes(r.randrange(256) for _ in range(r.randrange(0, 9)))),
}
_KEYS = [t for t in _TYPES if t != "BYTES"]


def _unique(type_string: str, values: list) -> list:
    """``values`` without repeats (as their Java type's bytes: a key or map key is written once)."""
    width = {"FLOAT": ">f", "DOUBLE": ">d"}.get(type_string)
    by_bytes = {(struct.pack(width, v) if width else (type(v), v)): v for v in values}
    return list(by_bytes.values())


def _column(rng, arrow_type, make, kind: str, rows: int, nulls: bool):
    values = []
    for _ in range(rows):
        if nulls and rng.random() < 0.15:
            values.append(None)
        elif kind == "VALUE":
            values.append(make(rng))
        elif kind == "LIST":
            values.append([make(rng) for _ in range(rng.randrange(0, 4))])
        else:
            values.append(None)  # filled by the caller (a map needs two generators)
    return values


def _timestamp(rng: random.Random) -> int:
    return rng.choice([0, -1, 2**63 - 1, -2**63, rng.randrange(-2**63, 2**63)])


def _source(rng: random.Random, key: str, states: list[tuple[str, str, str | None]], rows: int,
            timers: bool = False):
    """An encoding and one record batch: ``states`` are (kind, type, map value type); ``timers``: an
    event timers column of lists and a processing timers column of single timestamps."""
    key_arrow, key_make = _TYPES[key]
    keys = _unique(key, [key_make(rng) for _ in range(rows)])
    rows = len(keys)
    arrays, fields, specs = [pyarrow.array(keys, key_arrow)], [pyarrow.field("k", key_arrow)], []
    for i, (kind, t, vt) in enumerate(states):
        arrow_type, make = _TYPES[t]
        if kind == "MAP":
            value_arrow, value_make = _TYPES[vt]
            values = [None if rng.random() < 0.15 else
                      [(k, None if rng.random() < 0.2 else value_make(rng))
                       for k in _unique(t, [make(rng) for _ in range(rng.randrange(0, 4))])]
                      for _ in range(rows)]
            arrow_type = pyarrow.map_(arrow_type, value_arrow)
            type_info = parse_type(f"MAP<{t}, {vt}>")
        else:
            values = _column(rng, arrow_type, make, kind, rows, nulls=True)
            arrow_type = pyarrow.list_(arrow_type) if kind == "LIST" else arrow_type
            type_info = parse_type(t)
        arrays.append(pyarrow.array(values, arrow_type))
        fields.append(pyarrow.field(f"s{i}", arrow_type))
        specs.append(KeyedStateSpec(f"s{i}", kind, type_info, f"s{i}"))
    key_type = parse_type(key)
    metas = [s.meta() for s in specs]
    if timers:
        event = [None if rng.random() < 0.2 else list({_timestamp(rng) for _ in range(rng.randrange(0, 3))})
                 for _ in range(rows)]
        processing = [None if rng.random() < 0.5 else _timestamp(rng) for _ in range(rows)]
        arrays += [pyarrow.array(event, pyarrow.list_(pyarrow.int64())), pyarrow.array(processing, pyarrow.int64())]
        fields += [pyarrow.field("event", pyarrow.list_(pyarrow.int64())), pyarrow.field("processing", pyarrow.int64())]
        metas += [keyed.timer_state_meta("event", key_type), keyed.timer_state_meta("processing", key_type)]
    meta = keyed.KeyedBackendMeta(keyed.CURRENT_VERSION, False, key_type, metas)
    max_parallelism = rng.choice([128, 4096, 32768])
    encoding, _ = keyed_stream.encoding_for(meta, key_type, specs, "event" if timers else None,
                                            "processing" if timers else None, "test", "k", 2, max_parallelism)
    return encoding, pyarrow.RecordBatch.from_arrays(arrays, schema=pyarrow.schema(fields))


def _both(monkeypatch, function, *args):
    compiled = function(*args)
    monkeypatch.setenv("FSTATE_PURE_PYTHON", "1")
    try:
        return compiled, function(*args)
    finally:
        monkeypatch.delenv("FSTATE_PURE_PYTHON")


def _blocks(records: dict[int, bytes], tmp_path, encoding) -> list:
    files = []
    for index in range(32):
        path = tmp_path / str(index)
        if index in records:
            path.write_bytes(records[index])
        files.append(str(path) if index in records else None)
    return [list(keyed_stream.spilled_blocks(files, encoding.max_parallelism, lo, hi))
            for lo, hi in ((0, encoding.max_parallelism - 1), (1, encoding.max_parallelism // 2))]


def _large(batch: pyarrow.RecordBatch) -> pyarrow.RecordBatch:
    """``batch`` with 64-bit offsets (large strings, binaries and lists)."""
    def large(t):
        if pyarrow.types.is_list(t):
            return pyarrow.large_list(large(t.value_type))
        return {pyarrow.string(): pyarrow.large_string(), pyarrow.binary(): pyarrow.large_binary()}.get(t, t)
    schema = pyarrow.schema([pyarrow.field(f.name, large(f.type)) for f in batch.schema])
    return batch.cast(schema)


@pytest.mark.parametrize("key", _KEYS)
def test_compiled_records_and_blocks_equal_python_for_every_type(key, monkeypatch, tmp_path):
    rng = random.Random(key)
    plain = [("VALUE", t, None) for t in _TYPES] + [("LIST", t, None) for t in _TYPES]
    maps = [("MAP", rng.choice(_KEYS), vt) for vt in _TYPES]
    for states, in_place in ((plain, True), (plain + maps, False)):
        encoding, whole = _source(rng, key, states, rows=400, timers=True)
        plan = encoding.compiled_plan()
        assert plan is not None
        for batch in (whole, whole.slice(whole.num_rows // 3, whole.num_rows // 2 + 1), _large(whole)):
            compiled, python = _both(monkeypatch, keyed_stream.encode_batch, encoding, 32, batch)
            assert compiled == python and compiled[0]
            # the compiled path really ran: Arrow read in place, or (maps) the Python values
            arrow = pair_encoding.encode_arrow(plan, batch.columns, encoding.max_parallelism, 32)
            assert arrow == (compiled[0] if in_place else None)
            from fstate.writers.arrow_frames import batch_values
            assert pair_encoding.encode_rows(plan, batch_values(batch), encoding.max_parallelism, 32) == compiled[0]
        blocks, python_blocks = _both(monkeypatch, _blocks, compiled[0], tmp_path, encoding)
        assert blocks == python_blocks and blocks[0]
        assert pair_encoding.key_group_blocks(b"".join(compiled[0].values()), 0, encoding.max_parallelism - 1) \
            == blocks[0]


def test_other_arrow_integer_and_float_widths_are_python_values_of_the_state_type(monkeypatch):
    """An int8 column written to a LONG state, a float32 one to a DOUBLE state (as Spark's rows give them)."""
    rng = random.Random(6)
    encoding, batch = _source(rng, "LONG", [("VALUE", "LONG", None), ("VALUE", "DOUBLE", None),
                                            ("VALUE", "FLOAT", None)], rows=200)
    cast = batch.cast(pyarrow.schema([batch.schema.field(0), pyarrow.field("s0", pyarrow.int8()),
                                      pyarrow.field("s1", pyarrow.float32()), pyarrow.field("s2", pyarrow.float64())]),
                      safe=False)
    compiled, python = _both(monkeypatch, keyed_stream.encode_batch, encoding, 32, cast)
    assert compiled == python
    assert pair_encoding.encode_arrow(encoding.compiled_plan(), cast.columns, encoding.max_parallelism, 32) \
        == compiled[0]


def _errors(monkeypatch, encoding, batch) -> tuple[str, str]:
    def run():
        with pytest.raises(FStateError) as e:
            keyed_stream.encode_batch(encoding, 8, batch)
        return str(e.value)
    return _both(monkeypatch, run)


def test_a_null_key_is_the_python_error(monkeypatch):
    encoding, batch = _source(random.Random(1), "STRING", [("VALUE", "LONG", None)], rows=20)
    keys = batch.column(0).to_pylist()
    keys[7] = None
    batch = pyarrow.RecordBatch.from_arrays([pyarrow.array(keys, pyarrow.string()), batch.column(1)],
                                            schema=batch.schema)
    compiled, python = _errors(monkeypatch, encoding, batch)
    assert compiled == python and "null key" in compiled


def test_a_null_list_element_and_an_out_of_range_value_are_the_python_errors(monkeypatch):
    encoding, batch = _source(random.Random(2), "LONG", [("LIST", "STRING", None), ("VALUE", "INT", None)], rows=20)
    elements = batch.column(1).to_pylist()
    elements[3] = ["a", None]
    bad = pyarrow.RecordBatch.from_arrays([batch.column(0), pyarrow.array(elements, pyarrow.list_(pyarrow.string())),
                                           batch.column(2)], schema=batch.schema)
    compiled, python = _errors(monkeypatch, encoding, bad)
    assert compiled == python and "null elements" in compiled
    ints = [2**40] + batch.column(2).to_pylist()[1:]
    schema = batch.schema.set(2, pyarrow.field("s1", pyarrow.int64()))
    wide = pyarrow.RecordBatch.from_arrays([batch.column(0), batch.column(1), pyarrow.array(ints, pyarrow.int64())],
                                           schema=schema)
    compiled, python = _errors(monkeypatch, encoding, wide)
    assert compiled == python and "s1" in compiled


def test_a_key_written_twice_is_the_python_error(monkeypatch, tmp_path):
    encoding, batch = _source(random.Random(3), "INT", [("VALUE", "LONG", None)], rows=5)
    twice = pyarrow.concat_batches([batch, batch]) if hasattr(pyarrow, "concat_batches") else \
        pyarrow.Table.from_batches([batch, batch]).combine_chunks().to_batches()[0]
    records = keyed_stream.encode_batch(encoding, 32, twice)[0]
    assert pair_encoding.key_group_blocks(b"".join(records.values()), 0, encoding.max_parallelism - 1) is None

    def run():
        with pytest.raises(FStateError) as e:
            _blocks(records, tmp_path, encoding)
        return str(e.value)
    compiled, python = _both(monkeypatch, run)
    assert compiled == python and "appears twice" in compiled


def test_a_null_timestamp_is_the_python_error(monkeypatch):
    encoding, batch = _source(random.Random(5), "LONG", [("VALUE", "LONG", None)], rows=20, timers=True)
    assert encoding.compiled_plan() is not None
    event = batch.column(2).to_pylist()
    event[4] = [1, None]
    bad = pyarrow.RecordBatch.from_arrays([batch.column(0), batch.column(1),
                                           pyarrow.array(event, pyarrow.list_(pyarrow.int64())), batch.column(3)],
                                          schema=batch.schema)
    compiled, python = _errors(monkeypatch, encoding, bad)
    assert compiled == python and "timers column 'event'" in compiled


def test_wrapped_and_composite_types_have_no_compiled_plan():
    specs = [KeyedStateSpec("s0", "VALUE", parse_type("LONG"), "s0")]
    for type_string in ("TUPLE<STRING, LONG>", "BYTES", "DECIMAL"):
        key_type = parse_type(type_string)
        meta = keyed.KeyedBackendMeta(keyed.CURRENT_VERSION, False, key_type, [specs[0].meta()])
        assert pair_encoding.plan(meta, key_type, 1, 0) is None, type_string
    key_type = parse_type("LONG")
    for value_type in ("TUPLE<STRING, LONG>", "DECIMAL", "LIST<LONG>"):
        meta = keyed.KeyedBackendMeta(keyed.CURRENT_VERSION, False, key_type,
                                      [KeyedStateSpec("s0", "VALUE", parse_type(value_type), "s0").meta()])
        assert pair_encoding.plan(meta, key_type, 1, 0) is None, value_type
        assert pair_encoding.plan(meta, key_type, 1, 1) is None  # a timer state the rows do not have
