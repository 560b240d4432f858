"""The package root's public API: every name in ``fstate.__all__`` resolves, lazily (importing fstate
and reaching its names starts no Spark)."""

from __future__ import annotations

import subprocess
import sys


def test_every_public_name_resolves_without_importing_spark():
    code = ("import sys, fstate\n"
            "names = [n for n in fstate.__all__ if n != '__version__']\n"
            "assert names and all(getattr(fstate, n) is not None for n in names)\n"
            "assert issubclass(fstate.InvalidArgumentError, fstate.FStateError)\n"
            "assert sorted(dir(fstate)) == sorted(fstate.__all__)\n"
            "print('pyspark' in sys.modules)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


def test_one_version():
    """The version is written once (fstate/__init__.py): the installed metadata and --version say it,
    also run from a source tree."""
    import tomllib
    from importlib.metadata import version
    from pathlib import Path

    import fstate
    from typer.testing import CliRunner

    from fstate.cli.app import app

    pyproject = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
    assert "version" not in pyproject["project"] and "version" in pyproject["project"]["dynamic"]
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "fstate.__version__"}
    assert version("fstate") == fstate.__version__
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output.strip() == f"fstate {fstate.__version__}"


def test_an_unknown_name_is_an_attribute_error():
    import fstate

    try:
        fstate.nope
    except AttributeError as e:
        assert "nope" in str(e)
    else:
        raise AssertionError("fstate.nope resolved")
