"""``fstate.open``: state tables as Arrow, record batches, pandas, polars and Spark DataFrames, with the
names and columns of ``fstate read`` and the views, keys pushed down, on the engine ``choose_engine``
picks; fstate's own errors on both engines (the Spark ones raised as themselves, not as Spark's)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pyarrow
import pytest

import fstate
from fstate.readers import tables
from fstate.readers.views import plan_views, register_views
from fstate.savepoint.errors import (CorruptStateError, InvalidArgumentError, MissingStateFileError,
                                     SqlError, UnknownOperatorError, from_spark)
from fstate.savepoint.loader import Savepoint
from tests.savepoint.test_strict_read import _copy, _damage_canonical, _first_stream
from tests.support import ROOT, SAMPLES

KEYED = SAMPLES / "keyed-hashmap-savepoint"
SAMPLE_NAMES = ("keyed-hashmap-savepoint", "operator-state-hashmap-savepoint", "sql-uids-savepoint", "cep-savepoint",
                "keyed-rocksdb-savepoint")


def _sorted_rows(arrow_table: pyarrow.Table) -> list:
    return sorted(arrow_table.to_pylist(), key=repr)


@pytest.mark.parametrize("sample", SAMPLE_NAMES)
def test_every_view_in_every_form_holds_the_same_rows(sample):
    state = fstate.open(str(SAMPLES / sample))
    views = [view["view"] for view in plan_views(Savepoint.open(str(SAMPLES / sample)))]
    assert sorted(state.views()) == sorted(views)
    for name in views:
        table = state.table(name)
        arrow = table.to_arrow()
        assert arrow.column_names == table.columns and arrow.schema == table.schema
        batches = table.to_batches()
        assert isinstance(batches, pyarrow.RecordBatchReader)
        assert _sorted_rows(pyarrow.Table.from_batches(list(batches), schema=table.schema)) == _sorted_rows(arrow)
        frame = table.to_pandas()
        assert list(frame.columns) == table.columns and len(frame) == arrow.num_rows
        assert _sorted_rows(pyarrow.Table.from_pandas(frame, schema=table.schema, preserve_index=False)) \
            == _sorted_rows(arrow), name
        assert table.engine == "embedded"


def test_keyed_rows_are_the_decoded_state():
    """The Arrow rows are the rows the plain decoders give (not the Arrow path checked against itself)."""
    expected = {row[0]: row for row in tables.keyed_table(Savepoint.open(str(KEYED)).operator("keyed")).rows()}
    table = fstate.open(str(KEYED)).keyed("keyed")
    got = {row["key"]: row for row in table.to_arrow().to_pylist()}
    assert got.keys() == expected.keys() and len(got) == 1000
    for key, row in expected.items():
        assert (got[key]["total"], got[key]["events"]) == (row[1], row[5]), key
        assert dict(got[key]["counts"] or []) == (row[3] or {}), key


def test_read_options_name_the_tables_of_fstate_read():
    state = fstate.open(str(SAMPLES / "operator-state-hashmap-savepoint"))
    rules = state.read("bcast", state="rules")  # the kind of --state, as `fstate read` picks it
    assert rules.columns == ["key", "value"] and rules.to_arrow().equals(state.broadcast_state("bcast", "rules").to_arrow())
    assert state.table("BCAST__RULES").to_arrow().equals(rules.to_arrow())  # view names are case-insensitive
    offsets = fstate.open(str(KEYED)).list_state("src", "offsets")
    assert offsets.columns == ["subtask", "index", "value"]
    sql = fstate.open(str(SAMPLES / "sql-uids-savepoint"), plan=str(SAMPLES / "sql-uids-savepoint" / "plan.json"))
    assert sql.keyed("4_group-aggregate").columns[0] == "key_k"
    assert fstate.open(str(KEYED)).keyed("keyed", ["total"]).columns == ["key", "total"]


def test_keys_read_only_their_key_groups():
    state = fstate.open(str(KEYED))
    whole = state.table("keyed")
    picked = state.table("keyed", keys=["k-1", "k-2", "no-such-key"])
    assert sorted(row["key"] for row in picked.to_arrow().to_pylist()) == ["k-1", "k-2"]
    assert picked.state_bytes() < whole.state_bytes() and len(picked.planned.partitions) < len(whole.planned.partitions)
    assert state.keyed("keyed", keys=["k-7"]).to_pandas()["total"].tolist() == \
        [row["total"] for row in whole.to_arrow().to_pylist() if row["key"] == "k-7"]
    with pytest.raises(InvalidArgumentError, match="keys= filters keyed tables"):
        state.table("src__offsets", keys=[1])
    with pytest.raises(InvalidArgumentError, match="keys= filters keyed tables"):
        state.table("savepoint_metadata", keys=[1])


def test_batches_are_decoded_as_they_are_read(monkeypatch):
    opened = []
    real = tables.open_partition

    def counting(partition, key_filter=None):
        opened.append(partition)
        return real(partition, key_filter)

    table = fstate.open(str(KEYED)).table("keyed")
    monkeypatch.setattr(tables, "open_partition", counting)
    reader = table.to_batches()
    assert opened == []  # nothing read until a batch is asked for
    assert reader.read_next_batch().num_rows > 0
    assert len(opened) == 1 < len(table.planned.partitions)


def test_polars_eager_and_lazy():
    polars = pytest.importorskip("polars")
    table = fstate.open(str(KEYED)).table("keyed")
    eager = table.to_polars()
    assert isinstance(eager, polars.DataFrame) and eager.columns == table.columns and eager.height == 1000
    lazy = table.to_polars(lazy=True)
    assert isinstance(lazy, polars.LazyFrame)
    picked = lazy.filter(polars.col("key").is_in(["k-1", "k-2"])).select("key", "total").sort("key").collect()
    assert picked.rows() == sorted((row["key"], row["total"]) for row in table.to_arrow().to_pylist()
                                   if row["key"] in ("k-1", "k-2"))
    assert lazy.head(3).collect().height == 3
    assert fstate.open(str(KEYED)).table("keyed", keys=["k-3"]).to_polars(lazy=True).collect()["key"].to_list() == ["k-3"]


def test_polars_missing_is_one_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "polars", None)  # import polars raises ImportError
    with pytest.raises(InvalidArgumentError, match="polars is not installed"):
        fstate.open(str(KEYED)).table("keyed").to_polars()


def test_sql_on_the_embedded_engine():
    state = fstate.open(str(KEYED))
    result = state.sql("SELECT key, total FROM keyed WHERE total > 2990 ORDER BY key")
    expected = sorted((row["key"], row["total"]) for row in state.table("keyed").to_arrow().to_pylist()
                      if row["total"] is not None and row["total"] > 2990)
    assert [tuple(row.values()) for row in result.to_arrow().to_pylist()] == expected and expected
    assert result.to_pandas()["key"].tolist() == [key for key, _ in expected]
    assert result.engine == "embedded" and isinstance(result.to_batches(), pyarrow.RecordBatchReader)
    with pytest.raises(SqlError, match="views: "):
        state.sql("SELECT nope FROM keyed").to_arrow()


def test_errors_are_fstate_errors_on_the_embedded_engine(tmp_path):
    snapshot = _copy(tmp_path, "keyed-hashmap-savepoint")
    path, handle, _ = _first_stream(snapshot)
    _damage_canonical(path, handle, "key length")
    state = fstate.open(str(snapshot))
    for convert in (lambda t: t.to_arrow(), lambda t: t.to_pandas(), lambda t: list(t.to_batches())):
        with pytest.raises(CorruptStateError, match="the key decodes to") as raised:
            convert(state.table("keyed"))
        assert raised.value.path == path.name and "\n" not in str(raised.value)
    with pytest.raises(UnknownOperatorError):
        state.keyed("nope")
    with pytest.raises(InvalidArgumentError, match="no view 'nope'.*views: keyed"):
        state.table("nope")
    with pytest.raises(InvalidArgumentError, match="--engine must be"):
        fstate.open(str(KEYED), engine="duck")
    with pytest.raises(InvalidArgumentError, match="spark form needs Spark.*engine='embedded'"):
        fstate.open(str(KEYED), engine="embedded").table("keyed").to_spark()
    with pytest.raises(InvalidArgumentError, match="unknown form 'excel'"):
        fstate.open(str(KEYED)).table("keyed").to("excel")
    with pytest.raises(fstate.SavepointNotFoundError):
        fstate.open(str(tmp_path / "missing"))


def test_no_spark_without_a_spark_form():
    code = textwrap.dedent(f"""
        import sys
        import fstate
        state = fstate.open({str(KEYED)!r})
        table = state.table("keyed", keys=["k-1"])
        table.to_arrow(); table.to_pandas(); list(table.to_batches()); state.sql("SELECT count(*) FROM keyed").to_arrow()
        print("pyspark" in sys.modules)
    """)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


def test_an_error_text_from_spark_is_made_again():
    """What a Spark worker's traceback carries: the noted fields, or (a worker without the note) the
    traceback's last fstate error line."""
    error = MissingStateFileError("state file has 40 bytes", "/sp/f")
    noted = fstate.savepoint.errors.noted_for_driver(error)
    text = "[PYTHON_DATA_SOURCE_ERROR] Traceback ...\n" + "\n".join(getattr(noted, "__notes__", []))
    if hasattr(error, "add_note"):
        again = from_spark(RuntimeError(text))
        assert type(again) is MissingStateFileError and (again.path, again.detail, str(again)) == (
            "/sp/f", "state file has 40 bytes", str(error))
    plain = from_spark(RuntimeError("Traceback...\nfstate.savepoint.errors.CorruptStateError: f: bad bytes\n "
                                    "SQLSTATE: 38000"))
    assert type(plain) is CorruptStateError and str(plain) == "f: bad bytes"
    assert from_spark(RuntimeError("java.lang.OutOfMemoryError")) is None
    if hasattr(error, "add_note"):  # a class whose constructor takes other arguments
        noted = fstate.savepoint.errors.noted_for_driver(SqlError("no column x", ["keyed", "src"]))
        sql = from_spark(RuntimeError("\n".join(noted.__notes__)))
        assert type(sql) is SqlError and sql.problem == "no column x" and str(sql) == str(noted)


# ---------------------------------------------------------------------------------------------
# Spark


@pytest.mark.spark
def test_spark_gives_the_same_tables(spark):
    embedded, on_spark = fstate.open(str(KEYED)), fstate.open(str(KEYED), engine="spark", spark=spark)
    for name in embedded.views():
        ours, theirs = embedded.table(name), on_spark.table(name)
        assert theirs.engine == "spark"
        arrow = theirs.to_arrow()
        assert arrow.schema == ours.schema and _sorted_rows(arrow) == _sorted_rows(ours.to_arrow()), name
        assert ours.to_spark().columns == ours.columns  # a Spark DataFrame whatever the engine
    picked = on_spark.keyed("keyed", keys=["k-1", "k-2"])
    assert _sorted_rows(picked.to_arrow()) == _sorted_rows(embedded.keyed("keyed", keys=["k-1", "k-2"]).to_arrow())
    query = "SELECT key, total FROM keyed WHERE total > 2990"
    assert _sorted_rows(on_spark.sql(query).to_arrow()) == _sorted_rows(embedded.sql(query).to_arrow())


@pytest.mark.spark
def test_errors_inside_spark_are_fstate_errors(spark, tmp_path):
    """A corrupt state file read in a Spark task, and a truncated one the data source plans from: the
    API raises fstate's class with its one-line message, not Spark's PythonException or
    AnalysisException [PYTHON_DATA_SOURCE_ERROR]."""
    snapshot = _copy(tmp_path, "keyed-hashmap-savepoint")
    path, handle, _ = _first_stream(snapshot)
    _damage_canonical(path, handle, "key length")
    with pytest.raises(CorruptStateError, match="the key decodes to") as raised:
        fstate.open(str(snapshot), engine="spark", spark=spark).table("keyed").to_arrow()
    assert raised.value.path == path.name and "\n" not in str(raised.value) and "Traceback" not in str(raised.value)
    frame = fstate.SavepointReader(str(snapshot), spark).keyed("keyed")
    with pytest.raises(CorruptStateError, match="the key decodes to"):
        with fstate.spark_errors():
            frame.collect()

    truncated = _copy(tmp_path / "truncated", "keyed-hashmap-savepoint")
    path, _, _ = _first_stream(truncated)
    path.write_bytes(path.read_bytes()[:40])
    with pytest.raises(MissingStateFileError, match="state file has 40 bytes") as raised:
        fstate.SavepointReader(str(truncated), spark).keyed("keyed")
    assert raised.value.path == str(path) and "\n" not in str(raised.value)
    with pytest.raises(MissingStateFileError, match="state file has 40 bytes"):
        register_views(spark, str(truncated))
