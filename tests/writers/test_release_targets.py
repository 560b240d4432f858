"""What a written savepoint gets for the Flink release that will restore it, besides its serializers
(writers/flink_target.py): the `_metadata` version and the operator-state header version (Flink 1.16
and 1.17 write and read header version 5, 1.18 added the compression flag in version 6). Proven on
real Flink by tests/flink/test_flink_target.py (every release's headers, FSTATE_FLINK_ALL=1) and the
restore oracle (tests/flink/test_writer_oracle.py)."""

from __future__ import annotations

import pytest

from fstate.savepoint.builder import metadata_version_for, operator_proxy_version_for
from fstate.savepoint.errors import InvalidArgumentError
from fstate.savepoint.loader import Savepoint
from fstate.writers.modify import SavepointModifier
from fstate.writers.writer import SavepointWriter


@pytest.mark.parametrize("flink_version,metadata_version,operator_proxy_version", [
    (None, 6, 6), ("2.3", 6, 6), ("2.2.1", 6, 6), ("2.1", 6, 6), ("2", 5, 6), ("2.0.0", 5, 6),
    ("1.20", 4, 6), ("1.19.3", 4, 6), ("1.18", 4, 6), ("1.17.2", 4, 5), ("1.16", 4, 5),
    ("1.15.4", 3, 5), ("1.11", 3, 5)])
def test_what_each_release_gets(flink_version, metadata_version, operator_proxy_version):
    assert metadata_version_for(flink_version) == metadata_version
    assert operator_proxy_version_for(flink_version) == operator_proxy_version


@pytest.mark.parametrize("flink_version", ["1.10", "one.two"])
def test_unknown_releases_are_refused(flink_version):
    for f in (metadata_version_for, operator_proxy_version_for):
        with pytest.raises(InvalidArgumentError, match=flink_version):
            f(flink_version)


def _header_version(path, uid: str) -> int:
    return Savepoint.open(str(path)).operator(uid).operator_meta.version


def test_operator_state_written_for_1_17_and_kept_by_modify(tmp_path):
    SavepointWriter(128, flink_version="1.17").with_list_state("src", "offsets", [3, 1, 4], type="LONG") \
        .write(str(tmp_path / "base"))
    base = Savepoint.open(str(tmp_path / "base"))
    assert (base.metadata.version, _header_version(tmp_path / "base", "src")) == (4, 5)
    assert [v for _, _, v in base.operator("src").list_state("offsets")] == [3, 1, 4]
    # NEW keeps BASE's release: a new operator's state gets BASE's header version ...
    m = SavepointModifier(str(tmp_path / "base"))
    m.writer.with_list_state("added", "names", ["a", "b"], type="STRING")
    m.write(str(tmp_path / "kept"))
    assert _header_version(tmp_path / "kept", "added") == 5
    # ... unless another release is asked for
    m = SavepointModifier(str(tmp_path / "base"), flink_version="1.18")
    m.writer.with_list_state("added", "names", ["a", "b"], type="STRING")
    m.write(str(tmp_path / "for-1.18"))
    assert _header_version(tmp_path / "for-1.18", "added") == 6
    assert [v for _, _, v in Savepoint.open(str(tmp_path / "for-1.18")).operator("added").list_state("names")] == [
        "a", "b"]


def test_operator_state_carried_over_for_1_16_is_written_again(tmp_path):
    """BASE's operator-state streams are copied as they are unless the target release refuses their
    header version: Flink 1.16 and 1.17 read up to 5, so a 2.3 savepoint's streams are written again."""
    (SavepointWriter(128).with_list_state("src", "offsets", [3, 1, 4, 1, 5], type="LONG", parallelism=2)
     .with_union_state("src", "marks", [10, 20], type="LONG")
     .with_broadcast_state("src", "rules", {"r1": "allow", "r2": "d\u00e9ny"}, key_type="STRING", value_type="STRING")
     .write(str(tmp_path / "base")))
    assert _header_version(tmp_path / "base", "src") == 6
    SavepointModifier(str(tmp_path / "base")).rename_uid("src", "src-2").write(str(tmp_path / "same"))
    assert _header_version(tmp_path / "same", "src-2") == 6
    SavepointModifier(str(tmp_path / "base"), flink_version="1.16").rename_uid("src", "src-2") \
        .write(str(tmp_path / "for-1.16"))
    base, new = (Savepoint.open(str(tmp_path / d)).operator(uid) for d, uid in (("base", "src"), ("for-1.16", "src-2")))
    assert new.operator_meta.version == 5
    assert [(s.name, s.kind) for s in new.operator_meta.states] == [(s.name, s.kind) for s in base.operator_meta.states]
    for name in ("offsets", "marks"):
        assert list(new.list_state(name)) == list(base.list_state(name))
    assert dict(new.broadcast_state("rules")) == {"r1": "allow", "r2": "d\u00e9ny"}


def test_upgrade_for_1_17_writes_the_operator_state_again(tmp_path):
    """``fstate upgrade --flink-version 1.17`` of a 2.3 savepoint: the operator state is re-encoded
    under header version 5 (the same rule as modify's)."""
    from fstate.writers.upgrade import SavepointUpgrader

    SavepointWriter(128).with_list_state("src", "offsets", [3, 1, 4], type="LONG").write(str(tmp_path / "old"))
    upgrader = SavepointUpgrader(str(tmp_path / "old"), flink_version="1.17")
    assert [s.decision.value for s in upgrader.report().steps] == ["migrated"]
    upgrader.write(str(tmp_path / "new"))
    new = Savepoint.open(str(tmp_path / "new"))
    assert (new.metadata.version, new.operator("src").operator_meta.version) == (4, 5)
    assert [v for _, _, v in new.operator("src").list_state("offsets")] == [3, 1, 4]
    # kept for a release that reads it
    SavepointUpgrader(str(tmp_path / "new"), flink_version="1.18").write(str(tmp_path / "for-1.18"))
    assert _header_version(tmp_path / "for-1.18", "src") == 5
