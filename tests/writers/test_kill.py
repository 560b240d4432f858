"""Killing a writer (SIGKILL) at random points leaves no target or a complete, verifiable savepoint —
never a `_metadata` pointing at missing files — and the base of a modify stays byte-identical."""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from fstate.savepoint.verify import verify
from tests.support import sample_dirs, sample_snapshot

WRITER = textwrap.dedent("""
    import sys
    from fstate.savepoint import keyed, operator as operator_state, handles
    from fstate.savepoint.builder import SavepointBuilder
    from fstate.savepoint.types import LONG, STRING
    from fstate.savepoint.types.hashing import key_group_for_hash, key_group_range

    target, n = sys.argv[1], int(sys.argv[2])
    if sys.argv[3:] == ["pause-before-metadata"]:
        # the most delicate moment, on demand: every state file written, `_metadata` not yet
        import time
        import fstate.savepoint.builder as builder_module
        serialize = builder_module.write_metadata

        def paused(meta):
            print("state written", flush=True)
            time.sleep(3600)
            return serialize(meta)

        builder_module.write_metadata = paused
    maxp, p = 128, 2
    meta = keyed.KeyedBackendMeta(6, False, STRING, [keyed.value_state_meta("total", "VALUE", LONG),
                                                   keyed.value_state_meta("names", "LIST", STRING)])
    enc = [keyed.PairEncoder(meta, i, maxp) for i in range(2)]
    b = SavepointBuilder(target)
    op = b.operator("keyed", parallelism=p, max_parallelism=maxp)
    for sub in range(p):
        lo, hi = key_group_range(sub, p, maxp)
        by = {}
        for i in range(n):
            k = f"key-{i}"
            kg = key_group_for_hash(STRING.java_hash(k), maxp)
            if lo <= kg <= hi:
                d = by.setdefault(kg, {})
                d.setdefault(0, []).extend(enc[0].pairs(kg, k, i))
                d.setdefault(1, []).extend(enc[1].pairs(kg, k, [f"n{i}", "x" * 20]))
        data, offsets = keyed.encode_canonical_stream(meta, lo, hi, by)
        op.subtask(sub).managed_keyed = handles.KeyGroupsHandle(handles.SAVEPOINT_KEY_GROUPS, lo, offsets, b.stream(data))
    src = b.operator("src", parallelism=1, max_parallelism=maxp)
    data, offsets = operator_state.encode_operator_stream([(operator_state.list_state_meta("offsets", LONG), list(range(5000)))])
    src.subtask(0).managed_operator = handles.OperatorStreamHandle(offsets, b.stream(data))
    b.commit()
    print("committed")
""")

MODIFIER = textwrap.dedent("""
    import sys
    from fstate.writers.modify import SavepointModifier
    m = SavepointModifier(sys.argv[1])
    m.remove_operator("window-agg").rename_uid("keyed", "keyed-v2")
    m.write(sys.argv[2], deep=sys.argv[3] == "deep")
    print("committed")
""")


def _digest(d):
    return {f: hashlib.sha256(open(os.path.join(d, f), "rb").read()).hexdigest() for f in sorted(os.listdir(d))}


def _kill_at(cmd: list[str], delay: float) -> bool:
    """Run cmd, SIGKILL it after delay seconds; True if it finished first."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    time.sleep(delay)
    finished = proc.poll() is not None
    if not finished:
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    return finished


def kill_before_metadata(cmd: list[str], env: dict | None = None, timeout: float = 300) -> None:
    """Run WRITER with ``pause-before-metadata`` and SIGKILL it once it has written every state
    file and not `_metadata`: a kill inside the write, whatever the machine's speed."""
    proc = subprocess.Popen([*cmd, "pause-before-metadata"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)
    try:
        deadline = time.monotonic() + timeout
        line = proc.stdout.readline()  # blocks until the writer reaches the pause (or dies)
        assert line.strip() == "state written" and time.monotonic() < deadline, \
            f"the writer did not reach the pause: {line!r} {proc.stderr.read() if proc.poll() is not None else ''}"
    finally:
        proc.kill()
        proc.wait()


def _assert_all_or_nothing(target: str, allow_external: bool = False) -> str:
    if not os.path.exists(target):
        return "absent"
    report = verify(target, allow_external_paths=allow_external)
    assert report.ok, report.to_dict()
    return "complete"


def random_kills(exhaustive: bool, default: int, every: int) -> range:
    """How many random kill times a writer test tries when it also kills once inside the write
    (``kill_before_metadata``): a few, more with --exhaustive."""
    return range(every if exhaustive else default)


def test_killed_bootstrap_writer(tmp_path, exhaustive):
    rng = random.Random(7)
    seen = set()
    # how long an undisturbed write takes, to spread the kills over it
    t0 = time.time()
    subprocess.run([sys.executable, "-c", WRITER, str(tmp_path / "full"), "60000"], check=True, capture_output=True)
    full = time.time() - t0
    assert verify(str(tmp_path / "full")).ok
    for i in random_kills(exhaustive, 4, 10):
        target = str(tmp_path / f"sp{i}")
        _kill_at([sys.executable, "-c", WRITER, target, "60000"], rng.uniform(0.05, full * 1.2))
        seen.add(_assert_all_or_nothing(target))
    # and one kill that lands inside the write on every machine
    target = str(tmp_path / "between")
    kill_before_metadata([sys.executable, "-c", WRITER, target, "60000"])
    assert _assert_all_or_nothing(target) == "absent"


@pytest.mark.parametrize("mode", ["shallow", "deep"])
def test_killed_modify_leaves_base_untouched(tmp_path, mode):
    base = tmp_path / "base"
    shutil.copytree(next(sample_snapshot(s) for s in sample_dirs() if s.name == "keyed-hashmap-savepoint"), base)
    before = _digest(base)
    rng = random.Random(11)
    t0 = time.time()
    subprocess.run([sys.executable, "-c", MODIFIER, str(base), str(tmp_path / "full"), mode], check=True,
                   capture_output=True)
    full = time.time() - t0
    for i in range(6):
        target = str(tmp_path / f"new{i}")
        _kill_at([sys.executable, "-c", MODIFIER, str(base), target, mode], rng.uniform(0.05, full * 1.2))
        _assert_all_or_nothing(target, allow_external=True)
        assert _digest(base) == before
