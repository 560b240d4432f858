"""Commands that write savepoints: bootstrap, modify, upgrade, relocate."""

from __future__ import annotations

import re
import warnings
from typing import Optional

import typer

from .console import progress, user_errors
from .options import (ALLOW_EXTERNAL, CONF, ENGINE, FS_CONFIG, FS_OPTION, MASTER, NO_VERIFY, apply_fs_options, engine_for,
                      output, parse_conf, parse_int, parse_pairs, start_spark)

OUT_DIR = typer.Option(..., "--out", "-o", metavar="DIR", help="Directory of the new savepoint.")
OVERWRITE = typer.Option(False, "--overwrite", help="Replace an existing savepoint at --out.")
FLINK_VERSION_HELP = ("The Flink release that restores the new savepoint (1.16 to 1.20 read metadata V4, "
                      "2.0 V5, 2.1 and later V6); {default}.")


def bootstrap(
    context: typer.Context,
    spec: str = typer.Option(..., "--spec", metavar="FILE",
                             help="YAML spec: operators, their states and data sources."),
    out_dir: str = OUT_DIR,
    flink_version: Optional[str] = typer.Option(
        None, "--flink-version", metavar="X.Y",
        help=FLINK_VERSION_HELP.format(default="default: the spec's flink_version, else 2.3")),
    overwrite: bool = OVERWRITE,
    no_verify: bool = NO_VERIFY,
    master: Optional[str] = MASTER,
    conf: Optional[list[str]] = CONF,
    fs_option: Optional[list[str]] = FS_OPTION,
    fs_config: Optional[str] = FS_CONFIG,
    engine: str = ENGINE,
) -> None:
    """A new savepoint from Parquet/CSV/JSON/ORC files or Spark SQL, restorable by Flink."""
    with user_errors():
        shown = output(context)
        apply_fs_options(context, fs_option, fs_config)
        from ..savepoint.builder import ensure_writable_target, metadata_version_for
        from ..writers.bootstrap import check_target_outside_sources, load_spec, source_bytes, writer_from_spec

        spec_data = load_spec(spec)
        if flink_version:
            metadata_version_for(flink_version)  # a bad version fails before Spark starts
        ensure_writable_target(out_dir, overwrite)
        check_target_outside_sources(out_dir, spec_data, spec)
        conf_map = parse_conf(conf)
        session = _session(engine_for(engine, master, conf_map, out_dir, lambda: source_bytes(spec_data, spec)),
                           master, conf_map)
        writer = writer_from_spec(spec_data, spec, session, flink_version)
        with progress(f"writing savepoint {out_dir}"):
            path = writer.write(out_dir, overwrite=overwrite, verify=not no_verify)
        shown.message(f"wrote savepoint {path}")


def _session(engine: str, master: Optional[str], conf_map: dict):
    """What reads a write's sources: a SparkSession, or the embedded engine's SQL session (no JVM)."""
    if engine == "spark":
        return start_spark(master, conf_map)
    from ..writers.arrow_frames import SqlSession

    return SqlSession()


def modify(
    context: typer.Context,
    base: str = typer.Argument(..., help="The savepoint to derive from (never changed)."),
    out_dir: str = OUT_DIR,
    remove: Optional[list[str]] = typer.Option(None, "--remove", metavar="UID",
                                               help="Drop an operator's state (uid or hash)."),
    rename: Optional[list[str]] = typer.Option(None, "--rename", metavar="OLD=NEW",
                                               help="OLD=NEW: state of uid/hash OLD under uid NEW."),
    max_parallelism: Optional[list[str]] = typer.Option(
        None, "--max-parallelism", metavar="[UID=]N",
        help="N: the max parallelism of every operator (Flink checks it on every operator of a task, stateless "
             "ones too); UID=N: of one operator (warns when others then differ). Keyed state is re-assigned to "
             "N key groups."),
    parallelism: Optional[list[str]] = typer.Option(None, "--parallelism", metavar="UID=N",
                                                    help="UID=N: split/merge operator list state over N subtasks."),
    transform: Optional[list[str]] = typer.Option(
        None, "--transform", metavar="UID:STATE=SQL",
        help="UID:STATE=SQL over the view `state` (columns key and STATE)."),
    spec: Optional[str] = typer.Option(None, "--add", metavar="FILE",
                                       help="A bootstrap YAML spec of operators to add or replace."),
    deep: bool = typer.Option(False, "--deep", help="Copy BASE's files instead of pointing at them."),
    allow_external_paths: bool = ALLOW_EXTERNAL,
    flink_version: Optional[str] = typer.Option(
        None, "--flink-version", metavar="X.Y",
        help=FLINK_VERSION_HELP.format(default="default: the release that wrote BASE")),
    overwrite: bool = OVERWRITE,
    no_verify: bool = NO_VERIFY,
    master: Optional[str] = MASTER,
    conf: Optional[list[str]] = CONF,
    fs_option: Optional[list[str]] = FS_OPTION,
    fs_config: Optional[str] = FS_CONFIG,
    engine: str = ENGINE,
) -> None:
    """A new savepoint derived from BASE; untouched operators are shallow copies of BASE's state."""
    with user_errors():
        shown = output(context)
        apply_fs_options(context, fs_option, fs_config)
        from ..savepoint.builder import ensure_writable_target
        from ..savepoint.errors import FStateWarning, InvalidArgumentError
        from ..writers.modify import SavepointModifier, dependencies

        ensure_writable_target(out_dir, overwrite)
        conf_map = parse_conf(conf)
        modifier = SavepointModifier(base, flink_version=flink_version, allow_external_paths=allow_external_paths)
        modifier.check_target(out_dir)
        for uid in remove or []:
            modifier.remove_operator(uid)
        for old, new in parse_pairs(rename, "--rename"):
            modifier.rename_uid(old, new)
        for item in max_parallelism or []:
            if "=" in item:
                uid, n = parse_pairs([item], "--max-parallelism")[0]
                modifier.set_max_parallelism(uid, parse_int(n, "--max-parallelism"))
            else:
                modifier.set_max_parallelism_of_all(parse_int(item.strip(), "--max-parallelism"))
        for uid, n in parse_pairs(parallelism, "--parallelism"):
            modifier.set_parallelism(uid, parse_int(n, "--parallelism"))
        for item in transform or []:
            target, has_sql, query = item.partition("=")
            uid, has_state, state = target.partition(":")
            if not (has_sql and has_state and uid and state and query):
                raise InvalidArgumentError(f"--transform expects UID:STATE=SQL, got '{item}'")
            modifier.transform_state(uid, state, sql=query)
        spec_data = None
        if spec:
            from ..writers.bootstrap import load_spec, writer_from_spec

            spec_data = load_spec(spec)
        # everything that needs no engine is checked before one starts: conflicts of the operations
        if modifier.needs_spark or spec_data is not None:
            chosen = engine_for(engine, master, conf_map, out_dir, modifier.rewritten_bytes)
            # a session started here (--master/--conf) is the active one the modifier then takes
            session = _session(chosen, master, conf_map)
            modifier.engine = chosen
            if chosen == "spark":
                modifier.spark = session
            if spec_data is not None:
                modifier.writer.include(writer_from_spec(spec_data, spec, session))
        shown_already = modifier.plan().warnings()
        for message in shown_already:
            shown.warning(message)
        with progress(f"writing savepoint {out_dir}"), warnings.catch_warnings():
            for message in shown_already:  # shown above, once; others (e.g. of transforms) show as they come
                warnings.filterwarnings("ignore", message=re.escape(message), category=FStateWarning)
            path = modifier.write(out_dir, deep=deep, overwrite=overwrite, verify=not no_verify)
        shown.message(f"wrote savepoint {path}")
        referenced = dependencies(path)
        if referenced:
            shown.message("[yellow]it refers to files of:[/] " + ", ".join(sorted(referenced))
                          + " — deleting those breaks it (use --deep for a self-contained copy)")


def upgrade(
    context: typer.Context,
    old: str = typer.Argument(..., help="The savepoint of the old job (never changed)."),
    out_dir: Optional[str] = typer.Option(None, "--out", "-o", metavar="DIR",
                                          help="Directory of the new savepoint (not with --check)."),
    old_plan: Optional[str] = typer.Option(None, "--old-plan", metavar="FILE",
                                           help="The old SQL job's COMPILE PLAN JSON."),
    new_plan: Optional[str] = typer.Option(None, "--new-plan", metavar="FILE",
                                           help="The new SQL job's COMPILE PLAN JSON."),
    template: Optional[str] = typer.Option(
        None, "--template", metavar="DIR",
        help="A savepoint the new job took right after starting without state: its operator ids, parallelism, "
             "serializers and Flink release (needed without SQL uids, and to re-encode state)."),
    flink_version: Optional[str] = typer.Option(
        None, "--flink-version", metavar="X.Y",
        help=FLINK_VERSION_HELP.format(default="default: the template's, else the old savepoint's")),
    check: bool = typer.Option(False, "--check", help="Only show what happens to each operator's state; exit 0 "
                               "when everything carries, 1 when some starts empty or is dropped, 2 when refused."),
    allow_empty: bool = typer.Option(False, "--allow-empty", help="Write even when some state starts empty "
                                     "(new operators, new accumulators or fields)."),
    allow_drop: bool = typer.Option(False, "--allow-drop", help="Write even when some state is dropped."),
    allow_external_paths: bool = ALLOW_EXTERNAL,
    overwrite: bool = OVERWRITE,
    no_verify: bool = NO_VERIFY,
) -> None:
    """Carry a savepoint to a changed SQL query or another Flink release: what happens to each operator's state."""
    with user_errors():
        shown = output(context)
        from ..savepoint.builder import ensure_writable_target
        from ..savepoint.errors import InvalidArgumentError
        from ..writers.upgrade import SavepointUpgrader

        if check == (out_dir is not None):
            raise InvalidArgumentError("give --out DIR to write the new savepoint, or --check to only see the plan")
        if out_dir is not None:
            ensure_writable_target(out_dir, overwrite)
        upgrader = SavepointUpgrader(old, old_plan=old_plan, new_plan=new_plan, template=template,
                                     flink_version=flink_version, allow_external_paths=allow_external_paths)
        report = upgrader.report()
        shown.upgrade_report(report)
        if check:
            raise typer.Exit(report.exit_code)
        with progress(f"writing savepoint {out_dir}"):
            path = upgrader.write(out_dir, allow_empty=allow_empty, allow_drop=allow_drop, overwrite=overwrite,
                                  verify=not no_verify)
        shown.message(f"wrote savepoint {path}" + ("" if no_verify else " (verified)"))


def relocate(
    context: typer.Context,
    path: str = typer.Argument(..., help="Savepoint or checkpoint whose _metadata to rewrite."),
    old: str = typer.Option(..., "--from", metavar="PREFIX", help="Path prefix as recorded in _metadata."),
    new: str = typer.Option(..., "--to", metavar="PREFIX", help="Where those files are now."),
    backup: bool = typer.Option(True, "--backup/--no-backup", help="Keep _metadata.before-relocate."),
    allow_external_paths: bool = ALLOW_EXTERNAL,
    fs_option: Optional[list[str]] = FS_OPTION,
    fs_config: Optional[str] = FS_CONFIG,
) -> None:
    """Rewrite absolute paths in _metadata after files were moved (another directory or bucket)."""
    with user_errors():
        shown = output(context)
        apply_fs_options(context, fs_option, fs_config)
        from ..writers.modify import relocate as relocate_paths

        count = relocate_paths(path, old, new, backup=backup, allow_external_paths=allow_external_paths)
        shown.message(f"rewrote {count} path(s)" if count else f"no path starts with {old}: nothing changed")
