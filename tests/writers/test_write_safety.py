"""Writes that cannot lose a savepoint: --out apart from BASE, overwrite keeps the old target until
the new one is in place (a killed overwrite is recovered by the next write), staging directories of
killed writers removed on the next write to the same parent, one clear message for a second writer."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import warnings

import pytest

from fstate.savepoint.builder import SavepointBuilder
from fstate.savepoint.errors import ConcurrentWriteError, FStateWarning, InvalidArgumentError
from fstate.savepoint.loader import Savepoint
from fstate.savepoint.verify import verify
from fstate.writers.modify import SavepointModifier
from tests.support import sample_dirs, sample_snapshot
from tests.writers.test_kill import WRITER, _digest, kill_before_metadata


def _sample(name):
    return str(sample_snapshot(next(s for s in sample_dirs() if s.name == name)))


@pytest.fixture
def base(tmp_path):
    path = tmp_path / "base"
    shutil.copytree(_sample("operator-state-hashmap-savepoint"), path)
    return str(path)


def _write(target, n=200, *extra):
    subprocess.run([sys.executable, "-c", WRITER, str(target), str(n), *extra], check=True, capture_output=True)


def _hidden(directory):
    return sorted(n for n in os.listdir(directory) if n.startswith("."))


@pytest.mark.parametrize("where", ["same", "inside", "contains"])
def test_out_overlapping_base_is_refused(base, tmp_path, where):
    before = _digest(base)
    out = {"same": base, "inside": os.path.join(base, "new"), "contains": str(tmp_path)}[where]
    with pytest.raises(InvalidArgumentError, match="choose another --out"):
        SavepointModifier(base).remove_operator("src").write(out, overwrite=True)
    assert _digest(base) == before and not os.path.exists(os.path.join(base, "new"))


def test_out_overlapping_a_directory_base_refers_to_is_refused(base, tmp_path):
    shallow = str(tmp_path / "shallow")
    SavepointModifier(base).remove_operator("src").write(shallow)
    with pytest.raises(InvalidArgumentError, match="whose files BASE refers to"):
        SavepointModifier(shallow).write(base, overwrite=True)
    assert verify(shallow, allow_external_paths=True).ok


def test_overwrite_replaces_and_leaves_nothing_behind(tmp_path):
    target = tmp_path / "sp"
    _write(target, 100)
    builder = SavepointBuilder(str(target), overwrite=True)
    builder.operator("x", parallelism=1, max_parallelism=128)
    builder.commit()
    assert [o.uid for o in Savepoint.open(str(target)).operators] == ["x"]
    assert _hidden(tmp_path) == []


OVERWRITE_KILLED_BETWEEN_RENAMES = textwrap.dedent("""
    import os, sys, time
    import fstate.savepoint.atomic as atomic
    atomic._exchange = lambda first, second: False   # a file system that cannot swap directories
    rename = os.rename

    def pausing(source, destination):
        rename(source, destination)
        if destination.endswith(".old"):
            print("old moved away", flush=True)
            time.sleep(3600)

    os.rename = pausing
    from fstate.savepoint.builder import SavepointBuilder
    builder = SavepointBuilder(sys.argv[1], overwrite=True)
    builder.operator("new", parallelism=1, max_parallelism=128)
    builder.commit()
""")


def test_killed_overwrite_is_recovered_by_the_next_write(tmp_path):
    target = tmp_path / "sp"
    _write(target, 100)
    before = _digest(target)
    proc = subprocess.Popen([sys.executable, "-c", OVERWRITE_KILLED_BETWEEN_RENAMES, str(target)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "old moved away", proc.stderr.read()
    finally:
        proc.kill()
        proc.wait()
    assert not target.exists()  # the moment a kill can find; the next write puts the old one back
    with pytest.raises(InvalidArgumentError, match="already exists"):
        SavepointBuilder(str(target))
    assert _digest(target) == before and verify(str(target)).ok
    assert _hidden(tmp_path) == []


def test_stale_staging_of_killed_writers_is_removed_but_not_a_live_ones(tmp_path):
    kill_before_metadata([sys.executable, "-c", WRITER, str(tmp_path / "killed"), "20000"])
    assert [n for n in _hidden(tmp_path) if ".killed.fstate-tmp-" in n]
    live = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path / "live"), "20000",
                             "pause-before-metadata"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert live.stdout.readline().strip() == "state written"
        live_staging = [n for n in _hidden(tmp_path) if ".live.fstate-tmp-" in n]
        assert live_staging
        _write(tmp_path / "other", 50)  # the next write to the same parent
        assert not [n for n in _hidden(tmp_path) if ".killed." in n]
        assert [n for n in _hidden(tmp_path) if ".live.fstate-tmp-" in n] == live_staging
    finally:
        live.kill()
        live.wait()
    assert verify(str(tmp_path / "other")).ok and not (tmp_path / "killed").exists()


def test_a_second_writer_of_one_target_gets_one_clear_message(base, tmp_path):
    target = tmp_path / "new"
    first = subprocess.Popen([sys.executable, "-c", WRITER, str(target), "2000", "pause-before-metadata"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert first.stdout.readline().strip() == "state written"
        with pytest.raises(ConcurrentWriteError, match=rf"another fstate process \(pid {first.pid}\) is writing"):
            SavepointModifier(base).write(str(target))
        res = subprocess.run([sys.executable, "-m", "fstate.cli.app", "modify", base, "--out", str(target),
                              "--remove", "src"], capture_output=True, text=True)
        assert res.returncode == 2 and "is writing it" in res.stderr
        assert "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1
    finally:
        first.kill()
        first.wait()
    SavepointModifier(base).remove_operator("src").write(str(target))  # the killed writer's lock is gone
    assert verify(str(target), allow_external_paths=True).ok and _hidden(tmp_path) == []


def test_max_parallelism_of_all_operators_and_a_warning_for_one(base, tmp_path):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        SavepointModifier(base).set_max_parallelism("lists", 256).write(str(tmp_path / "one"))
    assert [w.category for w in caught] == [FStateWarning]
    assert "operator lists now has max parallelism 256 but 8 other operator(s)" in str(caught[0].message)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        SavepointModifier(base).set_max_parallelism_of_all(256).write(str(tmp_path / "all"))
    assert {o.max_parallelism for o in Savepoint.open(str(tmp_path / "all"), allow_external_paths=True).operators} \
        == {256}
    with pytest.raises(InvalidArgumentError, match=r"operator sink-lists: parallelism 3 is outside 1..2 \(its max parallelism\)"):
        SavepointModifier(base).set_max_parallelism_of_all(2)


def test_any_later_run_removes_a_killed_writers_debris_and_says_so(tmp_path):
    """A killed writer's staging directory names its host and process: the next fstate run that opens a
    savepoint beside it (a read, not only a write to the same place) sees the process is gone, removes
    the directory and the lock file, and says so in one line; a live writer's are never touched."""
    shutil.copytree(_sample("operator-state-hashmap-savepoint"), tmp_path / "sp")
    live = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path / "live"), "2000", "pause-before-metadata"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert live.stdout.readline().strip() == "state written"
        live_staging = [n for n in _hidden(tmp_path) if ".live." in n]
        kill_before_metadata([sys.executable, "-c", WRITER, str(tmp_path / "killed"), "2000"])
        (staged,) = [n for n in _hidden(tmp_path) if ".killed.fstate-tmp-" in n]
        assert ".killed.fstate-lock" in _hidden(tmp_path)
        res = subprocess.run([sys.executable, "-m", "fstate.cli.app", "info", str(tmp_path / "sp")],
                             capture_output=True, text=True, env={**os.environ, "COLUMNS": "300"})
        assert res.returncode == 0, res.stderr
        said = [line for line in res.stderr.splitlines() if "killed while writing" in line]
        assert len(said) == 1 and staged in said[0] and said[0].startswith("warning: removed"), res.stderr
        assert _hidden(tmp_path) == live_staging  # the killed one's directory and lock file are gone
    finally:
        live.kill()
        live.wait()
