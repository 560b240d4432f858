"""The `fstate` command line."""

from __future__ import annotations

from typing import Optional

import typer

from .console import err, out, progress, user_errors
from .output import human_bytes, print_json, print_rows

app = typer.Typer(
    name="fstate",
    help="Read, write and modify Apache Flink savepoints and checkpoints with Spark.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

ALLOW_EXTERNAL = typer.Option(
    False, "--allow-external-paths",
    help="Follow state handles that point outside the savepoint directory (absolute paths, '..'): "
         "shallow copies made by `fstate modify`, RocksDB incremental checkpoints' shared files.")
CHECKPOINT_BASE_DIR = typer.Option(
    None, "--checkpoint-base-dir",
    help="New location of the job's checkpoint directory (the one holding shared/ and chk-N/) when it was "
         "moved: RocksDB incremental checkpoints refer to shared/ files by absolute paths.")


FS_OPTION = typer.Option(
    None, "--fs-option",
    help="File-system option KEY=VALUE for s3://, s3a://, gs://, hdfs:// paths (repeatable): endpoint, region, "
         "path_style, access_key, secret_key, session_token, profile, anonymous, retries, ... (Flink/Hadoop "
         "spellings such as s3.endpoint or fs.s3a.path.style.access work too).")
FS_CONFIG = typer.Option(
    None, "--fs-config", help="YAML file of file-system options (as --fs-option; nested keys join with '.').")


def _fs(fs_option: list[str] | None, fs_config: str | None) -> tuple:
    """Make --fs-config/--fs-option the process defaults (also for the Spark processes started later)."""
    from ..savepoint.io import load_fs_config, parse_fs_option_args, resolve_fs_options, set_default_fs_options

    options = dict(load_fs_config(fs_config)) if fs_config else {}
    options.update(parse_fs_option_args(fs_option))
    if options:
        set_default_fs_options(options, export_env=True)
    return resolve_fs_options()


MASTER = typer.Option(None, "--master", help="Spark master (default local[*]).")
CONF = typer.Option(None, "--conf", help="Spark configuration key=value (repeatable).")


def _start_spark(master: str | None, conf_map: dict[str, str]):
    """The active SparkSession, or a new one for --master/--conf, with a spinner while it starts."""
    with progress("starting Spark"):
        from ..readers.session import get_spark

        return get_spark(master, conf_map)


def _parse_conf(conf: list[str] | None) -> dict[str, str]:
    from ..savepoint.errors import InvalidArgumentError

    result = {}
    for item in conf or []:
        k, sep, v = item.partition("=")
        if not sep or not k:
            raise InvalidArgumentError(f"--conf expects key=value, got '{item}'")
        result[k.strip()] = v.strip()
    return result


@app.command()
def info(
    path: str = typer.Argument(..., help="Savepoint or checkpoint directory, its _metadata file, or a file: URI."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON instead of tables."),
    allow_external_paths: bool = ALLOW_EXTERNAL,
    checkpoint_base_dir: Optional[str] = CHECKPOINT_BASE_DIR,
    fs_option: Optional[list[str]] = FS_OPTION,
    fs_config: Optional[str] = FS_CONFIG,
) -> None:
    """What is in a savepoint: operators, parallelism, states with their kinds and types, sizes."""
    with user_errors():
        _fs(fs_option, fs_config)
        from ..savepoint.loader import Savepoint
        from ..savepoint.summary import summarize

        sp = Savepoint.open(path, allow_external_paths=allow_external_paths, checkpoint_base_dir=checkpoint_base_dir)
        data = summarize(sp)
        if json_out:
            print_json(data)
            return
        _print_info(data)


def _print_info(data: dict) -> None:
    from rich.table import Table

    kind = data["kind"] + (f" ({data['format'].lower()})" if data["format"] else "")
    out.print(f"[bold]{data['path']}[/]")
    out.print(f"  {kind}, checkpoint id {data['checkpoint_id']}, metadata version {data['metadata_version']} "
              f"(Flink {data['flink_versions']}), {len(data['operators'])} operators, "
              f"{human_bytes(data['total_state_bytes'])} of state")
    ops = Table(title="Operators", header_style="bold")
    for c in ("uid", "name", "uid hash", "par", "max par", "keyed state", "operator state", "storage"):
        ops.add_column(c, overflow="fold")
    for o in data["operators"]:
        storage = o["storage"]
        store = ", ".join(f"{v} {k}" for k, v in storage.items() if v) or "-"
        keyed = human_bytes(o["keyed_state_bytes"]) + (f" ({o['keyed_layout']})" if o["keyed_layout"] else "") \
            if o["keyed_state_bytes"] else "-"
        ops.add_row(o["uid"] or "-", o["name"] or "-", o["uid_hash"], str(o["parallelism"]),
                    str(o["max_parallelism"]), keyed,
                    human_bytes(o["operator_state_bytes"]) if o["operator_state_bytes"] else "-", store)
    out.print(ops)
    states = Table(title="States", header_style="bold")
    for c in ("operator", "state", "backend", "kind", "type", "key type", "namespace"):
        states.add_column(c, overflow="fold")
    for o in data["operators"]:
        for s in o["states"]:
            states.add_row(o["uid"] or o["uid_hash"], s["name"], s["backend"], s["kind"], s["type"],
                           s["key_type"] or "-", s["namespace"] or "-")
    out.print(states)
    for w in data["warnings"]:
        err.print(f"[yellow]warning:[/] {w}")
    for d, n in sorted(data.get("dependencies", {}).items()):
        err.print(f"[yellow]depends on[/] {d} ({n} file handles): deleting it breaks this savepoint")


@app.command()
def read(
    path: str = typer.Argument(..., help="Savepoint or checkpoint directory, its _metadata file, or a file: URI."),
    uid: str = typer.Option(..., "--uid", "-u", help="Operator uid (as in .uid()) or 32-hex-digit uid hash."),
    state: Optional[str] = typer.Option(None, "--state", "-s",
                                        help="State name (comma-separated keyed states narrow the keyed table)."),
    table: Optional[str] = typer.Option(None, "--table", "-t",
                                        help="list, broadcast, keyed or timers (default: keyed when the operator "
                                             "has keyed state, else the kind of --state)."),
    flat: bool = typer.Option(False, "--flat", help="Keyed: one row per list element or map entry (one --state)."),
    flatten: bool = typer.Option(False, "--flatten", help="Keyed: composite keys as key_f0, key_f1, ... columns."),
    limit: int = typer.Option(20, "--limit", "-n", help="Rows to show (without --out)."),
    out_dir: Optional[str] = typer.Option(None, "--out", "-o", help="Write the table to this directory."),
    fmt: str = typer.Option("parquet", "--format", "-f", help="parquet, csv or json (with --out)."),
    json_out: bool = typer.Option(False, "--json", help="Print rows as JSON lines instead of a table."),
    master: Optional[str] = MASTER,
    conf: Optional[list[str]] = CONF,
    allow_external_paths: bool = ALLOW_EXTERNAL,
    checkpoint_base_dir: Optional[str] = CHECKPOINT_BASE_DIR,
    fs_option: Optional[list[str]] = FS_OPTION,
    fs_config: Optional[str] = FS_CONFIG,
) -> None:
    """State as a table: operator list/union/broadcast state, the keyed table of an operator, or timers."""
    with user_errors():
        fs_options = _fs(fs_option, fs_config)
        from ..readers.datasource import FORMAT, build_table
        from ..readers.options import source_options
        from ..savepoint.errors import InvalidArgumentError

        if fmt not in ("parquet", "csv", "json"):
            raise InvalidArgumentError(f"--format must be parquet, csv or json, not '{fmt}'")
        options = source_options(path, uid, table=table, state=state, flat=flat, flatten=flatten,
                                 allow_external_paths=allow_external_paths, checkpoint_base_dir=checkpoint_base_dir,
                                 fs_options=fs_options)
        # Plan on the driver first: bad input fails here with a clear message, before Spark starts.
        planned = build_table(options)
        options["table"] = planned.kind
        conf_map = _parse_conf(conf)
        spark = _start_spark(master, conf_map)
        df = spark.read.format(FORMAT).options(**options).load()
        if out_dir:
            with progress(f"writing {fmt} to {out_dir}"):
                _write(df, out_dir, fmt)
            err.print(f"wrote {planned.name} ({', '.join(df.columns)}) as {fmt} to {out_dir}")
            return
        _show(df, limit, json_out, title=planned.name)


@app.command()
def bootstrap(
    spec: str = typer.Option(..., "--spec", help="YAML spec: operators, their states and data sources."),
    out_dir: str = typer.Option(..., "--out", "-o", help="Directory of the new savepoint."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing savepoint at --out."),
    master: Optional[str] = MASTER,
    conf: Optional[list[str]] = CONF,
    fs_option: Optional[list[str]] = FS_OPTION,
    fs_config: Optional[str] = FS_CONFIG,
) -> None:
    """A new savepoint from DataFrames (Parquet/CSV/JSON files or Spark SQL), restorable by Flink."""
    with user_errors():
        _fs(fs_option, fs_config)
        from ..savepoint.builder import ensure_writable_target
        from ..writers.bootstrap import load_spec, writer_from_spec

        spec_data = load_spec(spec)
        ensure_writable_target(out_dir, overwrite)
        conf_map = _parse_conf(conf)
        spark = _start_spark(master, conf_map)
        writer = writer_from_spec(spec_data, spec, spark)
        with progress(f"writing savepoint {out_dir}"):
            path = writer.write(out_dir, overwrite=overwrite)
        err.print(f"wrote savepoint {path}")


@app.command()
def sql(
    args: list[str] = typer.Argument(..., help="[ALIAS=]PATH ... then the query. With aliases, views are "
                                               "named ALIAS_<view>."),
    out_dir: Optional[str] = typer.Option(None, "--out", "-o", help="Write the result to this directory."),
    fmt: str = typer.Option("parquet", "--format", "-f", help="parquet, csv or json (with --out)."),
    limit: int = typer.Option(50, "--limit", "-n", help="Rows to show (without --out)."),
    json_out: bool = typer.Option(False, "--json", help="Print rows as JSON lines."),
    show_views: bool = typer.Option(False, "--views", help="List the registered views first."),
    allow_external_paths: bool = ALLOW_EXTERNAL,
    master: Optional[str] = MASTER,
    conf: Optional[list[str]] = CONF,
    fs_option: Optional[list[str]] = FS_OPTION,
    fs_config: Optional[str] = FS_CONFIG,
) -> None:
    """Spark SQL over all state tables of one or more savepoints (see `fstate views`)."""
    with user_errors():
        _fs(fs_option, fs_config)
        from ..readers.views import register_views
        from ..savepoint.errors import InvalidArgumentError

        if len(args) < 2:
            raise InvalidArgumentError("give at least one savepoint path and a query")
        *paths, query = args
        conf_map = _parse_conf(conf)
        spark = _start_spark(master, conf_map)
        registered = {}
        for item in paths:
            alias, eq, p = item.partition("=")
            if not eq or "/" in alias or not alias:
                alias, p = None, item
            registered.update(register_views(spark, p, alias, allow_external_paths=allow_external_paths))
        if show_views:
            print_rows(["view", "holds"], sorted(registered.items()), title="views")
        df = spark.sql(query)
        if out_dir:
            _write(df, out_dir, fmt)
            err.print(f"wrote {fmt} to {out_dir}")
            return
        _show(df, limit, json_out)


@app.command()
def views(path: str = typer.Argument(..., help="Savepoint or checkpoint."),
          fs_option: Optional[list[str]] = FS_OPTION, fs_config: Optional[str] = FS_CONFIG) -> None:
    """The view names `fstate sql` registers for a savepoint (no Spark needed)."""
    with user_errors():
        _fs(fs_option, fs_config)
        from ..readers.views import plan_views
        from ..savepoint.loader import Savepoint

        sp = Savepoint.open(path)
        print_rows(["view", "table", "operator", "state"],
                   [(v["view"], v["table"], sp.operator(v["uid"]).display_name if v["uid"] else "-", v["state"] or "-")
                    for v in plan_views(sp)])


@app.command()
def diff(
    old: str = typer.Argument(..., help="The older savepoint."),
    new: str = typer.Argument(..., help="The newer savepoint."),
    uid: Optional[str] = typer.Option(None, "--uid", "-u", help="Only this operator."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
    allow_external_paths: bool = ALLOW_EXTERNAL,
    master: Optional[str] = MASTER,
    conf: Optional[list[str]] = CONF,
    fs_option: Optional[list[str]] = FS_OPTION,
    fs_config: Optional[str] = FS_CONFIG,
) -> None:
    """Per state: rows added, removed and changed from OLD to NEW, with examples."""
    with user_errors():
        _fs(fs_option, fs_config)
        from ..readers.views import diff as do_diff

        conf_map = _parse_conf(conf)
        spark = _start_spark(master, conf_map)
        with progress("comparing"):
            result = do_diff(spark, old, new, uid, allow_external_paths=allow_external_paths)
        if json_out:
            print_json(result)
            return
        import json

        print_rows(["operator", "state", "table", "added", "removed", "changed", "examples"],
                   [(r["operator"], r["state"], r["table"], r["added"], r["removed"], r["changed"],
                     r["note"] or json.dumps(r["examples"][:2], ensure_ascii=False, default=str))
                    for r in result], title=f"{old} → {new}")


@app.command()
def verify(
    path: str = typer.Argument(..., help="Savepoint or checkpoint."),
    allow_external_paths: bool = ALLOW_EXTERNAL,
    files_only: bool = typer.Option(False, "--files-only", help="Check handles and files, do not decode state."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
    fs_option: Optional[list[str]] = FS_OPTION,
    fs_config: Optional[str] = FS_CONFIG,
) -> None:
    """Check that every handle resolves, every file has the bytes the handles claim, and every
    state decodes. Exit 0 if all holds, 1 listing each problem otherwise."""
    with user_errors():
        from ..savepoint.verify import verify as do_verify

        _fs(fs_option, fs_config)

        with progress("verifying"):
            report = do_verify(path, allow_external_paths=allow_external_paths, decode=not files_only)
        if json_out:
            print_json(report.to_dict())
        else:
            for p in report.problems:
                out.print(f"[red]✗[/] {p}")
            for o in report.operators:
                mark = "[green]✓[/]" if o.ok else "[red]✗[/]"
                out.print(f"{mark} {o.operator} ({len(o.checked)} checks)")
                for p in o.problems:
                    out.print(f"    [red]•[/] {p}")
            ext = sorted(set(report.external))
            if ext:
                out.print(f"[yellow]handles outside the savepoint directory:[/] {len(ext)} file(s), e.g. {ext[0]}")
            out.print("[green]OK[/]" if report.ok else "[red]PROBLEMS FOUND[/]")
        if not report.ok:
            raise typer.Exit(1)


def _pairs(items: list[str] | None, what: str, sep: str = "=") -> list[tuple[str, str]]:
    from ..savepoint.errors import InvalidArgumentError

    out = []
    for item in items or []:
        a, ok, b = item.partition(sep)
        if not ok or not a or not b:
            raise InvalidArgumentError(f"{what} expects A{sep}B, got '{item}'")
        out.append((a.strip(), b.strip()))
    return out


@app.command()
def modify(
    base: str = typer.Argument(..., help="The savepoint to derive from (never changed)."),
    out_dir: str = typer.Option(..., "--out", "-o", help="Directory of the new savepoint."),
    remove: Optional[list[str]] = typer.Option(None, "--remove", help="Drop an operator's state (uid or hash)."),
    rename: Optional[list[str]] = typer.Option(None, "--rename", help="OLD=NEW: state of uid/hash OLD under uid NEW."),
    max_parallelism: Optional[list[str]] = typer.Option(None, "--max-parallelism",
                                                        help="UID=N: re-assign keyed state to N key groups."),
    parallelism: Optional[list[str]] = typer.Option(None, "--parallelism",
                                                    help="UID=N: split/merge operator list state over N subtasks."),
    transform: Optional[list[str]] = typer.Option(
        None, "--transform", help="UID:STATE=SQL over the view `state` (columns key and STATE)."),
    spec: Optional[str] = typer.Option(None, "--add", help="A bootstrap YAML spec of operators to add or replace."),
    deep: bool = typer.Option(False, "--deep", help="Copy BASE's files instead of pointing at them."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing savepoint at --out."),
    master: Optional[str] = MASTER,
    conf: Optional[list[str]] = CONF,
    fs_option: Optional[list[str]] = FS_OPTION,
    fs_config: Optional[str] = FS_CONFIG,
) -> None:
    """A new savepoint derived from BASE; untouched operators are shallow copies of BASE's state."""
    with user_errors():
        _fs(fs_option, fs_config)
        from ..savepoint.builder import ensure_writable_target
        from ..savepoint.errors import InvalidArgumentError
        from ..writers.modify import SavepointModifier, dependencies

        ensure_writable_target(out_dir, overwrite)
        conf_map = _parse_conf(conf)
        m = SavepointModifier(base)
        for uid in remove or []:
            m.remove_operator(uid)
        for old, new in _pairs(rename, "--rename"):
            m.rename_uid(old, new)
        for uid, n in _pairs(max_parallelism, "--max-parallelism"):
            m.set_max_parallelism(uid, _int(n, "--max-parallelism"))
        for uid, n in _pairs(parallelism, "--parallelism"):
            m.set_parallelism(uid, _int(n, "--parallelism"))
        for item in transform or []:
            target, ok, sql = item.partition("=")
            uid, ok2, state = target.partition(":")
            if not (ok and ok2 and uid and state and sql):
                raise InvalidArgumentError(f"--transform expects UID:STATE=SQL, got '{item}'")
            m.transform_state(uid, state, sql=sql)
        needs_spark = bool(max_parallelism or transform or spec)
        if needs_spark:
            m._spark = _start_spark(master, conf_map)
            m.writer._spark = m._spark
        if spec:
            from ..writers.bootstrap import load_spec, writer_from_spec

            added = writer_from_spec(load_spec(spec), spec, m._spark)
            m.writer._ops.update(added._ops)
        with progress(f"writing savepoint {out_dir}"):
            path = m.write(out_dir, deep=deep, overwrite=overwrite)
        err.print(f"wrote savepoint {path}")
        deps = dependencies(path)
        if deps:
            err.print("[yellow]it refers to files of:[/] " + ", ".join(sorted(deps))
                      + " — deleting those breaks it (use --deep for a self-contained copy)")


def _int(text: str, what: str) -> int:
    from ..savepoint.errors import InvalidArgumentError

    try:
        return int(text)
    except ValueError:
        raise InvalidArgumentError(f"{what} expects a number, got '{text}'") from None


@app.command()
def deps(
    path: str = typer.Argument(..., help="Savepoint or checkpoint."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
    fs_option: Optional[list[str]] = FS_OPTION,
    fs_config: Optional[str] = FS_CONFIG,
) -> None:
    """Directories outside PATH whose files PATH refers to (e.g. the base of a modified savepoint)."""
    with user_errors():
        _fs(fs_option, fs_config)
        from ..writers.modify import dependencies

        d = dependencies(path)
        if json_out:
            print_json({"path": path, "dependencies": d})
        elif not d:
            out.print("self-contained: no files outside the savepoint directory")
        else:
            print_rows(["directory", "handles"], sorted(d.items()), title="depends on")


@app.command()
def relocate(
    path: str = typer.Argument(..., help="Savepoint or checkpoint whose _metadata to rewrite."),
    old: str = typer.Option(..., "--from", help="Path prefix as recorded in _metadata."),
    new: str = typer.Option(..., "--to", help="Where those files are now."),
    backup: bool = typer.Option(True, "--backup/--no-backup", help="Keep _metadata.before-relocate."),
    fs_option: Optional[list[str]] = FS_OPTION,
    fs_config: Optional[str] = FS_CONFIG,
) -> None:
    """Rewrite absolute paths in _metadata after files were moved (another directory or bucket)."""
    with user_errors():
        _fs(fs_option, fs_config)
        from ..writers.modify import relocate as do_relocate

        n = do_relocate(path, old, new, backup=backup)
        err.print(f"rewrote {n} path(s)" if n else f"no path starts with {old}: nothing changed")


def _show(df, limit: int, json_out: bool, title: str | None = None) -> None:
    """The first ``limit`` rows of a DataFrame: a rich table, or JSON lines with --json."""
    rows = df.limit(limit).collect()
    if json_out:
        import json

        from .output import to_jsonable

        for r in rows:
            out.print(json.dumps(to_jsonable(r.asDict(recursive=True)), ensure_ascii=False), soft_wrap=True)
        return
    n = print_rows(df.columns, rows, title=title)
    if n == limit:
        err.print(f"(first {limit} rows; --limit to see more, --out to write all)")


def _write(df, out_dir: str, fmt: str) -> None:
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    from ..savepoint.errors import InvalidArgumentError
    from ..savepoint.io import io_for, strip_file_scheme

    if io_for(out_dir).exists(out_dir if "://" in out_dir else strip_file_scheme(out_dir)):
        raise InvalidArgumentError(f"output directory {out_dir} already exists")
    if fmt == "csv":
        # CSV holds no nested values: complex columns become JSON text, binary becomes base64.
        cols = []
        for f in df.schema.fields:
            if isinstance(f.dataType, (T.StructType, T.ArrayType, T.MapType)):
                cols.append(F.to_json(F.col(f.name)).alias(f.name))
            elif isinstance(f.dataType, T.BinaryType):
                cols.append(F.base64(F.col(f.name)).alias(f.name))
            else:
                cols.append(F.col(f.name))
        df = df.select(*cols)
        df.write.option("header", "true").csv(out_dir)
    else:
        df.write.format(fmt).save(out_dir)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
