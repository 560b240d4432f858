"""``fstate sizes``: where the state of a savepoint is, measured in this process (and its pool) or a
Spark task a piece (``--engine``, chosen as ``read`` chooses: :func:`.options.engine_for`)."""

from __future__ import annotations

import datetime
from typing import Optional

import typer

from ..savepoint.errors import InvalidArgumentError
from .console import progress, user_errors
from .options import (ALLOW_EXTERNAL, CHECKPOINT_BASE_DIR, CONF, ENGINE, FS_CONFIG, FS_OPTION, JSON, MASTER, PLAN,
                      apply_fs_options, engine_for, output, parse_conf, start_spark)


def sizes(
    context: typer.Context,
    path: str = typer.Argument(..., help="Savepoint or checkpoint (with NEW: the older one)."),
    new: Optional[str] = typer.Argument(None, metavar="NEW",
                                        help="A newer snapshot of the same job: show what grew from PATH to NEW."),
    top: int = typer.Option(10, "--top", "-n", metavar="N", help="The N largest keys of each state."),
    parallelism: Optional[str] = typer.Option(
        None, "--parallelism", "-p", metavar="P",
        help="Rescale preview: the state each subtask would own at P (a number, a list 2,4,8 or a range 1..64), "
             "per operator and for the whole job (a slot: subtask i of every operator), and the best P (the "
             "smallest whose heaviest subtask or slot holds the least)."),
    at: Optional[str] = typer.Option(
        None, "--at", metavar="TIME",
        help="When TTL state counts as expired: epoch milliseconds or an ISO date-time (UTC unless it says); "
             "default now."),
    ttl: Optional[str] = typer.Option(
        None, "--ttl", metavar="DURATION",
        help="The TTL of the job's TTL states (1h, 30min, 90s, 500ms): snapshots do not record it (an SQL job's "
             "--plan does). With it, the entries and bytes already expired at --at are counted."),
    operator: Optional[list[str]] = typer.Option(None, "--operator", metavar="UID",
                                                 help="Only this operator (uid or uid hash; repeatable)."),
    html: Optional[str] = typer.Option(None, "--html", metavar="FILE",
                                       help="Also write the report as one self-contained HTML page."),
    json_alias: bool = JSON,
    plan: Optional[str] = PLAN,
    allow_external_paths: bool = ALLOW_EXTERNAL,
    checkpoint_base_dir: Optional[str] = CHECKPOINT_BASE_DIR,
    fs_option: Optional[list[str]] = FS_OPTION,
    fs_config: Optional[str] = FS_CONFIG,
    engine: str = ENGINE,
    master: Optional[str] = MASTER,
    conf: Optional[list[str]] = CONF,
) -> None:
    """Where the state is: bytes and entries per operator, state, subtask and key group, the largest
    keys, skew, a rescale preview and expired TTL state; with NEW, what grew."""
    with user_errors():
        shown = output(context, json_alias)
        apply_fs_options(context, fs_option, fs_config)
        from ..readers.sizes import MEASURED_BY_SIZE, chosen_operators, state_bytes, state_sizes
        from ..readers.sizes_growth import state_growth
        from ..readers.sizes_stats import parse_duration_ms, parse_parallelisms
        from ..savepoint.loader import Savepoint

        def opened(where: str) -> Savepoint:
            return Savepoint.open(where, allow_external_paths=allow_external_paths,
                                  checkpoint_base_dir=checkpoint_base_dir)

        parallelisms = parse_parallelisms(parallelism) if parallelism else []
        ttl_ms = parse_duration_ms(ttl) if ttl else None
        at_ms = parse_time_ms(at) if at else None
        snapshots = [opened(path)] + ([opened(new)] if new is not None else [])
        conf_map = parse_conf(conf)
        chosen = engine_for(engine, master, conf_map, None,
                            lambda: sum(state_bytes(chosen_operators(s, operator, new is None)) for s in snapshots),
                            by_size=new is not None or MEASURED_BY_SIZE)
        on = {"engine": chosen, "spark": start_spark(master, conf_map, tasks_only=True) if chosen == "spark" else None}
        with progress("measuring state"):
            if new is not None:
                report = state_growth(*snapshots, top=top, plan=plan, operators=operator, **on)
            else:
                report = state_sizes(snapshots[0], top=top, parallelisms=parallelisms, at=at_ms, ttl_ms=ttl_ms,
                                     plan=plan, operators=operator, **on)
        if html:
            _write_html(html, report.to_html())
            shown.message(f"wrote {html}")
        if new is not None:
            shown.sizes_growth(report.to_dict())
        else:
            shown.sizes(report.to_dict())


def parse_time_ms(text: str) -> int:
    """``--at``: epoch milliseconds, or an ISO date-time (UTC when it names no zone)."""
    stripped = text.strip()
    if stripped.lstrip("-").isdigit():
        return int(stripped)
    try:
        moment = datetime.datetime.fromisoformat(stripped.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidArgumentError(f"--at expects epoch milliseconds or an ISO date-time, got '{text}'") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.timezone.utc)
    return int(moment.timestamp() * 1000)


def _write_html(path: str, page: str) -> None:
    try:
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(page)
    except OSError as e:
        raise InvalidArgumentError(f"{path}: cannot write the HTML report ({e.strerror or e})") from None
