"""Commands that read state: read, sql and diff, on the embedded engine or Spark (see ``--engine``)."""

from __future__ import annotations

import dataclasses
import functools
from typing import Optional

import typer

from .console import progress, progress_bar, set_quiet, user_errors
from .options import (ALLOW_EXTERNAL, CHECKPOINT_BASE_DIR, CONF, ENGINE, FS_CONFIG, FS_OPTION, JSON, MASTER, PLAN,
                      QUIET, apply_fs_options, engine_for, output, parse_conf, start_spark)
from .output import Output

FORMATS = ("parquet", "csv", "json")
MODES = ("error", "overwrite")
FORMAT = typer.Option("parquet", "--format", "-f", metavar="FORMAT", help="parquet, csv or json (with --out).")


def read(
    context: typer.Context,
    path: str = typer.Argument(..., help="Savepoint or checkpoint directory, its _metadata file, or a file: URI."),
    uid: str = typer.Option(..., "--uid", "-u", metavar="UID",
                            help="Operator uid (as in .uid()) or 32-hex-digit uid hash."),
    state: Optional[str] = typer.Option(None, "--state", "-s", metavar="NAME",
                                        help="State name (comma-separated keyed states narrow the keyed table)."),
    table: Optional[str] = typer.Option(None, "--table", "-t", metavar="TABLE",
                                        help="list, broadcast, keyed, timers, or matches (a CEP operator's pending "
                                             "partial matches) (default: keyed when the operator has keyed state, "
                                             "else the kind of --state)."),
    flat: bool = typer.Option(False, "--flat", help="Keyed: one row per list element or map entry (one --state)."),
    flatten: Optional[bool] = typer.Option(
        None, "--flatten/--no-flatten",
        help="Keyed: composite keys as key_f0, key_f1, ... columns (default: for SQL operators, whose key is a row)."),
    ttl_timestamps: bool = typer.Option(
        False, "--ttl-timestamps",
        help="Keyed: a TTL state's values (list elements, map values) as {value, ttl_timestamp}: the last access "
             "(epoch ms) Flink's TTL expires it by."),
    limit: int = typer.Option(20, "--limit", "-n", metavar="N", help="Rows to show (without --out)."),
    out_dir: Optional[str] = typer.Option(None, "--out", "-o", metavar="DIR",
                                          help="Write the table to this directory."),
    file_format: str = FORMAT,
    mode: str = typer.Option("error", "--mode", metavar="MODE",
                             help="With --out: error (refuse an existing DIR) or overwrite (replace it once the "
                                  "new table is complete)."),
    json_alias: bool = typer.Option(False, "--json", help="Print rows as JSON lines instead of a table "
                                                          "(the same as `fstate --output json`)."),
    master: Optional[str] = MASTER,
    conf: Optional[list[str]] = CONF,
    allow_external_paths: bool = ALLOW_EXTERNAL,
    checkpoint_base_dir: Optional[str] = CHECKPOINT_BASE_DIR,
    fs_option: Optional[list[str]] = FS_OPTION,
    fs_config: Optional[str] = FS_CONFIG,
    plan: Optional[str] = PLAN,
    engine: str = ENGINE,
    quiet: bool = QUIET,
) -> None:
    """State as a table: operator list/union/broadcast state, the keyed table of an operator, or timers."""
    with user_errors():
        set_quiet(quiet)
        shown = output(context, json_alias)
        fs_options = apply_fs_options(context, fs_option, fs_config)
        from ..readers.engine import table_bytes
        from ..readers.options import FORMAT as SOURCE_FORMAT
        from ..readers.options import SourceOptions
        from ..readers.planning import build_table
        from ..savepoint.errors import InvalidArgumentError
        from ..savepoint.io import is_remote

        if file_format not in FORMATS:
            raise InvalidArgumentError(f"--format must be parquet, csv or json, not '{file_format}'")
        if mode not in MODES:
            raise InvalidArgumentError(f"--mode must be error or overwrite, not '{mode}'")
        if out_dir:
            check_output_target(out_dir, overwrite=mode == "overwrite")
        source = SourceOptions(path, uid, table=table, state=state or None, flat=flat, flatten=flatten,
                               ttl_timestamps=ttl_timestamps,
                               allow_external_paths=allow_external_paths, checkpoint_base_dir=checkpoint_base_dir,
                               fs_options=dict(fs_options or {}), plan=plan or None)
        # Plan on the driver first: bad input fails here with a clear message, before Spark starts.
        planned = build_table(source)
        conf_map = parse_conf(conf)
        if engine_for(engine, master, conf_map, out_dir, lambda: table_bytes(planned)) == "embedded":
            read_embedded(shown, planned, limit, out_dir, file_format, overwrite=mode == "overwrite")
            return
        tasks_only = bool(out_dir) and not is_remote(out_dir)
        spark = start_spark(master, conf_map, tasks_only=tasks_only)
        if tasks_only:
            # one Spark task a partition, each writing its part file as the embedded engine does
            write_files(shown, planned, out_dir, file_format, overwrite=mode == "overwrite", spark=spark)
            return
        options = dataclasses.replace(source, table=planned.kind).spark_options()
        frame = spark.read.format(SOURCE_FORMAT).options(**options).load()
        if out_dir:
            with progress(f"writing {file_format} to {out_dir}"):
                write_frame(frame, out_dir, file_format, overwrite=mode == "overwrite")
            shown.message(f"wrote {planned.name} ({', '.join(frame.columns)}) as {file_format} to {out_dir}")
            return
        show_frame(shown, frame, limit, title=planned.name)


def read_embedded(shown: Output, planned, limit: int, out_dir: Optional[str], file_format: str,
                  overwrite: bool) -> None:
    """``fstate read`` without Spark: the first rows, or all of them written to ``out_dir``."""
    from ..readers import engine as embedded

    if not out_dir:
        shown.rows(planned.column_names, embedded.first_rows(planned, limit), title=planned.name, limit=limit)
        return
    _check_local(out_dir)
    write_files(shown, planned, out_dir, file_format, overwrite)


def _check_local(out_dir: str) -> None:
    from ..savepoint.errors import InvalidArgumentError
    from ..savepoint.io import is_remote

    if is_remote(out_dir):
        raise InvalidArgumentError(f"--engine embedded writes local directories only, not {out_dir} "
                                   "(--engine spark writes remote ones)")


def write_files(shown: Output, planned, out_dir: str, file_format: str, overwrite: bool, spark=None) -> None:
    """All rows of ``planned`` as files in the local directory ``out_dir``, with a progress bar: on the
    embedded engine's process pool, or one Spark task a partition when ``spark`` is given."""
    from ..readers.engine import table_bytes
    from ..readers.engine_files import write_table
    from ..savepoint.io import strip_file_scheme

    with progress_bar(f"writing {file_format}", table_bytes(planned)) as advance:
        write_table(planned, strip_file_scheme(out_dir), file_format, overwrite=overwrite, progress=advance,
                    spark=spark)
    shown.message(f"wrote {planned.name} ({', '.join(planned.column_names)}) as {file_format} to {out_dir}")


def sql(
    context: typer.Context,
    args: list[str] = typer.Argument(..., metavar="[ALIAS=]PATH... QUERY",
                                     help="[ALIAS=]PATH ... then the query. With aliases, views are "
                                          "named ALIAS_<view>."),
    out_dir: Optional[str] = typer.Option(None, "--out", "-o", metavar="DIR",
                                          help="Write the result to this directory."),
    file_format: str = FORMAT,
    limit: int = typer.Option(50, "--limit", "-n", metavar="N", help="Rows to show (without --out)."),
    json_alias: bool = typer.Option(False, "--json", help="Print rows as JSON lines "
                                                          "(the same as `fstate --output json`)."),
    show_views: bool = typer.Option(False, "--views", help="List the registered views first."),
    allow_external_paths: bool = ALLOW_EXTERNAL,
    master: Optional[str] = MASTER,
    conf: Optional[list[str]] = CONF,
    fs_option: Optional[list[str]] = FS_OPTION,
    fs_config: Optional[str] = FS_CONFIG,
    plan: Optional[str] = PLAN,
    engine: str = ENGINE,
    quiet: bool = QUIET,
) -> None:
    """Spark SQL over all state tables of one or more savepoints (see `fstate views`): run by DuckDB in
    this process (embedded engine, no JVM) or by Spark, as --engine says."""
    with user_errors():
        set_quiet(quiet)
        shown = output(context, json_alias)
        apply_fs_options(context, fs_option, fs_config)
        from ..readers.engine_sql import Catalog, Query
        from ..savepoint.errors import InvalidArgumentError

        if len(args) < 2:
            raise InvalidArgumentError("give at least one savepoint path and a query")
        *paths, text = args
        if file_format not in FORMATS:
            raise InvalidArgumentError(f"--format must be parquet, csv or json, not '{file_format}'")
        if out_dir:
            check_output_target(out_dir, overwrite=False)
        # the savepoints, their views and a --plan are checked here, before any engine starts
        catalog = Catalog()
        sources = [_sql_source(item) for item in paths]
        for alias, savepoint_path in sources:
            catalog.add(savepoint_path, alias, allow_external_paths=allow_external_paths, plan=plan)
        # parsed (with sqlglot) only for the embedded engine, or to learn which state it reads
        query = functools.cache(lambda: Query(catalog, text))
        conf_map = parse_conf(conf)
        if engine_for(engine, master, conf_map, out_dir, lambda: query().state_bytes()) == "embedded":
            sql_embedded(shown, query(), catalog.registered, show_views, out_dir, file_format, limit)
            return
        from ..readers.views import register_views, spark_sql_errors

        spark = start_spark(master, conf_map)
        registered = {}
        for alias, savepoint_path in sources:
            registered.update(register_views(spark, savepoint_path, alias, allow_external_paths=allow_external_paths,
                                             plan=plan))
        if show_views:
            shown.registered_views(registered)
        with spark_sql_errors(registered):
            frame = spark.sql(text)
            if out_dir:
                write_frame(frame, out_dir, file_format)
                shown.message(f"wrote {file_format} to {out_dir}")
                return
            show_frame(shown, frame, limit)


def _sql_source(item: str) -> tuple[Optional[str], str]:
    """``ALIAS=PATH`` or ``PATH``: (alias or None, path)."""
    alias, equals, savepoint_path = item.partition("=")
    if not equals or "/" in alias or not alias:
        return None, item
    return alias, savepoint_path


def sql_embedded(shown: Output, query, registered: dict[str, str], show_views: bool, out_dir: Optional[str],
                 file_format: str, limit: int) -> None:
    """``fstate sql`` without Spark (``readers.engine_sql``): the first rows, or all written to ``out_dir``
    with the embedded engine's writers."""
    from ..readers.engine_files import write_result
    from ..savepoint.io import strip_file_scheme

    if show_views:
        shown.registered_views(registered)
    with progress("running the query"):
        result = query.run()
        if not out_dir:
            rows = result.first_rows(limit)
    if not out_dir:
        shown.rows(result.columns, rows, limit=limit)
        return
    _check_local(out_dir)
    with progress(f"writing {file_format} to {out_dir}"):
        reader = result.reader()
        write_result(result.batches(reader), reader.schema, strip_file_scheme(out_dir), file_format)
    shown.message(f"wrote {file_format} to {out_dir}")


def diff(
    context: typer.Context,
    old: str = typer.Argument(..., help="The older savepoint."),
    new: str = typer.Argument(..., help="The newer savepoint."),
    uid: Optional[str] = typer.Option(None, "--uid", "-u", metavar="UID", help="Only this operator."),
    json_alias: bool = JSON,
    allow_external_paths: bool = ALLOW_EXTERNAL,
    master: Optional[str] = MASTER,
    conf: Optional[list[str]] = CONF,
    fs_option: Optional[list[str]] = FS_OPTION,
    fs_config: Optional[str] = FS_CONFIG,
    engine: str = ENGINE,
    quiet: bool = QUIET,
) -> None:
    """Per state: rows added, removed and changed from OLD to NEW, with examples. Exit 0 when they
    hold the same state, 1 when they differ, 2 on bad input."""
    with user_errors():
        set_quiet(quiet)
        shown = output(context, json_alias)
        apply_fs_options(context, fs_option, fs_config)
        from ..readers.engine import choose_engine
        from ..savepoint.loader import Savepoint
        from ..savepoint.summary import summarize

        # a bad path or metadata fails here, before Spark starts
        opened = [Savepoint.open(path, allow_external_paths=allow_external_paths) for path in (old, new)]
        conf_map = parse_conf(conf)
        state_bytes = sum(summarize(savepoint)["total_state_bytes"] for savepoint in opened)
        if choose_engine(engine, master is not None or bool(conf_map), state_bytes) == "embedded":
            from ..readers.engine_diff import diff as diff_embedded

            with progress_bar("comparing", state_bytes) as advance:
                result = diff_embedded(old, new, uid, allow_external_paths=allow_external_paths, progress=advance)
        else:
            from ..readers.views import diff as diff_savepoints

            spark = start_spark(master, conf_map)
            with progress("comparing"):
                result = diff_savepoints(spark, old, new, uid, allow_external_paths=allow_external_paths)
        shown.diff(old, new, result)
        if differs(result):
            raise typer.Exit(1)


def differs(result: list[dict]) -> bool:
    """Whether a diff found anything: a state on one side only, other columns, or rows that differ."""
    return any(row["note"] or row["added"] or row["removed"] or row["changed"] for row in result)


def show_frame(shown: Output, frame, limit: int, title: str | None = None) -> None:
    """The first ``limit`` rows of a DataFrame."""
    shown.rows(frame.columns, frame.limit(limit).collect(), title=title, limit=limit)


def check_output_target(out_dir: str, overwrite: bool) -> None:
    """Refuse an existing --out unless it is to be replaced (checked before Spark starts)."""
    from ..savepoint.errors import InvalidArgumentError
    from ..savepoint.io import io_for, is_remote, strip_file_scheme

    if not overwrite and io_for(out_dir).exists(out_dir if is_remote(out_dir) else strip_file_scheme(out_dir)):
        raise InvalidArgumentError(f"output directory {out_dir} already exists (--mode overwrite replaces it)")


def write_frame(frame, out_dir: str, file_format: str, overwrite: bool = False) -> None:
    """A DataFrame as parquet, csv or json files in a directory. Locally the files are written in a
    hidden sibling that becomes ``out_dir`` only when complete: a failure leaves nothing behind,
    and an overwritten directory stays until its replacement is in place."""
    from pyspark.sql import functions as spark_functions
    from pyspark.sql import types as spark_types

    from ..savepoint.atomic import StagedDirectory
    from ..savepoint.io import is_remote, strip_file_scheme

    check_output_target(out_dir, overwrite)
    if file_format == "csv":
        # CSV holds no nested values: complex columns become JSON text, binary becomes base64.
        columns = []
        for field in frame.schema.fields:
            column = spark_functions.col(field.name)
            if isinstance(field.dataType, (spark_types.StructType, spark_types.ArrayType, spark_types.MapType)):
                column = spark_functions.to_json(column).alias(field.name)
            elif isinstance(field.dataType, spark_types.BinaryType):
                column = spark_functions.base64(column).alias(field.name)
            columns.append(column)
        frame = frame.select(*columns)
        writer = frame.write.format("csv").option("header", "true")
    else:
        writer = frame.write.format(file_format)
    if file_format == "parquet":
        # timestamps as INT64 microseconds (the Parquet standard, and what the embedded engine writes),
        # not Spark's default INT96
        frame.sparkSession.conf.set("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
    if is_remote(out_dir):
        writer.mode("overwrite" if overwrite else "error").save(out_dir)
        return
    with StagedDirectory(strip_file_scheme(out_dir), overwrite, create=False,
                         exists_hint="--mode overwrite replaces it") as staged:
        try:
            writer.mode("error").save(staged.temp_dir)
        except BaseException:
            _settle(frame.sparkSession)  # the failed job's tasks finish before the staged directory goes
            raise


def _settle(spark, deadline_s: float = 60.0) -> None:
    """Wait until Spark runs no job and no task: after a failed write, the failed job's other tasks
    may still be writing into the staged directory (a killed task ends when its executor says so),
    which must be removed after them."""
    import time

    tracker = spark.sparkContext.statusTracker()
    end = time.monotonic() + deadline_s
    while time.monotonic() < end and (tracker.getActiveJobsIds() or tracker.getActiveStageIds()
                                       or any(e.numRunningTasks for e in tracker.getExecutorInfos())):
        time.sleep(0.05)
