"""The embedded engine against Spark: the same schemas, rows, files and diffs on every sample and table
kind (one Spark session for the module), and the engine choice."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fstate.cli.output import to_jsonable
from fstate.readers import engine, tables
from fstate.savepoint import _fastpath, columnar, pool
from fstate.readers.engine_files import java_double
from fstate.readers.options import FORMAT, savepoint_source_options
from fstate.readers.planning import build_table
from fstate.readers.views import plan_views
from fstate.savepoint.loader import Savepoint
from tests.support import covering, sample_dirs, sample_snapshot

ROOT = Path(__file__).resolve().parents[2]


def _variants(sample: Path):
    """(label, source options) of every table a sample gives: each view, keyed tables also --flat per
    state and with --flatten toggled, SQL samples also with their plan."""
    savepoint = Savepoint.open(str(sample_snapshot(sample)))
    plans = [None] + ([str(sample / "plan.json")] if (sample / "plan.json").exists() else [])
    for plan in plans:
        for view in plan_views(savepoint):
            if view["table"] == "metadata":
                continue
            base = dict(table=view["table"], state=view["state"], plan=plan)
            label = f"{sample.name}:{view['view']}:{'plan' if plan else ''}"
            yield label, savepoint_source_options(savepoint, view["uid"], **base)
            if view["table"] in ("keyed", "timers"):
                for flatten in (True, False):
                    yield f"{label}:flatten={flatten}", savepoint_source_options(savepoint, view["uid"], flatten=flatten,
                                                                                  **base)
            if view["table"] == "keyed" and plan is None:
                operator = savepoint.operator(view["uid"])
                for _, state in operator.keyed_meta.value_states:
                    options = savepoint_source_options(savepoint, view["uid"], table="keyed", state=state.name,
                                                       flat=True)
                    try:
                        build_table(options)
                    except Exception:  # a state without elements to flatten
                        continue
                    yield f"{label}:flat={state.name}", options


VARIANTS = [variant for sample in sample_dirs() for variant in _variants(sample)]
#: compared with Spark (one query each, so a few samples; every variant's schema is compared with Spark's
#: types without a JVM): each kind of table, SQL with and without the plan, --flat, --flatten. The RocksDB
#: sample holds the hashmap one's tables (same columns and types) in another layout, whose decoders are
#: compared with the plain-Python ones on every variant here and whose keyed table and timers Spark reads
#: in tests/savepoint/test_rocksdb.py: its 14 tables are compared with Spark with --exhaustive only.
SPARK_SAMPLES = ("keyed-hashmap-savepoint", "operator-state-hashmap-savepoint", "cep-savepoint",
                 "sql-uids-savepoint", "sql-no-uids-ttl-savepoint")
EXHAUSTIVE_SPARK_SAMPLES = SPARK_SAMPLES + ("keyed-rocksdb-savepoint",)


def _compared_with_spark(label: str, samples: tuple[str, ...] = EXHAUSTIVE_SPARK_SAMPLES) -> bool:
    sample, view, plan, *rest = label.split(":")
    extra = rest[0] if rest else ""
    if sample not in samples:
        return False
    if sample.startswith("operator-state"):
        return view in ("bcast__rules", "lists__bytes", "lists__tuples")
    if sample.startswith("sql-"):
        if (sample == "sql-no-uids-ttl-savepoint" and not plan) or (plan and view.endswith("__timers")):
            return False
        return "group_aggregate" in view if extra else True
    if extra.startswith("flat=") and sample == "cep-savepoint":
        return extra in ("flat=sharedBuffer-events", "flat=nfaStateName")
    return not extra.startswith("flatten=")


SPARK_VARIANTS = [(label, options) for label, options in VARIANTS if _compared_with_spark(label)]


def _kinds() -> set[str]:
    return {build_table(options).kind for _, options in VARIANTS}


def test_variants_cover_every_table_kind():
    assert {"keyed", "list", "broadcast", "timers", "matches"} <= _kinds()
    assert any(":plan" in label for label, _ in VARIANTS) and any("flat=" in label for label, _ in VARIANTS)


@pytest.mark.parametrize("label,options", VARIANTS, ids=[label for label, _ in VARIANTS])
def test_arrow_schema_is_the_one_spark_converts_to(label, options):
    from fstate.readers.datasource import spark_schema
    from pyspark.sql.pandas.types import to_arrow_schema

    table = build_table(options)
    assert engine.table_schema(table).equals(to_arrow_schema(spark_schema(table), timezone="UTC"))
    read = engine.read_table(table)
    assert read.schema.equals(engine.table_schema(table))
    assert read.num_rows == sum(1 for _ in table.rows())


@pytest.mark.parametrize("label,options", VARIANTS, ids=[label for label, _ in VARIANTS])
def test_columnar_batches_equal_the_decoded_rows(label, options, monkeypatch):
    """Where the compiled columnar decoder takes a partition, the table equals the one built from the
    plain-Python decoders' rows."""
    table = build_table(options)
    fast = engine.read_table(table)
    monkeypatch.setenv("FSTATE_PURE_PYTHON", "1")
    reference = engine.read_table(table)
    assert fast.schema.equals(reference.schema)
    assert fast.to_pylist() == reference.to_pylist()


def test_every_partition_is_opened_once(monkeypatch):
    """Each partition's state is opened and read once, whichever decoder reads it: also where the
    columnar decoder declines the states (SQL rows, CEP, POJOs: the rows are read from the same open
    state), and for RocksDB (one copy of the database per partition). Counted on every variant, on
    the compiled path and the plain-Python one."""
    from fstate.savepoint import rocksdb, streams

    opens = {"stream": 0, "rocksdb": 0}
    read_source, open_snapshot = streams.read_source, rocksdb.open_snapshot

    def counted(kind, function):
        def call(*args, **kwargs):
            opens[kind] += 1
            return function(*args, **kwargs)
        return call

    monkeypatch.setattr(streams, "read_source", counted("stream", read_source))
    monkeypatch.setattr(rocksdb, "open_snapshot", counted("rocksdb", open_snapshot))
    declined = 0
    for pure in ("0", "1"):
        monkeypatch.setenv("FSTATE_PURE_PYTHON", pure)
        for label, options in VARIANTS:
            if "rocksdb" in label.split(":")[0] and not _has_rocksdict():
                continue
            table = build_table(options)
            for partition in table.partitions:
                kind = "rocksdb" if isinstance(partition.handle, rocksdb.RocksDBSource) else "stream"
                opens.update(stream=0, rocksdb=0)
                rows = sum(batch.num_rows for batch in engine.partition_batches(table, partition))
                assert opens[kind] == 1, (label, pure, opens)
                with tables.open_partition(partition, table.key_filter) as decoder:
                    declined += partition.kind == "keyed" and decoder.name in ("python", "compiled") and pure == "0"
                    assert rows == sum(1 for _ in decoder.rows()), label
    assert declined  # the variants include states the columnar decoder does not take


def _has_rocksdict() -> bool:
    try:
        import rocksdict  # noqa: F401
    except ImportError:
        return False
    return True


def test_the_columnar_decoder_reads_the_canonical_samples():
    if not (columnar.available() and _fastpath.available()):
        pytest.skip("the compiled extensions are not built")
    for sample in ("keyed-hashmap-savepoint", "keyed-1.20-savepoint", "keyed-rocksdb-savepoint"):
        label, options = next((label, options) for label, options in VARIANTS
                              if label.startswith(f"{sample}:") and label.count(":") == 2
                              and build_table(options).kind == "keyed")
        table = build_table(options)
        names = engine.table_schema(table).names
        for partition in table.partitions:
            with tables.open_partition(partition) as decoder:
                assert decoder.name == "columnar", label
                batches = decoder.batches(names, None)
                assert sum(batch.num_rows for batch in batches) > 0


def _unordered_maps(value):
    """Map entries in one order: a map with struct keys is a list of key/value objects in JSON, in
    whichever order the dict holding it was built."""
    if isinstance(value, dict):
        return {key: _unordered_maps(item) for key, item in value.items()}
    if isinstance(value, list):
        items = [_unordered_maps(item) for item in value]
        if items and all(isinstance(item, dict) and set(item) == {"key", "value"} for item in items):
            items.sort(key=lambda item: json.dumps(item, sort_keys=True))
        return items
    return value


def _jsonable_rows(rows) -> list[str]:
    return sorted(json.dumps(_unordered_maps(to_jsonable(list(row))), sort_keys=True) for row in rows)


def _quick_spark_variants() -> list[tuple[str, dict]]:
    """The default run's Spark comparisons. Spark's rows are the embedded engine's Arrow batches of the
    same decoders (datasource.read yields engine.partition_batches), so what can differ is Spark's type
    conversion and the options passed through Spark: the tables that together hold every type shape,
    each sample once, and each kind of option (--flat, --flatten both ways, --plan) once."""
    variants = [(label, options) for label, options in SPARK_VARIANTS if _compared_with_spark(label, SPARK_SAMPLES)]
    chosen = set(covering({label: engine.table_schema(build_table(options)) for label, options in variants}))
    for marker in (":flat=", ":flatten=True", ":flatten=False", ":plan"):
        chosen.add(next(label for label, _ in variants if marker in label))
    return [(label, options) for label, options in variants if label in chosen]


@pytest.mark.spark
def test_both_engines_give_the_same_rows_on_every_table(spark, exhaustive):
    differing = []
    compared = SPARK_VARIANTS if exhaustive else _quick_spark_variants()
    assert compared
    for label, options in compared:
        frame = spark.read.format(FORMAT).options(**options).load()
        table = build_table(options)
        embedded_rows = [row for batch in engine.iter_batches(table) for row in engine.batch_rows(batch)]
        assert list(frame.columns) == table.column_names, label
        if _jsonable_rows(frame.collect()) != _jsonable_rows(embedded_rows):
            differing.append(label)
    assert differing == []


def test_process_pool_reads_the_same_table(monkeypatch):
    label, options = next((label, options) for label, options in VARIANTS
                          if label.startswith("keyed-hashmap-savepoint:keyed:") and "flat" not in label)
    table = build_table(options)
    assert len(table.partitions) > 1
    sequential = engine.read_table(table)
    monkeypatch.setattr(pool, "SMALL_BYTES", 0)
    seen = []
    pooled = engine.read_table(table, progress=lambda rows, size: seen.append((rows, size)), workers=2)
    assert pooled.equals(sequential)
    assert sum(rows for rows, _ in seen) == pooled.num_rows and len(seen) == len(table.partitions)


def test_engine_choice():
    assert engine.choose_engine("auto", False, 10) == "embedded"
    assert engine.choose_engine("auto", True, 10) == "spark"
    assert engine.choose_engine("auto", False, engine.SPARK_ABOVE_BYTES + 1) == "spark"
    assert engine.choose_engine("spark", False, 10) == "spark"
    assert engine.choose_engine("embedded", True, 1 << 40) == "embedded"
    from fstate.savepoint.errors import InvalidArgumentError

    with pytest.raises(InvalidArgumentError, match="--engine"):
        engine.choose_engine("flink", False, 0)


def test_java_double_spelling():
    cases = {1.0: "1.0", 0.001: "0.001", 1e-4: "1.0E-4", 1e7: "1.0E7", 1234567.5: "1234567.5", -2.5e-10: "-2.5E-10",
             123.456: "123.456", 0.0: "0.0", float("nan"): "NaN", 1.7976931348623157e308: "1.7976931348623157E308"}
    assert {value: java_double(value) for value in cases} == cases
    assert java_double(0.1, single=True) == "0.1"


def test_first_rows_need_no_pyspark():
    sample = sample_snapshot(next(sample for sample in sample_dirs() if sample.name == "keyed-hashmap-savepoint"))
    code = ("import sys\nfrom fstate.cli.app import main\nsys.argv = ['fstate', 'read', %r, '--uid', 'keyed', '-n', '2', "
            "'--json']\ntry:\n    main()\nfinally:\n    print('PYSPARK' if any(m.startswith('pyspark') for m in sys.modules) "
            "else 'NO-PYSPARK', file=sys.stderr)\n" % str(sample))
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                            env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.splitlines()) == 2 and "NO-PYSPARK" in result.stderr


def _read_back(directory: Path, file_format: str) -> list:
    files = sorted(path for path in directory.iterdir() if path.suffix == f".{file_format}")
    if file_format == "parquet":
        import pyarrow.parquet

        table = pyarrow.concat_tables([pyarrow.parquet.read_table(path) for path in files])
        rows = [{key: value for key, value in row.items()} for row in table.to_pylist()]
        return sorted(json.dumps(to_jsonable(row), sort_keys=True) for row in rows), \
            [(field.name, str(field.type).replace("item", "element")) for field in table.schema]
    lines = [line for path in files for line in path.read_text(encoding="utf-8").splitlines()]
    if file_format == "csv":
        header = lines[0]
        return sorted(line for line in lines if line != header), header
    return sorted(lines), None


OUT_TABLES = [
    ("keyed-hashmap-savepoint", ["--uid", "keyed"]),
    ("operator-state-hashmap-savepoint", ["--uid", "lists", "--state", "tuples"]),
    ("operator-state-hashmap-savepoint", ["--uid", "bcast", "--state", "rules"]),
    ("keyed-rocksdb-savepoint", ["--uid", "keyed", "--table", "timers"]),
    ("cep-savepoint", ["--uid", "cep", "--table", "matches"]),
    ("sql-uids-savepoint", ["--uid", "4_group-aggregate"]),
    ("sql-no-uids-ttl-savepoint", ["--uid", "GroupAggregate[4]", "--plan", "PLAN"]),
]


@pytest.mark.spark
@pytest.mark.parametrize("file_format", ["parquet", "csv", "json"])
def test_both_engines_write_the_same_files(spark, tmp_path, file_format, exhaustive):
    """``read --out`` on each engine, and Spark's own writers given the data source's DataFrame (what
    ``fstate sql --out`` and remote directories use): the same rows and columns. The CLI's Spark
    tasks write with the embedded engine's writers: the very same bytes. By default the tables that
    together hold every type shape (tests.support.covering), the CLI's Spark tasks on the first; every
    table on both with --exhaustive."""
    from typer.testing import CliRunner

    from fstate.cli.app import app
    from fstate.cli.read import write_frame
    from fstate.readers.options import FORMAT, source_options

    runner = CliRunner()
    tables_ = [(index, name, [str(_sample(name) / "plan.json") if argument == "PLAN" else argument
                              for argument in arguments])
               for index, (name, arguments) in enumerate(OUT_TABLES)]
    if not exhaustive:
        schemas = {f"{name}:{index}": engine.table_schema(build_table(_options(source_options, _sample(name), arguments)))
                   for index, name, arguments in tables_}
        chosen = covering(schemas, each_sample=False)
        tables_ = [table for table in tables_ if f"{table[1]}:{table[0]}" in chosen]
    for index, name, arguments in tables_:
        sample_dir = _sample(name)
        outputs, files = [], []
        engines = ("embedded", "spark") if exhaustive or index == 0 else ("embedded",)
        for engine_name in engines:
            out = tmp_path / f"{index}-{engine_name}"
            result = runner.invoke(app, ["read", str(sample_snapshot(sample_dir)), *arguments, "--out", str(out),
                                         "--format", file_format, "--engine", engine_name])
            if result.exit_code != 0 and "no operator" in result.output:
                pytest.fail(f"{name} {arguments}: {result.output}")
            assert result.exit_code == 0, result.output
            outputs.append(_read_back(out, file_format))
            files.append({path.name: path.read_bytes() for path in sorted(out.iterdir())})
        assert all(other == files[0] for other in files[1:]), (name, arguments)
        frame = spark.read.format(FORMAT).options(**_options(source_options, sample_dir, arguments)).load()
        out = tmp_path / f"{index}-dataframe"
        write_frame(frame, str(out), file_format)
        assert _read_back(out, file_format) == outputs[0], (name, arguments)


def _sample(name: str) -> Path:
    return next(sample for sample in sample_dirs() if sample.name == name)


def _options(source_options, sample_dir: Path, arguments: list[str]) -> dict:
    """The data source options of ``read`` arguments (``--uid``, ``--state``, ``--table``, ``--plan``)."""
    named = dict(zip(arguments[::2], arguments[1::2]))
    return source_options(str(sample_snapshot(sample_dir)), named["--uid"], table=named.get("--table"),
                          state=named.get("--state"), plan=named.get("--plan"))


def test_parquet_parts_have_large_row_groups_and_dictionaries_only_where_values_repeat(tmp_path):
    """The embedded engine's Parquet writer gathers batches into row groups and gives a dictionary to
    the columns whose values repeat (nested ones too), none to those of unique values, and statistics
    to every column but the strings of unique values; the rows stay."""
    import pyarrow
    import pyarrow.parquet

    from fstate.readers import engine_files

    value = pyarrow.struct([("tag", pyarrow.string()), ("ids", pyarrow.list_(pyarrow.int64()))])
    schema = pyarrow.schema([("key", pyarrow.string()), ("colour", pyarrow.string()),
                             ("seen", pyarrow.map_(pyarrow.string(), value))])

    def batch(start: int) -> pyarrow.RecordBatch:
        rows = range(start, start + 1000)
        return pyarrow.RecordBatch.from_pylist(
            [{"key": f"key-{i}", "colour": ("red", "green", None)[i % 3],
              "seen": [(f"k{i}", {"tag": "t", "ids": [i, i + 1]})]} for i in rows], schema=schema)

    batches = [batch(start) for start in range(0, 5000, 1000)]
    path = str(tmp_path / "part.parquet")
    assert engine_files.write_batches(iter(batches), schema, path, "parquet") == 5000
    meta = pyarrow.parquet.ParquetFile(path).metadata
    assert meta.num_row_groups == 1
    dictionary = {meta.row_group(0).column(i).path_in_schema:
                  meta.row_group(0).column(i).has_dictionary_page for i in range(meta.num_columns)}
    assert dictionary == {"key": False, "colour": True, "seen.key_value.key": False,
                          "seen.key_value.value.tag": True, "seen.key_value.value.ids.list.element": False}
    statistics = {meta.row_group(0).column(i).path_in_schema:
                  meta.row_group(0).column(i).is_stats_set for i in range(meta.num_columns)}
    assert statistics == {"key": False, "colour": True, "seen.key_value.key": False,   # unique strings: none
                          "seen.key_value.value.tag": True, "seen.key_value.value.ids.list.element": True}
    assert pyarrow.parquet.read_table(path).equals(pyarrow.Table.from_batches(batches))


def _fail_on(table, partition, index, bad):
    if index == bad:
        raise ValueError(f"partition {index} failed")
    return index, 1


@pytest.mark.parametrize("bad", ["first", "last"])
def test_a_failing_partition_task_fails_the_map_on_the_pool_and_here(monkeypatch, bad):
    """map_partitions shares the partitions between this process (from the last) and the pool (from
    the first): every result comes back in partition order, and a task failing on either side fails it."""
    label, options = next((label, options) for label, options in VARIANTS
                          if label.startswith("keyed-hashmap-savepoint:keyed:") and "flat" not in label)
    table = build_table(options)
    count = len(table.partitions)
    monkeypatch.setattr(pool, "SMALL_BYTES", 0)
    arguments = [(index, -1) for index in range(count)]
    assert list(engine.map_partitions(table, _fail_on, workers=2, arguments=arguments)) == list(range(count))
    wrong = 0 if bad == "first" else count - 1
    with pytest.raises(ValueError, match=f"partition {wrong} failed"):
        list(engine.map_partitions(table, _fail_on, workers=2, arguments=[(index, wrong) for index in range(count)]))
