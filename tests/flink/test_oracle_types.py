"""The real-Flink oracle for TypesJob (every type, 10 000 keys, 5 key types): fstate must read exactly
the state the job dumped (see test_oracle.py; a module of its own, the heaviest half of the oracle's
reading, so that pytest-xdist's ``loadfile`` can run it beside the other half)."""

from __future__ import annotations

import pytest

from fstate.savepoint.loader import Savepoint
from tests.flink import harness
from tests.oracle_compare import assert_matches_dump

pytestmark = pytest.mark.flink

# TypesJob (every type, 10 000 keys, 5 key types) is big: the default suite runs every backend and
# snapshot kind on 2.3, compression on and off, and one savepoint of each older version;
# FSTATE_FLINK_ALL=1 runs every combination.
_ALL = harness.ALL_RELEASES
TYPES_VARIANTS = sorted({
    (version, backend, snapshot, compression)
    for version in harness.MATRIX_VERSIONS
    for backend in ("hashmap", "rocksdb")
    for snapshot in ("savepoint", "checkpoint")
    for compression in (False, True)
    if _ALL or (version == "2.3.0" and (not compression or backend == "hashmap"))
    or (snapshot == "savepoint" and backend == "hashmap" and not compression)
})


@pytest.mark.parametrize("version,backend,snapshot,compression", TYPES_VARIANTS, ids=lambda v: str(v))
def test_every_type_and_key_type(version, backend, snapshot, compression):
    harness.require_flink(version)
    # Kryo values have no length framing in the heap backend's checkpoint layout: those variants
    # leave the Kryo state out here (test_kryo_in_heap_checkpoint_is_a_clear_error covers it)
    extra = (["--compression"] if compression else []) + (["--no-kryo"] if snapshot == "checkpoint" else [])
    res = harness.generate("TypesJob", version, backend, snapshot, extra_args=tuple(extra))
    sp = Savepoint.open(str(res.snapshot_dir))
    op = sp.operator("types-string-key")
    # the keyed header of a RocksDB native snapshot (SST files, which RocksDB compresses itself) says
    # "not compressed" whatever the option (RocksDB checkpoints of every release but 1.15)
    native = op.keyed_layout == "RocksDB incremental/native"
    assert native == (backend == "rocksdb" and snapshot == "checkpoint" and version != "1.15.4")
    assert op.keyed_meta.compressed == (compression and not native)
    assert_matches_dump(res.snapshot_dir, res.dump)


def test_kryo_in_heap_checkpoint_is_a_clear_error():
    from fstate.readers import tables
    from fstate.savepoint.errors import UnsupportedSerializerError

    harness.require_flink("2.3.0")
    res = harness.generate("TypesJob", "2.3.0", "hashmap", "checkpoint")
    op = Savepoint.open(str(res.snapshot_dir)).operator("types-string-key")
    warnings = [w for d in op.describe_states() for w in d.warnings]
    assert any("Kryo" in w for w in warnings), warnings
    with pytest.raises(UnsupportedSerializerError, match="v_kryo"):
        list(tables.keyed_table(op).rows())
