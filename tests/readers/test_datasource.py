"""The ``flink-savepoint`` data source's conventions: one builder of its options, Flink's SQL connector
option names as aliases, unknown options as errors, and the data source on any SparkSession."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fstate.readers import tables
from fstate.readers.options import (FORMAT, parse_source_options, savepoint_source_options, source_options)
from fstate.savepoint.errors import InvalidArgumentError
from fstate.savepoint.loader import Savepoint
from tests.oracle_compare import norm
from tests.support import sample_dirs, sample_snapshot

ROOT = Path(__file__).resolve().parents[2]


def _sample(name):
    return sample_snapshot(next(s for s in sample_dirs() if s.name == name))


KEYED = _sample("keyed-hashmap-savepoint")


def _rows(df):
    return sorted((norm(list(r)) for r in df.collect()), key=repr)


# -- options, without Spark ---------------------------------------------------------------------


def test_built_options_read_back():
    options = source_options("s3://b/sp", "keyed", table="keyed", state=["total", "counts"], flat=False,
                             flatten=True, allow_external_paths=False, checkpoint_base_dir="/moved",
                             fs_options=(("endpoint", "http://h:9000"),))
    assert options == {"path": "s3://b/sp", "uid": "keyed", "table": "keyed", "state": "total,counts",
                       "flat": "false", "flatten": "true", "allowExternalPaths": "false",
                       "checkpointBaseDir": "/moved", "fsOptions": '{"endpoint": "http://h:9000"}'}
    # Spark hands them over with lower-cased names
    parsed = parse_source_options({k.lower(): v for k, v in options.items()})
    assert (parsed.path, parsed.uid, parsed.table, parsed.states) == ("s3://b/sp", "keyed", "keyed",
                                                                      ["total", "counts"])
    assert (parsed.flat, parsed.flatten, parsed.allow_external_paths) == (False, True, False)
    assert parsed.checkpoint_base_dir == "/moved" and parsed.fs_options == {"endpoint": "http://h:9000"}
    # defaults: external paths refused (the one path policy), plain tables, keys flattened for SQL
    # operators only (None)
    parsed = parse_source_options({"path": "/sp", "uid": "u"})
    assert (parsed.table, parsed.state, parsed.flat, parsed.flatten, parsed.allow_external_paths,
            parsed.checkpoint_base_dir, parsed.fs_options) == (None, None, False, None, False, None, {})


def test_options_of_an_open_savepoint_carry_everything():
    """SQL views and diff used to drop checkpointBaseDir: every caller now builds options here."""
    sp = Savepoint.open(str(KEYED), allow_external_paths=True, checkpoint_base_dir="/moved/job",
                        fs_options={"s3.region": "eu-west-1"})
    options = savepoint_source_options(sp, "keyed", table="timers")
    assert options["path"] == sp.location.metadata_path and options["uid"] == "keyed"
    assert options["table"] == "timers" and options["allowExternalPaths"] == "true"
    assert options["checkpointBaseDir"] == "/moved/job"
    assert parse_source_options(options).fs_options["s3.region"] == "eu-west-1"


def test_fs_options_json_and_prefixed():
    parsed = parse_source_options({"path": "/sp", "uid": "u", "fsoptions": '{"region": "a", "retries": "2"}',
                                   "fs.region": "b", "fs.s3a.endpoint": "http://h"})
    assert parsed.fs_options == {"region": "b", "retries": "2", "s3a.endpoint": "http://h"}
    with pytest.raises(InvalidArgumentError, match="fsOptions must be a JSON object"):
        parse_source_options({"path": "/sp", "uid": "u", "fsOptions": "[1]"})


def test_flink_connector_option_names():
    """Flink's savepoint SQL connector: state.path, operator.uid / operator.uid.hash, state.backend.type."""
    parsed = parse_source_options({"state.path": "/sp", "operator.uid": "keyed", "state.backend.type": "rocksdb"})
    assert (parsed.path, parsed.uid) == ("/sp", "keyed")
    assert parse_source_options({"STATE.PATH": "/sp", "operator.uid.hash": "ab" * 16}).uid == "ab" * 16
    assert parse_source_options({"path": "/sp", "uid": "u", "state.backend.type": "HashMap"}).uid == "u"
    with pytest.raises(InvalidArgumentError, match="operator.uid.hash must be 32 hex digits"):
        parse_source_options({"state.path": "/sp", "operator.uid.hash": "keyed"})
    with pytest.raises(InvalidArgumentError, match="'operator.uid' and 'operator.uid.hash' name the same thing"):
        parse_source_options({"state.path": "/sp", "operator.uid": "keyed", "operator.uid.hash": "ab" * 16})
    with pytest.raises(InvalidArgumentError, match="'path' and 'state.path'"):
        parse_source_options({"path": "/sp", "state.path": "/sp", "uid": "u"})
    with pytest.raises(InvalidArgumentError, match="state.backend.type must be one of hashmap, rocksdb, not 'forst'"):
        parse_source_options({"path": "/sp", "uid": "u", "state.backend.type": "forst"})


def test_unknown_and_malformed_options_are_errors():
    with pytest.raises(InvalidArgumentError) as e:
        parse_source_options({"path": "/sp", "uid": "u", "flatt": "true"})
    message = str(e.value)
    assert "unknown option 'flatt'" in message and "\n" not in message
    assert "known: path, uid, table, state, flat, flatten, allowExternalPaths" in message
    assert "state.path, operator.uid, operator.uid.hash, state.backend.type" in message
    with pytest.raises(InvalidArgumentError, match="option flat must be true or false, not 'ture'"):
        parse_source_options({"path": "/sp", "uid": "u", "flat": "ture"})
    with pytest.raises(InvalidArgumentError, match="unknown table kind 'key'"):
        parse_source_options({"path": "/sp", "uid": "u", "table": "key"})
    with pytest.raises(InvalidArgumentError, match="options 'path' and 'uid' are required"):
        parse_source_options({"path": "/sp"})


def test_table_planned_from_flink_option_names():
    pytest.importorskip("pyspark")
    from fstate.readers.datasource import build_table

    uid_hash = Savepoint.open(str(KEYED)).operator("keyed").uid_hash
    ours = build_table({"path": str(KEYED), "uid": "keyed"})
    flinks = build_table({"state.path": str(KEYED), "operator.uid.hash": uid_hash, "state.backend.type": "hashmap"})
    assert flinks.columns == ours.columns
    assert sorted(map(repr, flinks.rows())) == sorted(map(repr, ours.rows()))


def test_readers_package_does_not_import_spark():
    code = "import sys, fstate.readers; fstate.readers.register; assert 'pyspark' not in sys.modules, 'imported'"
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)


# -- on Spark -----------------------------------------------------------------------------------


@pytest.mark.spark
def test_register_twice_keeps_push_down(spark):
    """``fstate.readers.register(session)`` may be called again on a session (a plain session made
    before fstate was imported is test_plain_spark_session_builder's)."""
    import fstate.readers
    from fstate.readers.datasource import FILTER_PUSHDOWN_CONF

    from fstate.readers.datasource import key_push_down_is_safe

    fstate.readers.register(spark)
    fstate.readers.register(spark)
    pushed = key_push_down_is_safe(spark)
    assert (spark.conf.get(FILTER_PUSHDOWN_CONF, "false") == "true") == pushed
    df = spark.read.format("flink-savepoint").option("path", str(KEYED)).option("uid", "keyed").load()
    assert _rows(df) == sorted((norm(list(r)) for r in tables.keyed_table(Savepoint.open(str(KEYED))
                                                                    .operator("keyed")).rows()), key=repr)
    one = df.where("key = 'k-7'")
    # key push-down where Spark keeps it to its scan: one partition; else Spark filters every row
    assert [row["key"] for row in one.collect()] == ["k-7"]
    assert (one.rdd.getNumPartitions() == 1) == pushed


def _filtered_and_whole(spark) -> int:
    """Rows of ``df`` and of ``df.where(key IN (k-7, k-8))`` in one query: one DataFrame, two scans."""
    df = spark.read.format("flink-savepoint").option("path", str(KEYED)).option("uid", "keyed").load()
    return df.unionByName(df.where("key IN ('k-7', 'k-8')")).count()


@pytest.mark.spark
def test_one_dataframe_filtered_and_whole_in_one_query(spark):
    """Spark 4.0-4.3 keep a Python data source's push-down planning for every scan of a DataFrame: with
    key push-down, ``df`` beside ``df.where(key IN ...)`` reads only those keys. register() offers no
    filters on such a Spark; the test also shows that the push-down reader would read too few rows on
    this Spark exactly when key_push_down_is_safe says so."""
    import fstate.readers
    from fstate.readers.datasource import FILTER_PUSHDOWN_CONF, KeyPushdownSavepointDataSource, key_push_down_is_safe

    expected = len(list(tables.keyed_table(Savepoint.open(str(KEYED)).operator("keyed")).rows())) + 2
    fstate.readers.register(spark)
    assert _filtered_and_whole(spark) == expected
    before = spark.conf.get(FILTER_PUSHDOWN_CONF, "false")
    try:
        spark.conf.set(FILTER_PUSHDOWN_CONF, "true")
        spark.dataSource.register(KeyPushdownSavepointDataSource)
        leaks = _filtered_and_whole(spark) != expected
    finally:
        spark.conf.set(FILTER_PUSHDOWN_CONF, before)
        fstate.readers.register(spark)
    assert leaks == (not key_push_down_is_safe(spark))


@pytest.mark.spark
def test_flink_option_names_on_spark(spark):
    uid_hash = Savepoint.open(str(KEYED)).operator("keyed").uid_hash
    ours = spark.read.format(FORMAT).options(path=str(KEYED), uid="keyed", state="total").load()
    flinks = (spark.read.format(FORMAT).option("state.path", str(KEYED)).option("operator.uid.hash", uid_hash)
              .option("state.backend.type", "hashmap").option("state", "total").load())
    assert flinks.columns == ours.columns == ["key", "total"]
    assert _rows(flinks) == _rows(ours)


@pytest.mark.spark
def test_unknown_option_fails_the_read(spark):
    with pytest.raises(Exception) as e:
        spark.read.format(FORMAT).options(path=str(KEYED), uid="keyed", flatt="true").load()
    assert "unknown option 'flatt' for the flink-savepoint data source (known: path, uid," in str(e.value)


@pytest.mark.spark
def test_views_keep_checkpoint_base_dir(spark, tmp_path):
    """A RocksDB incremental checkpoint whose shared/ directory moved: the views read it with
    checkpoint_base_dir (the option used to be dropped on the way to the data source)."""
    import shutil

    pytest.importorskip("rocksdict")
    from fstate.readers.views import register_views
    from tests.savepoint.test_rocksdb import _with_shared_file

    job, chk, _, _ = _with_shared_file(tmp_path)
    elsewhere = tmp_path / "moved"
    elsewhere.mkdir()
    shutil.move(str(job / "shared"), str(elsewhere / "shared"))
    views = register_views(spark, str(chk), "moved", checkpoint_base_dir=str(elsewhere))
    assert "moved_keyed" in views
    expected = tables.keyed_table(Savepoint.open(str(chk), checkpoint_base_dir=str(elsewhere)).operator("keyed"))
    assert spark.sql("SELECT count(*) FROM moved_keyed").first()[0] == len(list(expected.rows()))


@pytest.mark.spark
def test_plain_spark_session_builder(tmp_path, exhaustive):
    """A new process, a plain ``SparkSession.builder`` session made before fstate is imported:
    ``fstate.readers.register(spark)`` is the one line that makes the data source (with key push-down
    and Flink's option names) available. With --exhaustive only (a JVM of its own): the default run's
    ``spark`` fixture is such a session, so every Spark test runs on one."""
    if not exhaustive:
        pytest.skip("--exhaustive: the spark fixture (tests/conftest.py) is a plain builder session")
    script = tmp_path / "plain.py"
    script.write_text(f'''
import sys
from pyspark.sql import SparkSession

spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
spark.sparkContext.setLogLevel("ERROR")
assert "fstate" not in sys.modules
import fstate.readers
fstate.readers.register(spark)
df = spark.read.format("flink-savepoint").option("state.path", {str(KEYED)!r}).option("operator.uid", "keyed").load()
print("all", df.count())
one = df.where("key = 'k-7'")
print("one", one.count(), one.rdd.getNumPartitions() == 1 or not fstate.readers.datasource.key_push_down_is_safe(spark))
fstate.readers.register(spark)  # again: harmless
spark.stop()
''')
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    result = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    operator = Savepoint.open(str(KEYED)).operator("keyed")
    expected = len(list(tables.keyed_table(operator).rows()))
    lines = [line.split() for line in result.stdout.splitlines() if line.startswith(("all", "one"))]
    # the key filter is pushed down where Spark allows it: one key group's partition is read
    assert lines == [["all", str(expected)], ["one", "1", "True"]]
