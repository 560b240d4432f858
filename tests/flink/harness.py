"""Real-Apache-Flink "oracle" harness.

Compiles the small Java jobs in ``tests/flink/jobs/v2`` (for Flink 1.x: their port by
``jobs_v1.py``, generated at compile time) against the jars of a Flink release, runs them in a
local MiniCluster (one JVM per job), and returns the snapshot they took together with
``dump.json``, the job's own record of exactly what state that snapshot holds.

Public API::

    RELEASES, release(version) -> Release             # the releases (tests/flink/releases.py): API flavour,
                                                      # `_metadata` version, which jobs run, default-suite share
    MATRIX_VERSIONS, SAMPLE_VERSIONS, INTERNAL_STATE_VERSIONS   # what the suite runs (FSTATE_FLINK_ALL=1: all)
    flink_lib_dir(version="2.3.0") -> Path            # directory of Flink jars
    compile_jobs(version="2.3.0", job=None) -> Path   # directory of compiled job classes
    job_classes(version, job) -> Path                 # what run_job runs: all jobs of a release compiled at once
    run_job(job, version, out_dir, args, timeout=..., expect_snapshot=True) -> JobResult   # always runs Flink
    generate(job="OperatorStateJob", version="2.3.0", backend="hashmap",
             snapshot="savepoint", extra_args=(), force=False) -> JobResult  # cached
    flink_unavailable_reason(version="2.3.0") -> str | None
    cached_run(job, version, name, key, args, ...) -> JobResult   # run_job once per key, kept in the cache
    require_flink(version="2.3.0") -> None            # pytest.skip() if Flink cannot run here
    locked(path) -> context manager                   # the inter-process lock of a cache entry

Restores (a job started from a snapshot, what Flink restored or refused): ``restore.py``.
SQL query changes (SqlChangeJob, several jobs per JVM, each cached on its own): ``sql_changes.py``.

Caches (all under ``$FSTATE_CACHE``, default ``~/.cache/fstate``):

* ``flink/<version>/lib``                       jars of non-installed versions
* ``flink-jobs-v1/<hash>/v1``                   the Flink 1.x job sources (hash of jobs_v1.py + v2 sources)
* ``flink-classes/<version>-<hash>``            compiled jobs (hash of Java sources + javac)
* ``oracle/<job>-<version>-<variant>-<hash>``   generated snapshots + dump.json

Only a missing ``java``/``javac`` or jars that cannot be obtained lead to a skip; every other
problem raises :class:`FlinkJobError` carrying the JVM's stderr and the tail of Flink's log.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Sequence

from tests.flink import jobs_v1
from tests.flink.releases import (ALL_RELEASES, INTERNAL_STATE_VERSIONS, MATRIX_VERSIONS, RELEASES,  # noqa: F401
                                 SAMPLE_VERSIONS, Release, Suite, release)

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
#: Jars, compiled jobs and generated snapshots, keyed by content hashes. Outside the checkout by
#: default so that a fresh clone on the same machine (CI) reuses them; FSTATE_CACHE overrides.
CACHE = Path(os.environ.get("FSTATE_CACHE") or Path.home() / ".cache" / "fstate")
JOBS = HERE / "jobs"

DEFAULT_VERSION = "2.3.0"
JOBS_NAMES = ("OperatorStateJob", "KeyedStateJob", "TypesJob")
#: Jobs whose state lives inside Flink's own operators (SQL, CEP): dump.json holds the state derived
#: from their input plus every operator of the job graph (see VERSIONS.md). Savepoints only, on the
#: releases with ``internal_state_jobs``; not part of JOBS_NAMES, whose dumps mirror state functions wrote.
INTERNAL_STATE_JOBS = ("SqlJob", "CepJob", "RetractableTopNJob")

#: Bump when the way outputs are generated changes without the Java sources changing.
GENERATION_FORMAT = 1

#: JVM-side watchdog (seconds): the job prints a thread dump and halts after this. A job takes
#: 4-6 s on a quiet machine but was seen to need over 90 s just to start on a 2-core machine under
#: a load of 20; the watchdog only has to catch a hung job, so it is generous.
DEFAULT_JOB_TIMEOUT = 300
#: Extra seconds Python waits for the JVM beyond the watchdog before killing it.
KILL_GRACE = 25

LOG4J_PROPERTIES = """\
# Written by tests/flink/harness.py: WARN and above to stderr, INFO and above to a file.
rootLogger.level = INFO
rootLogger.appenderRef.console.ref = console
rootLogger.appenderRef.file.ref = file
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss,SSS} %-5p %c{1} - %m%n
appender.console.filter.threshold.type = ThresholdFilter
appender.console.filter.threshold.level = WARN
appender.file.type = File
appender.file.name = file
appender.file.fileName = ${sys:fstate.log.file:-${sys:java.io.tmpdir}/fstate-flink.log}
appender.file.append = false
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d{HH:mm:ss,SSS} %-5p [%t] %c{1} - %m%n
"""

#: What this process ran for real (not from the cache), in order: the suite's terminal summary
#: (tests/conftest.py) prints it, so every run shows what a cold cache costs.
LEDGER: list["LedgerEntry"] = []


@dataclass(frozen=True)
class LedgerEntry:
    what: str  # "javac" or "java"
    job: str
    version: str
    seconds: float
    #: the test that needed it (pytest's PYTEST_CURRENT_TEST, without the phase)
    test: str = field(default_factory=lambda: os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" ", 1)[0])


# Noise Flink always prints at WARN in a MiniCluster; dropped from error messages only.
_NOISE = ("DefaultDelegationTokenManager", "WebMonitorUtils")


class FlinkUnavailable(RuntimeError):
    """This machine cannot run Flink: no JDK, or the Flink jars cannot be obtained."""


class FlinkJobError(RuntimeError):
    """A Flink job (or its compilation) failed. The message carries the evidence."""


@dataclass
class JobResult:
    job: str
    version: str
    out_dir: Path
    dump: dict
    seconds: float
    stdout: str = ""
    stderr: str = ""
    cached: bool = False
    args: list[str] = field(default_factory=list)

    @property
    def snapshot_dir(self) -> Path:
        """The savepoint directory or the ``chk-N`` directory."""
        return self.out_dir / self.dump["snapshot_path"]

    @property
    def metadata_path(self) -> Path:
        return self.snapshot_dir / "_metadata"

    @property
    def dump_path(self) -> Path:
        return self.out_dir / "dump.json"

    @property
    def log_path(self) -> Path:
        return self.out_dir / "flink.log"

    def operator(self, uid: str) -> dict:
        for op in self.dump["operators"]:
            if op["uid"] == uid:
                return op
        raise KeyError(uid)


# --------------------------------------------------------------------------- utilities


def api_flavour(version: str) -> str:
    """``v2`` or ``v1``: ``jobs/v2`` or its 1.x port (see :func:`job_sources`)."""
    return release(version).flavour


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Inter-process lock (pytest-xdist, parallel CLI runs) on ``path``.lock."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(str(path) + ".lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _tail(text: str, lines: int = 60) -> str:
    parts = text.splitlines()
    return "\n".join(parts[-lines:])


def _java_tools() -> tuple[str, str]:
    java_home = os.environ.get("JAVA_HOME")
    cands = []
    if java_home:
        cands.append((Path(java_home) / "bin" / "java", Path(java_home) / "bin" / "javac"))
    java, javac = shutil.which("java"), shutil.which("javac")
    if java and javac:
        cands.append((Path(java), Path(javac)))
    for j, jc in cands:
        if j.exists() and jc.exists():
            return str(j), str(jc)
    raise FlinkUnavailable("javac/java not found on PATH (a JDK 11+ is needed to compile and run the Flink jobs)")


@functools.lru_cache(maxsize=None)
def _javac_version(javac: str) -> str:
    r = subprocess.run([javac, "-version"], capture_output=True, text=True)
    return (r.stdout + r.stderr).strip()


# --------------------------------------------------------------------------- jars


def _installed_pyflink_lib(version: str) -> Path | None:
    try:
        import importlib.util

        spec = importlib.util.find_spec("pyflink")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for loc in spec.submodule_search_locations:
        lib = Path(loc) / "lib"
        if (lib / f"flink-dist-{version}.jar").exists():
            return lib
    return None


def flink_lib_dir(version: str = DEFAULT_VERSION) -> Path:
    """Directory holding the Flink ``version`` jars (``flink-dist-<version>.jar`` and friends).

    The installed ``apache-flink-libraries`` (pyflink/lib) is used when it is that version;
    otherwise the sdist is fetched once with ``pip download --no-deps`` into
    ``.cache/flink/<version>/download`` and its ``deps/lib`` extracted to
    ``.cache/flink/<version>/lib``. Raises FlinkUnavailable when that is impossible.
    """
    installed = _installed_pyflink_lib(version)
    if installed is not None:
        return installed
    base = CACHE / "flink" / version
    lib = base / "lib"
    marker = lib / ".complete"
    if marker.exists():
        return lib
    with locked(base / "fetch"):
        if marker.exists():
            return lib
        dl = base / "download"
        dl.mkdir(parents=True, exist_ok=True)
        tarballs = sorted(dl.glob(f"apache-flink-libraries-{version}.tar.gz")) + sorted(
            dl.glob(f"apache_flink_libraries-{version}.tar.gz")
        )
        if not tarballs:
            cmd = [
                sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                "--disable-pip-version-check", "-d", str(dl), f"apache-flink-libraries=={version}",
            ]
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
            tarballs = sorted(dl.glob("apache*flink*libraries-*.tar.gz"))
            if r.returncode != 0 or not tarballs:
                raise FlinkUnavailable(
                    f"cannot download apache-flink-libraries=={version}: {_tail(r.stdout + r.stderr, 15)}"
                )
        if lib.exists():
            shutil.rmtree(lib)
        tmp = base / "lib.tmp"
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir(parents=True)
        with tarfile.open(tarballs[0]) as tf:
            for m in tf.getmembers():
                parts = Path(m.name).parts
                if m.isfile() and len(parts) == 4 and parts[1:3] == ("deps", "lib") and m.name.endswith(".jar"):
                    src = tf.extractfile(m)
                    assert src is not None
                    with src, open(tmp / parts[3], "wb") as dst:
                        shutil.copyfileobj(src, dst)
        if not (tmp / f"flink-dist-{version}.jar").exists():
            raise FlinkUnavailable(f"{tarballs[0]} holds no deps/lib/flink-dist-{version}.jar")
        tmp.rename(lib)
        marker.write_text(tarballs[0].name + "\n")
        # The sdist also holds opt/, plugins/ and Python sources we never use: drop it.
        for t in tarballs:
            t.unlink()
    return lib


def _classpath(lib: Path, *extra: Path) -> str:
    return os.pathsep.join([*(str(e) for e in extra), str(lib / "*")])


# --------------------------------------------------------------------------- compile


def job_sources(version: str = DEFAULT_VERSION) -> list[Path]:
    """Java sources compiled for ``version``: ``jobs/common`` plus ``jobs/v2`` or, for Flink 1.x,
    its port generated by ``jobs_v1.py`` into the cache."""
    flavour = JOBS / "v2"
    if api_flavour(version) == "v1":
        try:
            flavour = jobs_v1.sources_dir(CACHE / "flink-jobs-v1", locked)
        except jobs_v1.PortError as e:
            raise FlinkJobError(str(e)) from None
    srcs = sorted((JOBS / "common").glob("*.java")) + sorted(flavour.glob("*.java"))
    if not srcs:
        raise FlinkJobError(f"no Java sources in {flavour}")
    return srcs


def _job_files(job: str, version: str) -> list[Path]:
    """``job``'s source plus every source whose class it mentions, transitively (default-package
    classes can only be used by name)."""
    import re

    srcs = {p.stem: p for p in job_sources(version)}
    if job not in srcs:
        raise FlinkJobError(f"no job {job!r} for Flink {version} (have {sorted(srcs)})")
    needed: set[str] = set()
    todo = [job]
    while todo:
        name = todo.pop()
        if name in needed:
            continue
        needed.add(name)
        code = srcs[name].read_text(encoding="utf-8")
        code = re.sub(r"'(?:\\.|[^'\\\n])+'", "''", code)  # char literals (may be '"')
        code = re.sub(r'"(?:\\.|[^"\\\n])*"', '""', code)  # string literals
        code = re.sub(r"/\*.*?\*/", " ", code, flags=re.S)  # block comments
        code = re.sub(r"//[^\n]*", " ", code)  # line comments
        words = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", code))
        todo.extend(n for n in srcs if n in words and n not in needed)
    return [srcs[n] for n in sorted(needed)]


def _hash_files(version: str, files: Sequence[Path]) -> str:
    h = hashlib.sha256()
    h.update(version.encode())
    for p in files:
        h.update(p.parent.name.encode() + b"/" + p.name.encode() + b"\0" + p.read_bytes() + b"\0")
    _, javac = _java_tools()
    h.update(_javac_version(javac).encode())
    return h.hexdigest()[:16]


def sources_hash(version: str = DEFAULT_VERSION) -> str:
    """Content hash of all job sources used for ``version`` (plus the javac in use)."""
    return _hash_files(version, job_sources(version))


def job_hash(job: str, version: str = DEFAULT_VERSION) -> str:
    """Content hash of what ``job``'s classes and outputs depend on (see ``_job_files``), the
    Flink version and javac. Editing an unrelated job invalidates nothing of ``job``'s."""
    return _hash_files(version, _job_files(job, version))


def compile_jobs(version: str = DEFAULT_VERSION, job: str | None = None) -> Path:
    """Compile the jobs for ``version`` once per content hash; return the classes directory.

    With ``job``, only that job and the sources it uses are compiled (into a directory of its
    own), so a broken unrelated job cannot stop it.
    """
    _, javac = _java_tools()
    lib = flink_lib_dir(version)
    if job is None:
        files = job_sources(version)
        out = CACHE / "flink-classes" / f"{version}-{_hash_files(version, files)}"
    else:
        files = _job_files(job, version)
        out = CACHE / "flink-classes" / f"{version}-{job}-{_hash_files(version, files)}"
    marker = out / ".complete"
    failed = out.with_name(out.name + ".failed")  # javac's errors, kept: not retried for the same sources
    if marker.exists():
        return out
    with locked(out):
        if marker.exists():
            return out
        if failed.exists():
            raise FlinkJobError(failed.read_text(encoding="utf-8"))
        if out.exists():
            shutil.rmtree(out)
        tmp = out.with_name(out.name + ".tmp")
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir(parents=True)
        cmd = [javac, "-encoding", "UTF-8", "-nowarn", "-g", "-d", str(tmp), "-cp", _classpath(lib),
               *map(str, files)]
        t0 = time.monotonic()
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        LEDGER.append(LedgerEntry("javac", job or "(all jobs)", version, time.monotonic() - t0))
        if r.returncode != 0:
            shutil.rmtree(tmp, ignore_errors=True)
            message = f"javac failed for Flink {version}:\n{r.stdout}\n{r.stderr}"
            failed.write_text(message, encoding="utf-8")
            raise FlinkJobError(message)
        tmp.rename(out)
        marker.write_text(_javac_version(javac) + "\n")
    return out


def job_classes(version: str, job: str) -> Path:
    """The classes ``job`` runs from: every job of ``version`` compiled at once (one javac per
    release and source change), or, when some other job does not compile, ``job`` on its own."""
    try:
        return compile_jobs(version)
    except FlinkJobError:
        return compile_jobs(version, job)


def log4j_config() -> Path:
    p = CACHE / "flink-log4j2.properties"
    if not p.exists() or p.read_text() != LOG4J_PROPERTIES:
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(LOG4J_PROPERTIES)
        tmp.replace(p)
    return p


# --------------------------------------------------------------------------- run


def run_job(
    job: str,
    version: str,
    out_dir: Path,
    args: Sequence[str],
    timeout: int = DEFAULT_JOB_TIMEOUT,
    expect_snapshot: bool = True,
) -> JobResult:
    """Run ``job`` (a Java main class of :func:`job_sources`) on Flink ``version`` writing into ``out_dir``.

    ``args`` are passed to the job after ``--out <out_dir> --timeout <timeout>``, e.g.
    ``["--backend", "rocksdb", "--snapshot", "checkpoint"]``. ``out_dir`` must not exist or be
    empty. Raises FlinkJobError (stderr + Flink log tail) on any failure or timeout. With
    ``expect_snapshot`` the dump must name a snapshot with ``_metadata`` (jobs that write several,
    like SqlChangeJob's phases, name theirs in their own files).
    """
    java, _ = _java_tools()
    lib = flink_lib_dir(version)
    classes = job_classes(version, job)
    out_dir = Path(out_dir).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    if any(out_dir.iterdir()):
        raise FlinkJobError(f"output directory {out_dir} is not empty")
    log_file = out_dir / "flink.log"
    # the JVM's own scratch (the planner jar the table-planner loader unpacks, 45 MB a SQL job; the
    # blob caches) goes to a directory removed after the run, not into the machine's /tmp
    jvm_tmp = tempfile.TemporaryDirectory(prefix="fstate-jvm-", ignore_cleanup_errors=True)
    cmd = [
        java,
        "-Xmx768m",
        f"-Djava.io.tmpdir={jvm_tmp.name}",
        "-XX:+UseSerialGC",
        # the C1 compiler only: an oracle job lives seconds, the C2 compiler's threads would only take
        # CPU from it and from the job beside it (about 20 % of a job's wall time on 2 cores). Not for
        # benchmarks of Flink's speed (bench/ starts its own JVMs).
        "-XX:TieredStopAtLevel=1",
        f"-Dlog4j.configurationFile={log4j_config()}",
        f"-Dfstate.log.file={log_file}",
        # Flink 1.x needs these on Java 17 (harmless on 2.x).
        "--add-opens=java.base/java.lang=ALL-UNNAMED",
        "--add-opens=java.base/java.util=ALL-UNNAMED",
        "--add-opens=java.base/java.lang.reflect=ALL-UNNAMED",
        "--add-opens=java.base/java.io=ALL-UNNAMED",
        "--add-opens=java.base/java.net=ALL-UNNAMED",
        "--add-opens=java.base/java.nio=ALL-UNNAMED",
        "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
        "--add-opens=java.base/java.util.concurrent=ALL-UNNAMED",
        "--add-opens=java.base/java.util.concurrent.atomic=ALL-UNNAMED",
        "--add-opens=java.base/java.time=ALL-UNNAMED",
        "--add-opens=java.base/java.text=ALL-UNNAMED",
        "--add-opens=java.sql/java.sql=ALL-UNNAMED",
        "-cp",
        _classpath(lib, classes),
        job,
        "--out",
        str(out_dir),
        "--timeout",
        str(timeout),
        *map(str, args),
    ]
    t0 = time.monotonic()
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout + KILL_GRACE, cwd=out_dir)
    except subprocess.TimeoutExpired as e:
        raise FlinkJobError(
            f"{job} on Flink {version} was killed after {timeout + KILL_GRACE} s\n"
            f"--- stderr ---\n{_tail(_s(e.stderr), 80)}\n--- flink.log ---\n{_log_tail(log_file)}"
        ) from None
    finally:
        jvm_tmp.cleanup()
    seconds = time.monotonic() - t0
    LEDGER.append(LedgerEntry("java", job, version, seconds))
    dump_path = out_dir / "dump.json"
    if r.returncode != 0 or not dump_path.exists():
        raise FlinkJobError(
            f"{job} on Flink {version} failed (exit {r.returncode}) args={list(args)}\n"
            f"--- stdout ---\n{_tail(r.stdout, 20)}\n--- stderr ---\n{_tail(_clean(r.stderr), 120)}\n"
            f"--- flink.log ({log_file}) ---\n{_log_tail(log_file)}"
        )
    dump = json.loads(dump_path.read_text(encoding="utf-8"))
    res = JobResult(job=job, version=version, out_dir=out_dir, dump=dump, seconds=seconds,
                    stdout=r.stdout, stderr=r.stderr, args=list(args))
    if expect_snapshot and not res.metadata_path.exists():
        raise FlinkJobError(f"{job} reported {res.snapshot_dir} but it has no _metadata")
    return res


def _s(b: bytes | str | None) -> str:
    if b is None:
        return ""
    return b if isinstance(b, str) else b.decode("utf-8", "replace")


def _clean(stderr: str) -> str:
    return "\n".join(line for line in stderr.splitlines() if not any(n in line for n in _NOISE))


def _log_tail(log_file: Path, lines: int = 80) -> str:
    if not log_file.exists():
        return "(no log file)"
    text = log_file.read_text(encoding="utf-8", errors="replace")
    # Prefer the interesting part: from the first exception onwards, if any.
    idx = min((i for i in (text.find("Exception"), text.find(" ERROR ")) if i >= 0), default=-1)
    if idx >= 0:
        start = text.rfind("\n", 0, max(0, idx - 2000)) + 1
        return _tail(text[start:], 150)
    return _tail(text, lines)


# --------------------------------------------------------------------------- cached generation


def variant_args(backend: str = "hashmap", snapshot: str = "savepoint", extra_args: Sequence[str] = ()) -> list[str]:
    if backend not in ("hashmap", "rocksdb"):
        raise ValueError(f"backend must be hashmap or rocksdb, not {backend!r}")
    if snapshot not in ("savepoint", "checkpoint"):
        raise ValueError(f"snapshot must be savepoint or checkpoint, not {snapshot!r}")
    return ["--backend", backend, "--snapshot", snapshot, *map(str, extra_args)]


def generate(
    job: str = "OperatorStateJob",
    version: str = DEFAULT_VERSION,
    backend: str = "hashmap",
    snapshot: str = "savepoint",
    extra_args: Sequence[str] = (),
    force: bool = False,
    timeout: int = DEFAULT_JOB_TIMEOUT,
) -> JobResult:
    """Run ``job`` once per (version, variant, job source hash) and cache the outputs.

    A second call (or pytest run) reuses ``.cache/oracle/...``; editing the job's Java source (or
    Oracle/Driver/Json, or anything else it uses; see :func:`job_hash`) changes the hash, so the
    job runs again. ``force`` always re-runs.
    """
    args = variant_args(backend, snapshot, extra_args)
    if job in INTERNAL_STATE_JOBS and (snapshot != "savepoint" or not release(version).internal_state_jobs):
        runs_on = ", ".join(v for v, r in RELEASES.items() if r.internal_state_jobs)
        raise ValueError(f"{job} takes savepoints on Flink {runs_on} only, not a {snapshot} on {version}")
    suffix = "-".join(a.lstrip("-") for a in extra_args)
    name = f"{job}-{version}-{backend}-{snapshot}" + (f"-{suffix}" if suffix else "")
    key = [GENERATION_FORMAT, job, version, args, job_hash(job, version)]
    return cached_run(job, version, name, key, args, timeout=timeout, force=force)


def cached_run(job: str, version: str, name: str, key: Sequence, args: Sequence[str],
               timeout: int = DEFAULT_JOB_TIMEOUT, force: bool = False, expect_snapshot: bool = True) -> JobResult:
    """:func:`run_job` once per ``key``: the outputs are kept in ``CACHE/oracle/<name>-<hash of key>``,
    and a later call with the same key (this run or a later one) reads them. Only successful runs are
    kept. ``key`` must hold GENERATION_FORMAT, the job, the version, :func:`job_hash` and everything
    else the outcome depends on; what ``args`` names by a path that changes between runs (a snapshot
    directory) by its content (:func:`tree_hash`)."""
    key = hashlib.sha256(json.dumps(list(key)).encode()).hexdigest()[:12]
    out = CACHE / "oracle" / f"{name}-{key}"
    marker = out / ".complete.json"
    with locked(out):
        if marker.exists() and not force:
            info = json.loads(marker.read_text())
            dump = json.loads((out / "dump.json").read_text(encoding="utf-8"))
            return JobResult(job=job, version=version, out_dir=out, dump=dump, seconds=info["seconds"],
                             cached=True, args=list(args))
        if out.exists():
            shutil.rmtree(out)
        res = run_job(job, version, out, args, timeout=timeout, expect_snapshot=expect_snapshot)
        marker.write_text(json.dumps({"seconds": res.seconds, "args": list(map(str, args))}) + "\n")
        return res


# --------------------------------------------------------------------------- pytest helpers


def flink_unavailable_reason(version: str = DEFAULT_VERSION) -> str | None:
    """Why Flink ``version`` cannot run here (None when it can). Does not hide job failures."""
    try:
        _java_tools()
        flink_lib_dir(version)
    except FlinkUnavailable as e:
        return str(e)
    return None


def require_flink(version: str = DEFAULT_VERSION) -> None:
    """``pytest.skip`` (with the reason) when javac is missing or the jars cannot be obtained."""
    reason = flink_unavailable_reason(version)
    if reason is not None:
        import pytest

        pytest.skip(f"Flink {version} unavailable: {reason}")
