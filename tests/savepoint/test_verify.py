"""`verify` finds damage: regions that do not decode to exactly their declared bytes, compressed
chunks whose CRC32C does not match, missing channel-state files, parallelism above the max
parallelism; `info` counts in-flight bytes."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest

from fstate.savepoint import compression, handles, keyed, pool
from fstate.savepoint.errors import CorruptStateError
from fstate.savepoint.loader import Savepoint
from fstate.savepoint.metadata import read_metadata, write_metadata
from fstate.savepoint.summary import summarize
from fstate.savepoint.verify import verify
from tests.savepoint.test_fuzz import SAMPLES, check_no_wrong_success

KEYED = "keyed-hashmap-savepoint"


def _copy(tmp_path: Path, sample: str) -> Path:
    case = tmp_path / sample
    shutil.copytree(SAMPLES[sample], case)
    return case


def _problems(report) -> list[str]:
    return report.problems + [p for o in report.operators for p in o.problems]


def _first_key_group(case: Path) -> tuple[Path, int, int]:
    """(file, start, end) of the first non-empty key group of a keyed operator's first subtask."""
    sp = Savepoint.open(str(case))
    op = next(o for o in sp.operators if o.has_keyed_state)
    _, h = op.key_group_handles()[0]
    src = sp.stream_source(h.delegate)
    regions = keyed.key_group_regions(h, src.length)
    _, start, end = min(regions, key=lambda r: r[1])
    return Path(src.path), start, end


def test_samples_verify_clean():
    for sample, path in SAMPLES.items():
        report = verify(str(path))
        assert report.ok, (sample, _problems(report))


def test_zeroed_block_is_found(tmp_path):
    case = _copy(tmp_path, KEYED)
    target, start, _ = _first_key_group(case)
    data = bytearray(target.read_bytes())
    data[start:start + 4096] = bytes(len(data[start:start + 4096]))
    target.write_bytes(bytes(data))
    assert not verify(str(case)).ok


def test_large_streams_are_verified_piece_by_piece(tmp_path, monkeypatch):
    """A stream over keyed_state.SPLIT_BYTES is read a piece of key groups at a time (memory does not
    grow with the stream): the same report as one read of the whole stream, and a damaged key group of
    the last piece is found."""
    from fstate.savepoint import keyed_state
    from fstate.savepoint import verify as verify_module

    counted = []
    count_checked = verify_module._count_checked
    monkeypatch.setattr(verify_module, "_count_checked", lambda *a: counted.append(count_checked(*a)) or counted[-1])
    case = _copy(tmp_path, KEYED)
    whole = verify(str(case))
    whole_entries, counted[:] = sum(counted), []
    opened = []
    piece_open = keyed_state.KeyedStateSource.open

    def counting(self, **kwargs):
        opened.append(self.span)
        return piece_open(self, **kwargs)

    monkeypatch.setattr(keyed_state, "SPLIT_BYTES", 4096)
    monkeypatch.setattr(keyed_state.KeyedStateSource, "open", counting)
    pieces = verify(str(case))
    assert sum(span is not None for span in opened) > 3 * 5  # the three subtasks' streams in spans
    assert pieces.ok and [str(p) for p in pieces.operators] == [str(p) for p in whole.operators]
    assert sum(counted) == whole_entries > 0  # every entry decoded and checked, once
    target, start, end = _first_key_group(case)
    sp = Savepoint.open(str(case))
    op = next(o for o in sp.operators if o.has_keyed_state)
    _, h = op.key_group_handles()[0]
    _, last, last_end = max(keyed.key_group_regions(h, sp.stream_source(h.delegate).length), key=lambda r: r[1])
    data = bytearray(target.read_bytes())
    data[last:last_end] = bytes(last_end - last)
    target.write_bytes(bytes(data))
    assert not verify(str(case)).ok


def test_every_bit_flip_in_a_key_group_is_found_or_changes_only_scalars(tmp_path, exhaustive):
    """Over the first 120 bytes of one key group: a flipped bit either makes verify fail (or read fail),
    or yields records of the same shape (a changed scalar: undetectable without checksums). Every byte
    once, its low, middle or high bit in turn; bits 0, 3 and 7 of every byte with --exhaustive."""
    case = _copy(tmp_path, KEYED)
    target, start, end = _first_key_group(case)
    original = target.read_bytes()
    found = undetectable = 0
    for pos in range(start, min(end, start + 120)):
        for bit in (0, 3, 7) if exhaustive else ((0, 3, 7)[pos % 3],):
            data = bytearray(original)
            data[pos] ^= 1 << bit
            target.write_bytes(bytes(data))
            if verify(str(case)).ok:
                undetectable += 1
            else:
                found += 1
            check_no_wrong_success(str(case), KEYED, f"flip bit {bit} of byte {pos}")
    target.write_bytes(original)
    assert found > undetectable > 0


def test_value_that_does_not_fill_its_bytes_is_found(tmp_path):
    """A value region one byte longer than its serializer's bytes (a grown length field) passes a
    plain decode; verify's exact decode refuses it."""
    case = _copy(tmp_path, KEYED)
    target, start, end = _first_key_group(case)
    data = bytearray(target.read_bytes())
    klen = int.from_bytes(data[start + 2:start + 6], "big")
    vlen_at = start + 6 + klen
    vlen = int.from_bytes(data[vlen_at:vlen_at + 4], "big")
    data[vlen_at:vlen_at + 4] = (vlen + 1).to_bytes(4, "big")
    data[vlen_at + 4 + vlen:vlen_at + 4 + vlen] = b"\x00"  # one extra byte inside the value region
    target.write_bytes(bytes(data[:-1]))  # keep the file size the handle declares
    assert not verify(str(case)).ok


def test_snappy_checksums_checked_by_verify_only():
    framed = bytearray(compression.frame_chunks(b"state bytes " * 100))
    framed[-5] ^= 0x01  # one byte of the uncompressed payload
    data, _ = compression.decompress_framed(bytes(framed), 0)  # readers: as Flink, no check
    assert data != b"state bytes " * 100
    with compression.checking_checksums(), pytest.raises(CorruptStateError, match="checksum"):
        compression.decompress_framed(bytes(framed), 0)
    good = compression.frame_chunks(b"state bytes " * 100)
    with compression.checking_checksums():
        assert compression.decompress_framed(good, 0)[0] == b"state bytes " * 100


def test_crc32c_known_values():
    assert compression.crc32c(b"") == 0
    assert compression.crc32c(b"123456789") == 0xE3069283
    assert compression.crc32c(bytes(32)) == 0x8A9136AA


def _rewrite_metadata(case: Path, change) -> None:
    meta = read_metadata((case / "_metadata").read_bytes())
    meta = dataclasses.replace(meta, operators=[change(op) for op in meta.operators])
    (case / "_metadata").write_bytes(write_metadata(meta))


def test_parallelism_above_max_parallelism_is_found(tmp_path):
    case = _copy(tmp_path, KEYED)
    _rewrite_metadata(case, lambda op: dataclasses.replace(op, parallelism=op.max_parallelism + 1))
    problems = _problems(verify(str(case)))
    assert any("outside 1.." in p and "max parallelism" in p for p in problems), problems


def _with_channel_state(case: Path, size: int = 64) -> None:
    (case / "channel-state").write_bytes(bytes(size))

    def change(op):
        if not op.subtasks:
            return op
        index = min(op.subtasks)
        channel = handles.ChannelStateHandle(1, index, (0, 0), (0, 16), size,
                                             handles.RelativeFileHandle("channel-state", size))
        subtasks = dict(op.subtasks)
        subtasks[index] = dataclasses.replace(subtasks[index], input_channels=(channel,))
        return dataclasses.replace(op, subtasks=subtasks)

    _rewrite_metadata(case, change)


def test_channel_state_files_are_checked_and_counted(tmp_path):
    case = _copy(tmp_path, "keyed-hashmap-checkpoint")
    _with_channel_state(case)
    assert verify(str(case)).ok
    summary = summarize(Savepoint.open(str(case)))
    assert sum(o["channel_state_bytes"] for o in summary["operators"]) > 0
    assert summary["total_state_bytes"] == sum(o["keyed_state_bytes"] + o["operator_state_bytes"]
                                               + o["channel_state_bytes"] for o in summary["operators"])
    (case / "channel-state").unlink()
    problems = _problems(verify(str(case)))
    assert any("channel state" in p and "does not exist" in p for p in problems), problems


@pytest.mark.parametrize("sample", [KEYED, "keyed-rocksdb-checkpoint"])
def test_a_process_pool_reports_what_one_process_does(tmp_path, monkeypatch, sample):
    """Large keyed state is decoded a subtask a process: the same checks, problems and warnings as in
    one process, on a clean sample and on one with a damaged key group."""
    from fstate.savepoint import verify as verify_module

    case = _copy(tmp_path, sample)
    cases = [case]
    if sample == KEYED:
        damaged = _copy(tmp_path / "damaged", KEYED)
        target, start, _ = _first_key_group(damaged)
        data = bytearray(target.read_bytes())
        data[start:start + 4096] = bytes(len(data[start:start + 4096]))
        target.write_bytes(bytes(data))
        cases.append(damaged)
    for path in cases:
        one = verify(str(path))
        monkeypatch.setattr(pool, "SMALL_BYTES", 0)
        monkeypatch.setattr(verify_module.os, "cpu_count", lambda: 2)
        pools = []
        spawn = pool.spawn_pool
        monkeypatch.setattr(pool, "spawn_pool", lambda workers: pools.append(workers) or spawn(workers))
        pooled = verify(str(path))
        monkeypatch.undo()
        assert pools and set(pools) == {2}  # every keyed operator decoded on a pool of 2
        assert verify_module._workers(Savepoint.open(str(path)).operator("keyed"), 3) == 1  # small: one process
        assert [dataclasses.asdict(o) for o in pooled.operators] == [dataclasses.asdict(o) for o in one.operators]
        assert pooled.ok == (path == case)


@pytest.mark.parametrize("sample", ["keyed-hashmap-savepoint", "keyed-hashmap-checkpoint", "keyed-1.20-savepoint",
                                    "sql-uids-savepoint", "cep-savepoint"])
def test_the_compiled_decoders_find_what_the_reference_decoders_find(tmp_path, sample):
    """verify decodes keyed state with the compiled decoders; on damaged copies of a sample (bit flips,
    bytes set, lengths changed, cuts, lost blocks in its state files) it flags the same operators as
    with the plain-Python reference decoders, and most damage is flagged at all."""
    import random

    from tests.savepoint.test_fuzz import mutate

    rng = random.Random(sample)
    flagged = 0
    for index in range(30):
        case = tmp_path / f"case-{index}"
        shutil.copytree(SAMPLES[sample], case)
        files = sorted(path for path in case.iterdir() if path.name != "_metadata") or [case / "_metadata"]
        target = rng.choice(files)
        data = target.read_bytes()
        kind = rng.choice(["flip", "byte", "int32", "truncate", "zero4k"])
        arg = {"flip": rng.randrange(8), "byte": rng.randrange(256), "int32": rng.choice([-1, 2 ** 31 - 1, 65536]),
               "truncate": None, "zero4k": None}[kind]
        target.write_bytes(mutate(data, (kind, rng.randrange(len(data)), arg)))
        compiled, reference = verify(str(case)), verify(str(case), reference=True)
        assert [(o.operator, o.ok) for o in compiled.operators] == [(o.operator, o.ok) for o in reference.operators]
        assert (compiled.ok, compiled.problems) == (reference.ok, reference.problems), (target.name, kind)
        flagged += not compiled.ok
        shutil.rmtree(case)
    assert flagged >= 10


def _options_file(case: Path) -> Path:
    """The file holding the OPTIONS of the first RocksDB subtask of a RocksDB checkpoint copy."""
    sp = Savepoint.open(str(case))
    handle = next(h for op in sp.operators for _, h in op.keyed_handles() if isinstance(h, handles.IncrementalKeyedHandle))
    (sh,) = [sh for name, sh in handle.shared + handle.private if name.startswith("OPTIONS-")]
    return Path(sp.stream_source(sh).path)


@pytest.mark.parametrize("change", [
    (b"max_open_files=-1", b"max_open_files=-x"),  # a value that does not parse
    (b"  max_open_files=-1", b"  max_open_filez=-1"),  # an option RocksDB does not know
    (b'[CFOptions "avg"]', b'[CFOptions "avh"]'),  # a column family the MANIFEST does not hold
])
def test_a_damaged_rocksdb_options_file_is_found(tmp_path, change):
    """RocksDB reads its snapshot's OPTIONS through its own parser: verify does too (fstate's reading
    leaves the file out), and the column families it names are the MANIFEST's."""
    case = _copy(tmp_path, "keyed-rocksdb-checkpoint")
    options = _options_file(case)
    data = options.read_bytes()
    assert verify(str(case)).ok
    old, new = change
    assert data.count(old) >= 1 and len(old) == len(new)
    options.write_bytes(data.replace(old, new, 1))
    problems = _problems(verify(str(case)))
    assert len(problems) == 1 and "OPTIONS-" in problems[0] and str(options) in problems[0], problems


@pytest.mark.parametrize("kind", ["MANIFEST-", "CURRENT", ".sst"])
def test_damaged_rocksdb_files_are_found(tmp_path, kind):
    """Every other file of a RocksDB snapshot that a restore reads: its MANIFEST and CURRENT (read when
    the database opens) and its SST files (footer and every block read with RocksDB's checksums)."""
    import random

    rng = random.Random(kind)
    case = _copy(tmp_path, "keyed-rocksdb-checkpoint")
    metadata = case / "_metadata"
    original = metadata.read_bytes()
    for _ in range(4):
        meta = read_metadata(original)
        op = next(o for o in meta.operators if any(isinstance(s.managed_keyed, handles.IncrementalKeyedHandle)
                                                    for s in o.subtasks.values()))
        index, subtask = next((i, s) for i, s in sorted(op.subtasks.items()) if s.managed_keyed is not None)
        h = subtask.managed_keyed
        name, inline = next((n, sh) for n, sh in h.shared + h.private if kind in n)
        assert isinstance(inline, handles.ByteStreamHandle)  # the sample keeps these small files in _metadata
        data = bytearray(inline.data)
        data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        damaged = dataclasses.replace(inline, data=bytes(data))

        def swap(files):
            return tuple((n, damaged if n == name else sh) for n, sh in files)

        op.subtasks[index] = dataclasses.replace(subtask, managed_keyed=dataclasses.replace(
            h, shared=swap(h.shared), private=swap(h.private)))
        metadata.write_bytes(write_metadata(meta))
        problems = _problems(verify(str(case)))
        assert problems and "RocksDB" in problems[0], (name, problems)
