"""Rich consoles and the error path: every FStateError becomes one line on stderr and exit code 2,
also one raised inside a Spark worker (found in the text of the exception Spark wraps it in); the
top-level ``--debug`` prints the full trace first."""

from __future__ import annotations

import sys
import traceback
from contextlib import contextmanager

from rich.console import Console

from ..savepoint.errors import FStateError, from_spark

# Wide enough for uid hashes and types when the output is a file or a pipe, not a terminal.
out = Console(highlight=False, width=None if sys.stdout.isatty() else 220)
err = Console(stderr=True, highlight=False, soft_wrap=True)

EXIT_BAD_INPUT = 2
#: Spark's own log level in the CLI's session: its ERROR lines repeat a worker's traceback (shown
#: once, with --debug) before the one-line error.
SPARK_LOG_LEVEL, SPARK_DEBUG_LOG_LEVEL = "OFF", "WARN"


class _Settings:
    debug = False


def set_debug(enabled: bool) -> None:
    """``--debug``: errors print their full trace (Python and Java) before the one-line message."""
    _Settings.debug = enabled


def debugging() -> bool:
    return _Settings.debug


def spark_log_level() -> str:
    return SPARK_DEBUG_LOG_LEVEL if _Settings.debug else SPARK_LOG_LEVEL


def fail(message: str) -> None:
    err.print(f"[bold red]error:[/] {message}", markup=True, highlight=False)
    raise SystemExit(EXIT_BAD_INPUT)


def error_from_spark(exc: BaseException) -> str | None:
    """The one-line message of the fstate error raised inside a Spark worker that ``exc`` (Spark's
    exception around it) carries (:func:`..savepoint.errors.from_spark`), or None."""
    error = from_spark(exc)
    return str(error) if error is not None else None


def _show_trace() -> None:
    if _Settings.debug:
        err.print(traceback.format_exc(), markup=False, highlight=False, end="")


@contextmanager
def user_errors():
    """Turn input errors (ours, or ours inside Spark) into a one-line message and exit code 2."""
    try:
        yield
    except FStateError as e:
        _show_trace()
        fail(str(e))
    except KeyboardInterrupt:
        err.print("interrupted")
        raise SystemExit(130) from None
    except Exception as e:  # Spark wraps worker exceptions; unwrap ours, let real bugs through
        msg = error_from_spark(e)
        if msg is None:
            raise
        _show_trace()
        fail(msg)


def progress(description: str):
    """A transient spinner for long work (shown only on a terminal)."""
    return err.status(description, spinner="dots") if sys.stderr.isatty() else _NullStatus()


class _NullStatus:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False

    def update(self, *a, **k):
        pass


class _Quiet:
    enabled = False


def set_quiet(quiet: bool) -> None:
    """``--quiet``: no progress bars."""
    _Quiet.enabled = quiet


@contextmanager
def progress_bar(description: str, total_bytes: int):
    """A transient bar for a long read (rows, bytes of state, time left), on a terminal unless
    ``--quiet``; yields ``advance(rows, state_bytes)``."""
    if _Quiet.enabled or not sys.stderr.isatty() or not total_bytes:
        yield lambda rows, state_bytes: None
        return
    from rich.progress import (BarColumn, DownloadColumn, Progress, TextColumn, TimeElapsedColumn,
                               TimeRemainingColumn)

    counted = {"rows": 0}
    with Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(binary_units=True),
                  TextColumn("{task.fields[rows]:,} rows"), TimeElapsedColumn(), TextColumn("left"),
                  TimeRemainingColumn(), console=err, transient=True) as bar:
        task = bar.add_task(description, total=total_bytes, rows=0)

        def advance(rows: int, state_bytes: int) -> None:
            counted["rows"] += rows
            bar.update(task, advance=state_bytes, rows=counted["rows"])

        yield advance
