"""Every write proves itself: what modify, bootstrap, upgrade and the Python API's writers would write
must pass `fstate verify`'s checks (SavepointBuilder.commit, the one rule), else nothing is written and
one line names the file and the offset; ``--no-verify`` / ``verify=False`` writes it anyway."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from fstate.cli.app import app
from fstate.savepoint import handles
from fstate.savepoint.builder import SavepointBuilder
from fstate.savepoint.errors import CorruptStateError
from fstate.savepoint.loader import Savepoint
from fstate.savepoint.verify import verify
from fstate.writers.modify import SavepointModifier
from tests.cli.test_cli import SPEC, _invoke, runner
from tests.support import sample_dirs, sample_snapshot

KEYED = "keyed-hashmap-savepoint"


def _sample(name: str) -> Path:
    return sample_snapshot(next(s for s in sample_dirs() if s.name == name))


def damaged_copy(tmp_path: Path) -> tuple[Path, Path]:
    """A copy of the keyed sample with 8 bytes in the middle of one keyed state file set to 0xff (the
    issue's case: verify then finds a key length of 16777215); (the copy, the damaged file)."""
    base = tmp_path / "base"
    shutil.copytree(_sample(KEYED), base)
    sp = Savepoint.open(str(base))
    _, h = sp.operator("keyed").key_group_handles()[-1]
    target = Path(sp.stream_source(h.delegate).path)
    data = bytearray(target.read_bytes())
    middle = len(data) // 2
    data[middle:middle + 8] = b"\xff" * 8
    target.write_bytes(bytes(data))
    assert not verify(str(base)).ok
    return base, target


@pytest.mark.parametrize("deep", [False, True])
def test_modify_refuses_to_copy_damage(tmp_path, deep):
    base, damaged = damaged_copy(tmp_path)
    out = tmp_path / "out"
    with pytest.raises(CorruptStateError) as caught:
        SavepointModifier(str(base)).rename_uid("keyed", "k2").write(str(out), deep=deep)
    # the input's file (not the staged copy, which is gone) and the offset inside it
    assert caught.value.path == str(damaged), caught.value
    assert "at byte" in caught.value.detail and "nothing was written" in caught.value.detail
    assert "\n" not in str(caught.value)
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["base"]
    SavepointModifier(str(base)).rename_uid("keyed", "k2").write(str(out), deep=deep, verify=False)
    assert not verify(str(out), allow_external_paths=True).ok


def test_modify_command_refuses_in_one_line_and_no_verify_writes(tmp_path):
    base, damaged = damaged_copy(tmp_path)
    out = tmp_path / "out"
    res = runner.invoke(app, ["modify", str(base), "--out", str(out), "--deep", "--rename", "keyed=k2"])
    assert res.exit_code == 2 and res.stderr.startswith(f"error: {damaged}: "), res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and "--no-verify" in res.stderr and not out.exists()
    res = runner.invoke(app, ["modify", str(base), "--out", str(out), "--deep", "--rename", "keyed=k2", "--no-verify"])
    assert res.exit_code == 0 and out.exists(), res.stderr


def test_an_untouched_sample_is_written_verified(tmp_path):
    out = tmp_path / "out"
    SavepointModifier(str(_sample(KEYED))).rename_uid("keyed", "k2").write(str(out), deep=True)
    assert verify(str(out)).ok


def _shift_first_key_group(metadata):
    """``metadata`` (a builder's) with the first keyed stream's first key-group offset one byte late."""
    def shifted(metadata_self):
        meta = metadata(metadata_self)
        for op in meta.operators:
            for index, subtask in op.subtasks.items():
                h = subtask.managed_keyed
                if isinstance(h, handles.KeyGroupsHandle) and any(h.offsets):
                    first = next(i for i, o in enumerate(h.offsets) if o)
                    offsets = tuple(o + 1 if i == first else o for i, o in enumerate(h.offsets))
                    op.subtasks[index] = dataclasses.replace(subtask,
                                                             managed_keyed=dataclasses.replace(h, offsets=offsets))
                    return meta
        return meta
    return shifted


@pytest.mark.spark
def test_bootstrap_refuses_what_does_not_verify(spark, tmp_path, monkeypatch):
    """A fault of fstate's own writing (here: a key-group offset one byte off in the `_metadata` the
    builder writes) is found before the savepoint appears; --no-verify writes it."""
    (tmp_path / "counts.json").write_text("\n".join(
        json.dumps({"user": f"u{i}", "total": i, "wakeup": 5000 + i}) for i in range(20)))
    (tmp_path / "spec.yaml").write_text(SPEC)
    monkeypatch.setattr(SavepointBuilder, "metadata", _shift_first_key_group(SavepointBuilder.metadata))
    out = tmp_path / "sp"
    res = _invoke("bootstrap", "--spec", str(tmp_path / "spec.yaml"), "--out", str(out))
    assert res.exit_code == 2 and "does not verify" in res.stderr and "starts at byte" in res.stderr, res.stderr
    assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".sp")]
    res = _invoke("bootstrap", "--spec", str(tmp_path / "spec.yaml"), "--out", str(out), "--no-verify")
    assert res.exit_code == 0 and not verify(str(out)).ok
