"""A savepoint whose handles are absolute paths into its own directory, moved elsewhere: every error
says that it looks moved and gives the `fstate relocate` command that fixes it, and that command does."""

from __future__ import annotations

import os
import shlex
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fstate.cli.app import app
from fstate.savepoint import handles
from fstate.savepoint.errors import MissingStateFileError
from fstate.savepoint.loader import Savepoint
from fstate.savepoint.metadata import map_subtask_stream_handles, read_metadata, write_metadata
from fstate.savepoint.verify import verify
from tests.savepoint.test_fuzz import SAMPLES


def _absolute_copy(sample: Path, where: Path) -> None:
    """A copy of ``sample`` at ``where`` whose file handles name their files by absolute path."""
    shutil.copytree(sample, where)
    path = where / "_metadata"
    meta = read_metadata(path.read_bytes(), str(path))

    def absolute(h):
        if isinstance(h, handles.RelativeFileHandle):
            return handles.FileHandle(f"file:{where.resolve() / h.relative_path}", h.size)
        return h

    for op in meta.operators:
        for index, subtask in list(op.subtasks.items()):
            op.subtasks[index] = map_subtask_stream_handles(subtask, absolute)
    path.write_bytes(write_metadata(meta))


def _command(text: str) -> list[str]:
    assert "looks moved" in text, text
    return shlex.split(text.split("fix them with: ", 1)[1])


def test_a_moved_savepoint_says_so_and_names_the_relocate_command(tmp_path):
    old, new = tmp_path / "old place", tmp_path / "new"
    _absolute_copy(SAMPLES["keyed-hashmap-savepoint"], old)
    assert verify(str(old)).ok
    os.rename(old, new)
    problems = [p for o in verify(str(new)).operators for p in o.problems]
    assert problems and all("looks moved" in p for p in problems), problems
    command = _command(problems[0])
    assert command[:2] == ["fstate", "relocate"]
    with pytest.raises(MissingStateFileError) as caught:
        with Savepoint.open(str(new)).operator("keyed").keyed_states()[0].open() as state:
            sum(1 for _ in state.entries())
    assert _command(caught.value.detail) == command
    res = CliRunner().invoke(app, command[1:])
    assert res.exit_code == 0, res.output
    assert verify(str(new)).ok
