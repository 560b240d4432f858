"""Rich consoles and the error path: every FStateError becomes one line on stderr and exit code 2."""

from __future__ import annotations

import re
import sys
from contextlib import contextmanager

from rich.console import Console

from ..savepoint.errors import FStateError

# Wide enough for uid hashes and types when the output is a file or a pipe, not a terminal.
out = Console(highlight=False, width=None if sys.stdout.isatty() else 220)
err = Console(stderr=True, highlight=False, soft_wrap=True)

EXIT_BAD_INPUT = 2
_WORKER_ERROR = re.compile(r"fstate\.savepoint\.errors\.(\w+): (.+)")


def fail(message: str) -> None:
    err.print(f"[bold red]error:[/] {message}", markup=True, highlight=False)
    raise SystemExit(EXIT_BAD_INPUT)


def error_from_spark(exc: BaseException) -> str | None:
    """An fstate error raised inside a Spark worker arrives wrapped in Spark's exception text."""
    text = str(exc)
    m = _WORKER_ERROR.search(text)
    return m.group(2).strip() if m else None


@contextmanager
def user_errors():
    """Turn input errors (ours, or ours inside Spark) into a one-line message and exit code 2."""
    try:
        yield
    except FStateError as e:
        fail(str(e))
    except KeyboardInterrupt:
        err.print("interrupted")
        raise SystemExit(130) from None
    except Exception as e:  # Spark wraps worker exceptions; unwrap ours, let real bugs through
        msg = error_from_spark(e)
        if msg is None:
            raise
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
