"""Commands that look at a savepoint without Spark: info, views, deps, verify."""

from __future__ import annotations

from typing import Optional

import typer

from .console import progress, user_errors
from .options import ALLOW_EXTERNAL, CHECKPOINT_BASE_DIR, FS_CONFIG, FS_OPTION, JSON, PLAN, apply_fs_options, output

PATH = typer.Argument(..., help="Savepoint or checkpoint.")


def info(
    context: typer.Context,
    path: str = typer.Argument(..., help="Savepoint or checkpoint directory, its _metadata file, or a file: URI."),
    json_alias: bool = JSON,
    allow_external_paths: bool = ALLOW_EXTERNAL,
    checkpoint_base_dir: Optional[str] = CHECKPOINT_BASE_DIR,
    fs_option: Optional[list[str]] = FS_OPTION,
    fs_config: Optional[str] = FS_CONFIG,
    plan: Optional[str] = PLAN,
) -> None:
    """What is in a savepoint: operators, parallelism, states with their kinds and types, sizes."""
    with user_errors():
        shown = output(context, json_alias)
        apply_fs_options(context, fs_option, fs_config)
        from ..savepoint.loader import Savepoint
        from ..savepoint.summary import summarize

        from ..savepoint.sql_binding import load_binding

        savepoint = Savepoint.open(path, allow_external_paths=allow_external_paths,
                                   checkpoint_base_dir=checkpoint_base_dir)
        shown.summary(summarize(savepoint, load_binding(plan, savepoint) if plan else None))


def views(
    context: typer.Context,
    path: str = PATH,
    json_alias: bool = JSON,
    fs_option: Optional[list[str]] = FS_OPTION,
    fs_config: Optional[str] = FS_CONFIG,
    plan: Optional[str] = PLAN,
) -> None:
    """The view names `fstate sql` registers for a savepoint (no Spark needed)."""
    with user_errors():
        shown = output(context, json_alias)
        apply_fs_options(context, fs_option, fs_config)
        from ..readers.views import plan_views
        from ..savepoint.loader import Savepoint
        from ..savepoint.sql_binding import load_binding

        savepoint = Savepoint.open(path)
        binding = load_binding(plan, savepoint) if plan else None
        shown.views(path, [{"view": v["view"], "table": v["table"],
                            "operator": savepoint.operator(v["uid"]).display_name if v["uid"] else None,
                            "uid_hash": v["uid"], "state": v["state"]}
                           for v in plan_views(savepoint, plan=binding)])


def deps(
    context: typer.Context,
    path: str = PATH,
    json_alias: bool = JSON,
    fs_option: Optional[list[str]] = FS_OPTION,
    fs_config: Optional[str] = FS_CONFIG,
) -> None:
    """Directories outside PATH whose files PATH refers to (e.g. the base of a modified savepoint)."""
    with user_errors():
        shown = output(context, json_alias)
        apply_fs_options(context, fs_option, fs_config)
        from ..writers.modify import dependencies

        shown.dependencies(path, dependencies(path))


def verify(
    context: typer.Context,
    path: str = PATH,
    allow_external_paths: bool = ALLOW_EXTERNAL,
    files_only: bool = typer.Option(False, "--files-only", help="Check handles and files, do not decode state."),
    json_alias: bool = JSON,
    fs_option: Optional[list[str]] = FS_OPTION,
    fs_config: Optional[str] = FS_CONFIG,
) -> None:
    """Check that every handle resolves, every file has the bytes the handles claim, every state
    region decodes to exactly its declared bytes (offsets, lengths, key groups, counts), compressed
    chunks match their CRC32C, channel-state files exist and parallelism fits the max parallelism.
    A changed byte inside a fixed-width value cannot be found (Flink stores no checksums). Exit 0
    if all holds, 1 listing each problem otherwise."""
    with user_errors():
        shown = output(context, json_alias)
        from ..savepoint.verify import verify as verify_savepoint

        apply_fs_options(context, fs_option, fs_config)
        with progress("verifying"):
            report = verify_savepoint(path, allow_external_paths=allow_external_paths, decode=not files_only)
        shown.verify_report(report)
        if not report.ok:
            raise typer.Exit(1)
