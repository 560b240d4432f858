"""One rule for sanity limits (savepoint/limits.py): what `info` accepts, `verify`, `read`, the writers
and the runtime accept, and nothing Flink would refuse."""

from __future__ import annotations

import dataclasses
import shutil

import pytest
from typer.testing import CliRunner

from fstate.cli.app import app
from fstate.savepoint import limits
from fstate.savepoint.builder import SavepointBuilder
from fstate.savepoint.errors import CorruptStateError, InvalidArgumentError
from fstate.savepoint.loader import Savepoint
from fstate.savepoint.metadata import read_metadata, write_metadata
from fstate.savepoint.verify import verify
from tests.savepoint.test_fuzz import SAMPLES


@pytest.mark.parametrize("parallelism,max_parallelism", [(10 ** 9, 128), (3, 10 ** 9), (0, 128), (129, 128)])
def test_info_verify_and_read_refuse_alike(tmp_path, parallelism, max_parallelism):
    case = tmp_path / "sp"
    shutil.copytree(SAMPLES["keyed-hashmap-savepoint"], case)
    meta = read_metadata((case / "_metadata").read_bytes())
    meta = dataclasses.replace(meta, operators=[
        dataclasses.replace(op, parallelism=parallelism, max_parallelism=max_parallelism) if op.uid == "keyed" else op
        for op in meta.operators])
    (case / "_metadata").write_bytes(write_metadata(meta))
    (problem,) = limits.parallelism_problems(parallelism, max_parallelism)
    with pytest.raises(CorruptStateError, match=problem.replace("(", r"\(").replace(")", r"\)")):
        Savepoint.open(str(case))
    runner = CliRunner()
    for command in (["info", str(case)], ["read", str(case), "--uid", "keyed"]):
        res = runner.invoke(app, command)
        assert res.exit_code == 2 and problem in res.stderr, (command, res.stderr)
    report = verify(str(case))
    assert not report.ok and problem in report.problems[0]
    builder = SavepointBuilder(str(tmp_path / "new"))
    with pytest.raises(InvalidArgumentError, match=problem.split(" (")[0]):
        builder.operator("op", parallelism=parallelism, max_parallelism=max_parallelism)
    builder.abort()


def test_the_runtime_takes_the_same_upper_limit():
    from fstate.runtime import StreamExecutionEnvironment

    env = StreamExecutionEnvironment()
    env.set_max_parallelism(limits.UPPER_MAX_PARALLELISM)
    with pytest.raises(InvalidArgumentError, match=str(limits.UPPER_MAX_PARALLELISM)):
        env.set_max_parallelism(limits.UPPER_MAX_PARALLELISM + 1)
