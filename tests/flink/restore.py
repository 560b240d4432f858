"""Restore oracle: start a real Flink job from a savepoint and dump what Flink restored.

Used to check savepoints fstate *writes*: Flink itself must accept them (operators matched by
uid, no unclaimed state, serializer snapshots compatible with the descriptors) and must read
back exactly the data fstate meant to write.

Public API::

    restore_and_dump(config, version="2.3.0", backend="hashmap", out_dir=None, timeout=..., shared_root=None) -> dict
    RestoreFailed                      # FlinkJobError subclass; .causes = Flink's cause chain

Any oracle job started from a snapshot (its ``--restore`` mode)::

    verify_restore(job, version, snapshot_dir, backend="hashmap", out_dir=None, extra_args=()) -> JobResult
                                       # start from a snapshot, dump what Flink restored
                                       # (SqlJob: its output after a second batch)
    verify_refused(job, version, snapshot_dir, expect, ...) -> str   # a restore Flink must refuse: its text
    restore_comparable(dump) -> dict   # normalise dumps for original-vs-restored
    tree_hash(root) -> str             # a snapshot directory's content: the cache key of a restore

``config`` (written as JSON for ``jobs/v2/RestoreJob.java``)::

    {"savepoint": "/abs/path/to/savepoint-dir",     # directory holding _metadata (or file: URI)
     "max_parallelism": 128,                        # default 128
     "ignore_unclaimed_state": False,               # optional, default False
     "processing_timer_wait_ms": 500,               # optional grace for processing-time timers
     "operators": [
       {"uid": "keyed", "kind": "keyed", "parallelism": 2, "key_type": "STRING", "timers": True,
        "max_parallelism": 128,                     # optional per-operator override
        "states": [{"name": "total", "kind": "VALUE", "type": "LONG"},
                   {"name": "events", "kind": "LIST", "type": "STRING"},          # element type
                   {"name": "counts", "kind": "MAP", "type": "MAP<STRING, LONG>"},
                   {"name": "sum", "kind": "REDUCING", "type": "LONG"},
                   {"name": "avg", "kind": "AGGREGATING", "type": "TUPLE<LONG, LONG>"}]},  # accumulator
       {"uid": "src", "kind": "operator", "parallelism": 1,
        "states": [{"name": "offsets", "mode": "SPLIT_DISTRIBUTE", "type": "LONG"},
                   {"name": "marks", "mode": "UNION", "type": "LONG"},
                   {"name": "rules", "mode": "BROADCAST", "key_type": "STRING", "type": "STRING"}]}]}

A state with ``kind`` is keyed state (keyed operators only), one with ``mode`` operator state
(either operator kind). Types: LONG INT SHORT BYTE BOOLEAN DOUBLE FLOAT CHAR STRING BYTES DECIMAL
BIG_INT DATE TIME TIMESTAMP_NTZ INSTANT, LIST<T>, SET<T>, MAP<K, V>, TUPLE<T1, ...>,
ROW<name T, ...>.

The returned dump follows the other oracle dumps: ``{"flink_version", "kind": "restore",
"restored", "snapshot_path", "operators": [{"uid", "operator_id", "kind", "parallelism",
"max_parallelism", "restored", "list_state": [{"state", "mode", "subtask", "values"}],
"broadcast_state": [{"state", "entries"}], "keyed_state": [{"state", "kind", "entries":
[[key, value], ...]}], "timers": [{"kind", "key", "timestamp", "namespace"}]}], "warnings",
"timing"}``. UNION list state: each subtask's entry holds what that subtask restored (the union).
Keyed entries and timers are sorted by key; MAP values are lists of [k, v] sorted by k.
``warnings`` lists suspicious findings that did not stop Flink (a key on the wrong subtask, a key
listed whose value reads as null, a key restored twice, broadcast copies that differ).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from pathlib import Path
from typing import Sequence

from . import harness

JOB = "RestoreJob"
#: jobs/v2/RestoreJob.java (ported to the 1.x API at compile time by tests/flink/jobs_v1.py) runs on
#: the releases with ``restore_job``
SUPPORTED = tuple(v for v, r in harness.RELEASES.items() if r.restore_job)


class RestoreFailed(harness.FlinkJobError):
    """Flink refused (or failed) to restore the savepoint. ``causes`` is Flink's cause chain
    (outermost first, as "Class: message" strings), ``reason`` its innermost entry (Flink's own
    reason, e.g. "org.apache.flink.util.StateMigrationException: ..."). ``str()`` starts with
    the reason and the chain, then carries the JVM stderr and the Flink log tail."""

    def __init__(self, message: str, causes: list[str]):
        super().__init__(message)
        self.causes = causes

    @property
    def reason(self) -> str | None:
        return self.causes[-1] if self.causes else None


def _causes(text: str) -> list[str]:
    return [line.split("RESTORE CAUSE: ", 1)[1] for line in text.splitlines() if "RESTORE CAUSE: " in line]


def _normalise(config: dict) -> dict:
    cfg = json.loads(json.dumps(config))  # deep copy; also rejects non-JSON values early
    sp = cfg.get("savepoint")
    if not sp:
        raise ValueError("config needs 'savepoint'")
    sp = str(sp)
    if "://" not in sp and not sp.startswith("file:"):
        p = Path(sp).resolve()
        if not (p / "_metadata").is_file():
            raise FileNotFoundError(f"{p} has no _metadata")
        sp = str(p)
    cfg["savepoint"] = sp
    if not cfg.get("operators"):
        raise ValueError("config needs a non-empty 'operators' list")
    return cfg


def _rooted_hash(savepoint: Path, root: Path) -> str:
    """The bytes under ``root`` (names and contents, every mention of the root's own path left out)
    and where the savepoint is in it: what Flink reads when every absolute path the savepoint names is
    under ``root``."""
    import hashlib

    root = root.resolve()
    prefix = str(root).encode()
    h = hashlib.sha256(str(savepoint.resolve().relative_to(root)).encode() + b"\0")
    for p in sorted(root.rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(root)).encode() + b"\0" + p.read_bytes().replace(prefix, b"<root>") + b"\0")
    return h.hexdigest()[:16]


def restore_and_dump(
    config: dict,
    version: str = "2.3.0",
    backend: str = "hashmap",
    out_dir: Path | None = None,
    timeout: int = harness.DEFAULT_JOB_TIMEOUT,
    shared_root: Path | None = None,
) -> dict:
    """Start RestoreJob from ``config["savepoint"]`` on Flink ``version`` with ``backend``
    (hashmap | rocksdb) and return its dump (see the module docstring).

    A local savepoint's restore is cached by its bytes. ``shared_root``: a directory holding the
    savepoint and every file its `_metadata` names by absolute path (shallow copies and their bases
    under a test's ``tmp_path``): the cache key is then the root's bytes with the root's own path
    left out, so the same writes under a new ``tmp_path`` are read from the cache (one as long: the
    strings' lengths in `_metadata` stay in the key, so a run without pytest-xdist, whose ``tmp_path``
    has no ``popen-gwN``, has entries of its own).

    ``out_dir`` (must be empty or absent) keeps ``dump.json``, ``flink.log`` and
    ``restore-config.json``; without it a temporary directory is used and removed on success
    (kept, and named in the error, on failure). Raises :class:`RestoreFailed` when the job fails.
    """
    if version not in SUPPORTED:
        raise ValueError(f"RestoreJob runs on {', '.join(SUPPORTED)}, not on {version!r}")
    if backend not in ("hashmap", "rocksdb"):
        raise ValueError(f"backend must be hashmap or rocksdb, not {backend!r}")
    cfg = _normalise(config)
    local = Path(cfg["savepoint"]).is_dir()
    temp = out_dir is None
    if temp:
        harness.CACHE.mkdir(parents=True, exist_ok=True)
        out_dir = Path(tempfile.mkdtemp(prefix="restore-", dir=harness.CACHE))
    out_dir = Path(out_dir).resolve()
    with tempfile.NamedTemporaryFile("w", suffix=".json", prefix="restore-config-", delete=False,
                                     encoding="utf-8") as fh:
        json.dump(cfg, fh, indent=1)
        config_file = Path(fh.name)
    args = ["--config", str(config_file), "--backend", backend]
    try:
        try:
            if temp and local:  # by the savepoint's bytes (fstate writes reproducible savepoints)
                shutil.rmtree(out_dir)
                snapshot = (tree_hash(Path(cfg["savepoint"])) if shared_root is None
                            else _rooted_hash(Path(cfg["savepoint"]), Path(shared_root)))
                key = [harness.GENERATION_FORMAT, JOB, version, backend, harness.job_hash(JOB, version),
                       snapshot, dict(cfg, savepoint=None)]
                res = harness.cached_run(JOB, version, f"restore-{version}-{backend}", key, args, timeout=timeout)
            else:
                res = harness.run_job(JOB, version, out_dir, args, timeout=timeout)
        except harness.FlinkJobError as e:
            out_dir.mkdir(parents=True, exist_ok=True)
            text = str(e)
            causes = _causes(text)
            chain = "\n".join(f"  {c}" for c in causes) or "  (no cause chain printed; see below)"
            reason = causes[-1] if causes else "see stderr below"
            shutil.copy(config_file, out_dir / "restore-config.json")
            raise RestoreFailed(
                f"Flink {version} ({backend}) could not restore {cfg['savepoint']}: {reason}\n"
                f"cause chain:\n{chain}\n"
                f"(outputs kept in {out_dir})\n{text}",
                causes,
            ) from None
        dump = res.dump
        dump.setdefault("timing", {})["wall_s"] = round(res.seconds, 2)
        if temp:
            shutil.rmtree(out_dir, ignore_errors=True)
        else:
            shutil.copy(config_file, out_dir / "restore-config.json")
        return dump
    finally:
        config_file.unlink(missing_ok=True)


# --------------------------------------------------------------------------- any job started from a snapshot


def tree_hash(root: Path) -> str:
    """The content of a snapshot directory (file names and bytes): a cache key of what Flink does
    with it. fstate's savepoints are reproducible (``builder.stream_name``), so restoring the same
    write again is read from the cache; a shallow copy's ``_metadata`` names the files it shares."""
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(root)).encode() + b"\0")
            with open(p, "rb") as fh:
                for chunk in iter(lambda: fh.read(1 << 20), b""):
                    h.update(chunk)
            h.update(b"\0")
    return h.hexdigest()[:16]


def verify_restore(
    job: str,
    version: str,
    snapshot_dir: Path,
    backend: str = "hashmap",
    out_dir: Path | None = None,
    timeout: int = harness.DEFAULT_JOB_TIMEOUT,
    extra_args: Sequence[str] = (),
) -> harness.JobResult:
    """Start ``job`` from ``snapshot_dir`` (a savepoint or chk-N directory, e.g. one fstate wrote)
    and return the job's dump of the state Flink restored (``dump["kind"] == "restored"``).

    Flink refuses state it cannot map (``ignore-unclaimed-state=false``), so operators and state
    names must match the job. Sources emit no data; KeyedStateJob probes keys k-0..k-999 and the
    final watermark fires every event-time timer and window, so the dump lists keyed state of
    those keys, window contents and event-time timers; processing-time timers cannot be seen.
    See :func:`restore_comparable` to compare with a dump of the original snapshot.

    Jobs of INTERNAL_STATE_JOBS that support it (SqlJob) run the same job graph from the savepoint:
    ``extra_args`` must repeat the args the savepoint was taken with (``--uids``, ``--ttl``,
    ``--records``), since without uids the operator ids are hashes of the graph. Their sources
    emit a second batch and finish; the dump holds the job's output after the restore (see
    ``jobs/v2/SqlJob.java``), not a state mirror.

    Without ``out_dir`` the result is cached by (job sources, version, backend, ``extra_args``,
    content hash of ``snapshot_dir``; a shallow copy's ``_metadata`` names the files it shares).
    """
    snapshot_dir = Path(snapshot_dir).resolve()
    if not (snapshot_dir / "_metadata").is_file():
        raise harness.FlinkJobError(f"{snapshot_dir} has no _metadata")
    args = ["--backend", backend, "--restore", str(snapshot_dir), *map(str, extra_args)]
    if out_dir is not None:
        return harness.run_job(job, version, out_dir, args, timeout=timeout)
    key = [harness.GENERATION_FORMAT, job, version, backend, harness.job_hash(job, version), tree_hash(snapshot_dir)]
    if extra_args:
        key.append(list(map(str, extra_args)))
    return harness.cached_run(job, version, f"verify-{job}-{version}-{backend}", key, args, timeout=timeout)


def verify_refused(job: str, version: str, snapshot_dir: Path, expect: str, backend: str = "hashmap",
                   extra_args: Sequence[str] = (), timeout: int = harness.DEFAULT_JOB_TIMEOUT) -> str:
    """Start ``job`` from ``snapshot_dir`` as :func:`verify_restore` does, where Flink must refuse it:
    the refusal's text (the error, then ``flink.log``), which must hold ``expect``. Cached by the same
    key as a restore: a refusal is as much a function of the job, the release and the snapshot's bytes
    as a success; only a refusal holding ``expect`` is kept (a timeout or another failure raises, and
    runs again next time), and a restore that succeeds raises."""
    snapshot_dir = Path(snapshot_dir).resolve()
    args = ["--backend", backend, "--restore", str(snapshot_dir), *map(str, extra_args)]
    key = [harness.GENERATION_FORMAT, job, version, backend, harness.job_hash(job, version), tree_hash(snapshot_dir),
           list(map(str, extra_args)), expect]
    digest = hashlib.sha256(json.dumps(key).encode()).hexdigest()[:12]
    out = harness.CACHE / "oracle" / f"refused-{job}-{version}-{backend}-{digest}"
    kept = out / "refusal.txt"
    with harness.locked(out):
        if kept.exists():
            return kept.read_text(encoding="utf-8")
        if out.exists():
            shutil.rmtree(out)
        try:
            harness.run_job(job, version, out, args, timeout=timeout)
        except harness.FlinkJobError as e:
            log = out / "flink.log"
            text = f"{e}\n--- flink.log ---\n"
            text += log.read_text(encoding="utf-8", errors="replace") if log.exists() else ""
            if expect not in text:
                raise
            kept.write_text(text, encoding="utf-8")
            return text
    shutil.rmtree(out, ignore_errors=True)
    raise harness.FlinkJobError(f"{job} on Flink {version} restored {snapshot_dir}; it was to refuse it ({expect!r})")


def restore_comparable(dump: dict) -> dict:
    """Normalise a dump so that a snapshot's dump and the verify-mode dump of restoring it compare
    equal: uid -> {list_state, broadcast_state, keyed_state, timers}, where UNION list state is
    the sorted union over all subtasks (that is what each subtask restores) and processing-time
    timers are dropped (verify mode cannot observe them)."""
    out = {}
    for op in dump["operators"]:
        restored = dump.get("kind") == "restored"
        union: dict[str, list] = {}
        for e in op["list_state"]:
            if e["mode"] == "UNION" and not restored:
                union.setdefault(e["state"], []).extend(e["values"])
        lists = []
        for e in op["list_state"]:
            if e["mode"] == "UNION":
                # a snapshot holds each subtask's own share; every restored subtask holds the union
                vals = e["values"] if restored else union[e["state"]]
                e = dict(e, values=sorted(vals, key=lambda v: json.dumps(v, sort_keys=True)))
            lists.append(e)
        out[op["uid"]] = {
            "list_state": lists,
            "broadcast_state": op["broadcast_state"],
            "keyed_state": op["keyed_state"],
            "timers": [t for t in op["timers"] if t["kind"] != "processing"],
        }
    return out
