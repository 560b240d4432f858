"""`_metadata` parsing: every shipped sample round-trips byte for byte; bad files fail clearly."""

import shutil

import pytest

from tests.support import sample_dirs, sample_snapshot
from fstate.savepoint import errors
from fstate.savepoint.loader import Savepoint
from fstate.savepoint.metadata import read_metadata, write_metadata

SAMPLES = sample_dirs()


def test_there_are_samples():
    assert len(SAMPLES) >= 4, "samples/ must hold generated savepoints (python -m tests.flink.generate_samples)"


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda p: p.name)
def test_metadata_roundtrip_is_byte_identical(sample):
    path = sample_snapshot(sample) / "_metadata"
    data = path.read_bytes()
    assert write_metadata(read_metadata(data, str(path))) == data


@pytest.mark.parametrize("sample", SAMPLES[:3], ids=lambda p: p.name)
def test_every_truncation_is_a_clear_error(sample):
    data = (sample_snapshot(sample) / "_metadata").read_bytes()
    step = max(1, len(data) // 400)
    for cut in range(0, len(data) - 1, step):
        with pytest.raises(errors.CorruptStateError):
            read_metadata(data[:cut], "cut")


def test_bad_magic_and_version(tmp_path):
    with pytest.raises(errors.CorruptStateError, match="magic"):
        read_metadata(b"\x00" * 64, "f")
    data = bytearray((sample_snapshot(SAMPLES[0]) / "_metadata").read_bytes())
    data[7] = 99
    with pytest.raises(errors.UnsupportedVersionError, match="version 99"):
        read_metadata(bytes(data), "f")


def test_path_forms(tmp_path):
    snap = sample_snapshot(SAMPLES[0])
    for form in (str(snap), str(snap) + "/", str(snap / "_metadata"), snap.as_uri(), "file:" + str(snap)):
        sp = Savepoint.open(form)
        assert sp.path.rstrip("/") == str(snap)


def test_not_a_savepoint(tmp_path):
    with pytest.raises(errors.SavepointNotFoundError, match="no _metadata"):
        Savepoint.open(str(tmp_path))
    with pytest.raises(errors.SavepointNotFoundError, match="no such file"):
        Savepoint.open(str(tmp_path / "missing"))
    # a job checkpoint directory with chk-N inside: say which to pick
    snap = sample_snapshot(SAMPLES[0])
    shutil.copytree(snap, tmp_path / "job" / "chk-7")
    assert Savepoint.open(str(tmp_path / "job")).path.endswith("chk-7")  # the only one: taken
    shutil.copytree(snap, tmp_path / "job" / "chk-9")
    with pytest.raises(errors.SavepointNotFoundError, match="chk-7, chk-9"):
        Savepoint.open(str(tmp_path / "job"))


def test_missing_state_file_is_reported(tmp_path):
    with_files = [s for s in SAMPLES if any(p.name != "_metadata" for p in sample_snapshot(s).iterdir())]
    assert with_files, "a sample with state in its own file is expected"
    dst = tmp_path / "sp"
    shutil.copytree(sample_snapshot(with_files[0]), dst)
    victim = next(p for p in dst.iterdir() if p.name != "_metadata")
    victim.unlink()
    from fstate.readers import tables
    sp = Savepoint.open(str(dst))
    with pytest.raises(errors.MissingStateFileError, match=victim.name):
        for op in sp.operators:
            for _, h in op.operator_handles():
                sp.read_stream(h.delegate)
            for p in (tables.keyed_table(op).partitions if op.has_keyed_state else []):
                list(tables.read_partition(p))
