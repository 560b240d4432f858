"""The `fstate` command: the typer app, its top-level options and its commands.

The commands live by what they do: ``inspect`` (info, views, deps, verify: no Spark), ``read`` (read,
sql, diff: Spark), ``write`` (bootstrap, modify, relocate). Results are shown by the ``output.Output``
the top-level ``--output`` chose.
"""

from __future__ import annotations

import enum
import os
import warnings

# numpy (which pyarrow imports) starts one OpenBLAS thread a core, which spin for a while on start-up:
# ~0.05 CPU-s in this process and in every worker spawned (they inherit the environment); fstate does
# no linear algebra. A value the user set stays.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import typer
from rich.markup import escape

from . import inspect, read, sizes, write
from ..savepoint.errors import FStateWarning
from .console import err, out, set_debug
from .help import ConventionalCommand, ConventionalGroup
from .options import choose_output
from .output import OUTPUTS

app = typer.Typer(
    name="fstate",
    cls=ConventionalGroup,
    help="Read, write and modify Apache Flink savepoints and checkpoints with Spark.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)

OutputFormat = enum.Enum("OutputFormat", {name: name for name in OUTPUTS}, type=str)


def _print_version(requested: bool) -> None:
    if requested:
        from .. import __version__  # the one place the version is written (pyproject.toml reads it too)

        out.print(f"fstate {__version__}")
        raise typer.Exit()


@app.callback()
def top_level(
    context: typer.Context,
    output_format: OutputFormat = typer.Option(
        next(iter(OUTPUTS)), "--output", case_sensitive=False,
        help="How results are printed: rich tables for people or JSON for programs."),
    json_alias: bool = typer.Option(False, "--json", help="The same as --output json."),
    show_version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                      help="Print fstate's version and exit."),
    debug: bool = typer.Option(False, "--debug",
                               help="On an error, print its full trace (Python, and Spark's Java stack) and "
                                    "Spark's warnings; without it an error is one line."),
) -> None:
    set_debug(debug)
    choose_output(context, "json" if json_alias else output_format.value)
    _warnings_as_lines()


def _warnings_as_lines() -> None:
    """fstate's warnings print as one line each on stderr (in every output format), not as Python's
    file:line: Category: text."""
    previous = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, FStateWarning):
            err.print(f"[yellow]warning:[/] {escape(str(message))}")
        else:
            previous(message, category, filename, lineno, file, line)

    warnings.showwarning = show


for command in (inspect.info, read.read, write.bootstrap, read.sql, inspect.views, read.diff, inspect.verify,
                write.modify, write.upgrade, inspect.deps, write.relocate, sizes.sizes):
    app.command(cls=ConventionalCommand)(command)


def main() -> None:
    _spawn_without_the_launcher()
    app(prog_name="fstate")


def _spawn_without_the_launcher() -> None:
    """A process pool's spawned worker first runs its parent's main script again (multiprocessing):
    here the console script, ``from fstate.cli.app import main``, which imports the whole CLI, typer
    and rich (~0.15 CPU-s a worker, and as much later at work). The launcher is marked as the
    package's ``__main__`` (what ``python -m fstate`` runs), which a worker leaves alone. Only a
    launcher that is nothing but a call of this function is marked."""
    import importlib.util
    import sys

    launcher = sys.modules.get("__main__")
    if launcher is not None and getattr(launcher, "__spec__", None) is None and getattr(launcher, "main", None) is main:
        launcher.__spec__ = importlib.util.find_spec("fstate.__main__")


if __name__ == "__main__":
    main()
