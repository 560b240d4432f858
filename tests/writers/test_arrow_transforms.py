"""Transforms given as functions of Arrow batches (``arrow=``) or pandas frames (``pandas=``): on the embedded
engine the same savepoint, byte for byte, as the equivalent SQL transform, alone and among other operations;
streamed a batch at a time; without pyspark; on Spark (``mapInArrow``) the same bytes as embedded. Flink
restoring one: tests/flink/test_writer_oracle.py ``test_embedded_arrow_transform_restores``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow
import pyarrow.compute
import pytest

from fstate.readers import engine as engine_module
from fstate.readers import tables
from fstate.savepoint.errors import InvalidArgumentError, TransformError
from fstate.savepoint.loader import Savepoint
from fstate.writers.modify import SavepointModifier
from fstate.writers.transforms import ArrowFunction
from tests.flink.restore import tree_hash
from tests.support import ROOT, sample_snapshot

KEYED = sample_snapshot(ROOT / "samples" / "keyed-hashmap-savepoint")
ROCKS = sample_snapshot(ROOT / "samples" / "keyed-rocksdb-checkpoint")


def times_ten(batch: pyarrow.RecordBatch) -> pyarrow.RecordBatch:
    return pyarrow.record_batch([batch["key"], pyarrow.compute.multiply(batch["total"], 10)], names=["key", "total"])


def above_1500(batch: pyarrow.RecordBatch) -> pyarrow.Table:
    return pyarrow.Table.from_batches([batch.filter(pyarrow.compute.greater(batch["total"], 1500))])


def without_e152(batch: pyarrow.RecordBatch) -> pyarrow.RecordBatch:
    events = [None if values is None else [e for e in values if e != "e152"] for values in batch["events"].to_pylist()]
    return pyarrow.record_batch([batch["key"], pyarrow.array(events, batch.schema.field("events").type)],
                                names=["key", "events"])


#: (base, state, the SQL transform, the same as a function of Arrow batches)
EQUIVALENTS = {
    "multiply": (KEYED, "total", "SELECT key, total * 10 AS total FROM state", times_ten),
    "drop-rows": (KEYED, "total", "SELECT key, total FROM state WHERE total > 1500", above_1500),
    "change-list": (KEYED, "events", "SELECT key, filter(events, e -> e != 'e152') AS events FROM state",
                    without_e152),
    "map-as-it-is": (KEYED, "counts", "SELECT key, counts FROM state", lambda batch: batch),
    "struct-field-filter": (KEYED, "avg", "SELECT key, avg FROM state WHERE avg.f1 > 1",
                            lambda batch: batch.filter(pyarrow.compute.greater(
                                pyarrow.compute.struct_field(batch["avg"], "f1"), 1))),
    "rocksdb-multiply": (ROCKS, "total", "SELECT key, total * 10 AS total FROM state", times_ten),
}


def _write(base: Path, out: Path, steps, spark=None) -> str:
    m = SavepointModifier(str(base), spark, engine=None if spark is not None else "embedded")
    steps(m)
    m.write(str(out))
    return tree_hash(out)


@pytest.mark.parametrize("case", sorted(EQUIVALENTS))
def test_an_arrow_function_writes_what_its_sql_writes(case, tmp_path):
    base, state, sql, function = EQUIVALENTS[case]
    expected = _write(base, tmp_path / "sql", lambda m: m.transform_state("keyed", state, sql=sql))
    assert _write(base, tmp_path / "arrow", lambda m: m.transform_state("keyed", state, arrow=function)) == expected
    assert expected != _write(base, tmp_path / "copy", lambda m: m.rename_uid("keyed", "keyed"))  # it changed


def test_a_pandas_function_writes_what_its_sql_writes(tmp_path):
    expected = _write(KEYED, tmp_path / "sql", lambda m: m.transform_state(
        "keyed", "total", sql="SELECT key, total * 10 AS total FROM state WHERE total > 1500"))
    assert _write(KEYED, tmp_path / "pandas", lambda m: m.transform_state(
        "keyed", "total", pandas=lambda frame: frame[frame.total > 1500].assign(total=lambda f: f.total * 10))) \
        == expected


def test_functions_combine_with_rename_rescale_and_sql(tmp_path):
    def with_sql(m):
        m.rename_uid("keyed", "counter").set_max_parallelism_of_all(256)
        m.transform_state("counter", "total", sql="SELECT key, total * 10 AS total FROM state")
        m.transform_state("counter", "events", sql="SELECT key, filter(events, e -> e != 'e152') AS events FROM state")
        m.transform_state("counter", "total", sql="SELECT key, total FROM state WHERE total > 15000")
        m.remove_operator("window-reduce")

    def with_functions(m):
        m.rename_uid("keyed", "counter").set_max_parallelism_of_all(256)
        m.transform_state("counter", "total", arrow=times_ten)
        m.transform_state("counter", "events", sql="SELECT key, filter(events, e -> e != 'e152') AS events FROM state")
        m.transform_state("counter", "total", pandas=lambda frame: frame[frame.total > 15000])
        m.remove_operator("window-reduce")

    expected = _write(KEYED, tmp_path / "sql", with_sql)
    assert _write(KEYED, tmp_path / "functions", with_functions) == expected
    new = Savepoint.open(str(tmp_path / "functions"), allow_external_paths=True)
    assert new.operator("counter").max_parallelism == 256


def test_the_function_sees_one_batch_at_a_time(tmp_path, monkeypatch):
    expected = _write(KEYED, tmp_path / "sql", lambda m: m.transform_state(
        "keyed", "total", sql="SELECT key, total * 10 AS total FROM state"))
    monkeypatch.setattr(engine_module, "BATCH_ROWS", 7)
    seen: list[int] = []

    def counted(batch):
        seen.append(batch.num_rows)
        return times_ten(batch)

    assert _write(KEYED, tmp_path / "arrow", lambda m: m.transform_state("keyed", "total", arrow=counted)) == expected
    rows = sum(1 for _ in tables.keyed_table(Savepoint.open(str(KEYED)).operator("keyed")).rows())
    assert sum(seen) == rows and max(seen) <= 7 and len(seen) >= rows // 7


def test_a_function_of_no_rows_gives_its_type():
    """No rows (an operator without keys): the function is called once, on no rows, for its result's type."""
    calls: list[int] = []

    def as_text(batch):
        calls.append(batch.num_rows)
        return pyarrow.record_batch([batch["key"], batch["total"].cast(pyarrow.string())], names=["key", "total"])

    schema = pyarrow.schema([pyarrow.field("key", pyarrow.string(), False), ("total", pyarrow.int64())])
    results = list(ArrowFunction(as_text).results(iter(()), schema, "total", "operator o, state 'total'"))
    assert calls == [0] and [r.num_rows for r in results] == [0]
    assert results[0].schema == pyarrow.schema([pyarrow.field("key", pyarrow.string(), False),
                                                ("total", pyarrow.string())])


def _wrong_key(batch):
    return pyarrow.record_batch([pyarrow.array(range(batch.num_rows)), batch["total"]], names=["key", "total"])


_CALLS = {"n": 0}


def _two_types(batch):
    _CALLS["n"] += 1
    total = batch["total"] if _CALLS["n"] == 1 else pyarrow.array(["x"] * batch.num_rows)
    return pyarrow.record_batch([batch["key"], total], names=["key", "total"])


@pytest.mark.parametrize("function,message", [
    (lambda batch: batch.to_pylist(), "the arrow= function returned list, not a pyarrow RecordBatch or Table"),
    (lambda batch: batch.select(["key"]), "the arrow= function returned columns key; it must return key and total"),
    (_wrong_key, "the arrow= function returned the key as bigint; the state's key is string"),
    (lambda batch: pyarrow.record_batch([batch["key"], pyarrow.array([1] * batch.num_rows, pyarrow.uint64())],
                                        names=["key", "total"]), "function's column 'total'"),
    (_two_types, "returned (key string, total string) after (key string, total bigint) in its first result"),
])
def test_a_wrong_result_is_one_line_naming_operator_and_state(function, message, tmp_path, monkeypatch):
    _CALLS["n"] = 0
    monkeypatch.setattr(engine_module, "BATCH_ROWS", 100)
    with pytest.raises(TransformError) as raised:
        _write(KEYED, tmp_path / "new", lambda m: m.transform_state("keyed", "total", arrow=function))
    text = str(raised.value)
    assert "\n" not in text and text.startswith("operator keyed, state 'total': ") and message in text, text
    assert not (tmp_path / "new").exists()


def test_exactly_one_kind_and_dataframe_functions_need_spark(tmp_path):
    with pytest.raises(InvalidArgumentError, match="give exactly one of sql=, fn=, arrow=, pandas="):
        SavepointModifier(str(KEYED)).transform_state("keyed", "total", sql="SELECT 1", arrow=times_ten)
    with pytest.raises(InvalidArgumentError, match="runs on Spark"):
        _write(KEYED, tmp_path / "new", lambda m: m.transform_state("keyed", "total", fn=lambda frame: frame))


#: run in a process of its own in which pyspark cannot be imported
NO_PYSPARK = """
import sys
sys.modules["pyspark"] = None  # importing it raises ImportError
import pyarrow.compute
from fstate.writers.modify import SavepointModifier
from fstate.writers.transforms import ArrowFunction
m = SavepointModifier(sys.argv[1])
m.transform_state("keyed", "total", arrow=lambda b: pyarrow.record_batch(
    [b["key"], pyarrow.compute.multiply(b["total"], 10)], names=["key", "total"]))
m.transform_state("keyed", "events", pandas=lambda frame: frame)
m.write(sys.argv[2])
print(sorted(name for name in sys.modules if name.startswith("pyspark")))
"""


def test_the_embedded_path_imports_no_pyspark(tmp_path):
    result = subprocess.run([sys.executable, "-c", NO_PYSPARK, str(KEYED), str(tmp_path / "new")], cwd=ROOT,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "['pyspark']"  # only the blocker's None entry
    expected = _write(KEYED, tmp_path / "sql", lambda m: m.transform_state(
        "keyed", "total", sql="SELECT key, total * 10 AS total FROM state"))
    assert tree_hash(tmp_path / "new") == expected


def _arrow_steps(m, avg=None):
    """``avg``: the struct state's transform, by default an Arrow function passing it on."""
    m.rename_uid("keyed", "counter").set_max_parallelism_of_all(256)
    m.transform_state("counter", "total", arrow=above_1500)
    m.transform_state("counter", "events", arrow=without_e152)
    m.transform_state("counter", "counts", arrow=lambda batch: batch)  # a map, as Spark's tasks hand it over
    m.transform_state("counter", "avg", **(avg or {"arrow": lambda batch: batch}))  # a struct


@pytest.mark.spark
def test_functions_on_spark_write_what_the_embedded_engine_writes(spark, tmp_path):
    embedded = _write(KEYED, tmp_path / "embedded", _arrow_steps)

    # Arrow functions and, for the struct, a DataFrame function of Spark in one write: the same rows
    assert _write(KEYED, tmp_path / "spark", lambda m: _arrow_steps(m, {"fn": lambda frame: frame}), spark) == embedded

    driver = os.getpid()

    def other_type_in_tasks(batch):  # the driver's sample call types the result; the tasks' results differ
        total = batch["total"] if os.getpid() == driver else pyarrow.array([[v] for v in batch["total"].to_pylist()])
        return pyarrow.record_batch([batch["key"], total], names=["key", "total"])

    with pytest.raises(TransformError, match="operator keyed, state 'total': the arrow= function returned "
                                             r"\(key string, total array<bigint>\) after \(key string, total bigint\)"):
        _write(KEYED, tmp_path / "tasks", lambda m: m.transform_state("keyed", "total", arrow=other_type_in_tasks),
               spark)
    assert not (tmp_path / "tasks").exists()


@pytest.mark.spark
def test_dataframe_functions_on_spark_write_what_arrow_functions_write(spark, tmp_path, exhaustive):
    if not exhaustive:
        pytest.skip("a Spark comparison of the exhaustive run (pytest --exhaustive); the default run writes "
                    "Arrow and DataFrame functions in one Spark write")
    embedded = _write(KEYED, tmp_path / "embedded", _arrow_steps)

    def spark_function(m):  # the DataFrame function of Spark, the same rows
        m.rename_uid("keyed", "counter").set_max_parallelism_of_all(256)
        m.transform_state("counter", "total", fn=lambda frame: frame.where("total > 1500"))
        m.transform_state("counter", "events", sql="SELECT key, filter(events, e -> e != 'e152') AS events FROM state")
        m.transform_state("counter", "counts", sql="SELECT key, counts FROM state")
        m.transform_state("counter", "avg", fn=lambda frame: frame)

    assert _write(KEYED, tmp_path / "dataframe", spark_function, spark) == embedded
    with pytest.raises(TransformError, match="operator counter, state 'total': the arrow= function returned columns"):
        _write(KEYED, tmp_path / "wrong", lambda m: m.rename_uid("keyed", "counter").transform_state(
            "counter", "total", arrow=lambda batch: batch.select(["key"])), spark)
