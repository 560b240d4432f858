"""Options and argument parsing shared by several commands, and the per-invocation Output."""

from __future__ import annotations

from typing import Callable, Optional

import typer

from ..savepoint.errors import InvalidArgumentError
from .console import debugging, progress, spark_log_level
from .output import OUTPUTS, Output

NO_VERIFY = typer.Option(
    False, "--no-verify",
    help="Write without first checking the new savepoint as `fstate verify` does (by default a savepoint that "
         "fails the check is not written).")
ALLOW_EXTERNAL = typer.Option(
    False, "--allow-external-paths",
    help="Follow state handles that point outside the savepoint directory (absolute paths, '..', symlinks "
         "leading out): shallow copies made by `fstate modify`. A chk-N's own job shared/ and taskowned/ "
         "count as inside.")
CHECKPOINT_BASE_DIR = typer.Option(
    None, "--checkpoint-base-dir", metavar="DIR",
    help="New location of the job's checkpoint directory (the one holding shared/ and chk-N/) when it was "
         "moved: RocksDB incremental checkpoints refer to shared/ files by absolute paths.")
FS_OPTION = typer.Option(
    None, "--fs-option", metavar="KEY=VALUE",
    help="File-system option KEY=VALUE for s3://, s3a://, gs://, hdfs:// paths (repeatable): endpoint, region, "
         "path_style, access_key, secret_key, session_token, profile, anonymous, retries, ... (Flink/Hadoop "
         "spellings such as s3.endpoint or fs.s3a.path.style.access work too).")
FS_CONFIG = typer.Option(
    None, "--fs-config", metavar="FILE",
    help="YAML file of file-system options (as --fs-option; nested keys join with '.').")
MASTER = typer.Option(None, "--master", metavar="URL", help="Spark master (default local[*]).")
CONF = typer.Option(None, "--conf", metavar="KEY=VALUE", help="Spark configuration key=value (repeatable).")
ENGINE = typer.Option(
    "auto", "--engine", metavar="ENGINE",
    help="auto, embedded or spark. embedded reads and writes on this machine with pyarrow and a process pool, "
         "and runs SQL with DuckDB (no JVM); spark runs a Spark task a partition (read --out: each writes its part "
         "file as embedded does, the same files; modify and bootstrap write the same savepoint on either); auto "
         "(default) uses Spark when --master or --conf is given or the state to read (bootstrap: its source "
         "files) is above 1 GiB.")
QUIET = typer.Option(False, "--quiet", "-q", help="No progress bar.")
JSON = typer.Option(False, "--json", help="Print JSON (the same as `fstate --output json`).")
PLAN = typer.Option(
    None, "--plan", metavar="PLAN.json",
    help="The SQL job's compiled plan (Flink's COMPILE PLAN JSON): names its operators and their key, "
         "accumulator and row fields. A plan of another job is refused.")

_OUTPUT_KEY = "fstate.output"


def choose_output(context: typer.Context, name: str) -> None:
    """Called once, by the top-level options: which Output this invocation uses."""
    context.meta[_OUTPUT_KEY] = name


def output(context: typer.Context, json_alias: bool = False) -> Output:
    """The invocation's Output: --output (default table), or JSON when a command's own --json is given."""
    chosen = context.meta.get(_OUTPUT_KEY, "table")
    if isinstance(chosen, Output):
        return chosen
    instance = OUTPUTS["json" if json_alias else chosen]()
    context.meta[_OUTPUT_KEY] = instance
    return instance


def apply_fs_options(context: typer.Context | None, fs_option: list[str] | None, fs_config: str | None) -> tuple:
    """Make --fs-config/--fs-option the process defaults (also for the Spark processes started later)
    until ``context``'s command ends: run in-process (a test, a notebook), it leaves the defaults as it
    found them. Without a context they stay."""
    from ..savepoint.io import (default_fs_options, load_fs_config, parse_fs_option_args, resolve_fs_options,
                                set_default_fs_options)

    options = dict(load_fs_config(fs_config)) if fs_config else {}
    options.update(parse_fs_option_args(fs_option))
    if options:
        if context is None:
            set_default_fs_options(options, export_env=True)
        else:
            context.with_resource(default_fs_options(options, export_env=True))
    return resolve_fs_options()


def start_spark(master: str | None, conf_map: dict[str, str], tasks_only: bool = False):
    """The active SparkSession, or a new one for --master/--conf, with a spinner while it starts.
    Spark's own logging is off (WARN with --debug), and so is PySpark's record of every failed query
    (its query-context loggers): errors reach the user as fstate's one line."""
    with progress("starting Spark"):
        import logging

        from pyspark.logger import PySparkLogger

        from ..readers.session import get_spark

        spark = get_spark(master, conf_map, tasks_only=tasks_only)
        spark.sparkContext.setLogLevel(spark_log_level())
        for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
            PySparkLogger.getLogger(name).setLevel(logging.WARNING if debugging() else logging.CRITICAL + 1)
        return spark


def parse_conf(conf: list[str] | None) -> dict[str, str]:
    result = {}
    for item in conf or []:
        key, separator, value = item.partition("=")
        if not separator or not key:
            raise InvalidArgumentError(f"--conf expects key=value, got '{item}'")
        result[key.strip()] = value.strip()
    return result


def parse_pairs(items: list[str] | None, what: str, separator: str = "=") -> list[tuple[str, str]]:
    pairs = []
    for item in items or []:
        left, found, right = item.partition(separator)
        if not found or not left or not right:
            raise InvalidArgumentError(f"{what} expects A{separator}B, got '{item}'")
        pairs.append((left.strip(), right.strip()))
    return pairs


def parse_int(text: str, what: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise InvalidArgumentError(f"{what} expects a number, got '{text}'") from None


def engine_for(engine: str, master: Optional[str], conf_map: dict, out_dir: Optional[str],
               state_bytes: Callable[[], int], by_size: bool = True) -> str:
    """The engine of a command that reads or writes state (``read``, ``sql``, ``modify``, ``bootstrap``):
    Spark when asked for (``--engine spark``, ``--master``, ``--conf``), for a remote ``--out``, or (auto)
    when ``state_bytes()``, the state it reads (a bootstrap: its source files), is above the size
    threshold (``by_size`` False: never for its size); else the embedded engine. ``state_bytes`` is
    called only when the choice depends on it."""
    from ..readers.engine import choose_engine
    from ..savepoint.io import is_remote

    spark_asked = master is not None or bool(conf_map)
    if engine == "auto" and out_dir and is_remote(out_dir):
        spark_asked = True
    if choose_engine(engine, spark_asked, 0) == "spark":
        return "spark"
    return choose_engine(engine, spark_asked, state_bytes, by_size)
