"""The Spark driver JVM's classes from an archive (the JVM's class-data sharing, CDS): a local Spark
session's start loads some 10,000 classes, which takes about half of its ~5 s; mapped from an archive
made by an earlier start, the same start takes about 2.5 s.

The archive is made once per Java and Spark installation (its name is a hash of the ``java`` binary's
release and of Spark's jars): a start without one asks the JVM to write its loaded classes at exit
(``-XX:ArchiveClassesAtExit``) to a file of its own, which becomes the archive only when that JVM has
exited (:func:`finish`, at this process's exit): a later start never maps a half-written file. A start
with one maps it (``-XX:SharedArchiveFile``); a JVM that finds it unusable (another classpath, a
damaged file) starts without it and says so in a line ``session`` drops.

Where: ``FSTATE_SPARK_CDS`` (a directory; ``off``: never), else ``$XDG_CACHE_HOME/fstate/spark-cds``
(``~/.cache/fstate/spark-cds``). The archive takes about 120 MB (the newest three are kept: other
Spark or Java installations, or the ones before an upgrade); the first start that writes it waits
at exit for the JVM to write it (some seconds). Only fstate's own driver JVM (its Java options not
replaced by ``--conf spark.driver.extraJavaOptions=…``) uses it; executors on a cluster start as
before."""

from __future__ import annotations

import atexit
import hashlib
import os
import shutil
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

#: the environment variable naming the archives' directory, or "off"
ENV = "FSTATE_SPARK_CDS"
#: how long this process waits at exit for the JVM writing a new archive to make progress (where
#: ``/proc`` tells its CPU time, it is waited for as long as that grows, up to :data:`MAX_WRITE_SECONDS`:
#: on a loaded machine the writing takes minutes), before stopping it: no archive this time
WRITE_SECONDS = 60
MAX_WRITE_SECONDS = 900
POLL_SECONDS = 1.0
#: the JVM's own log lines (the archive's warnings among them) to stderr, where ``session`` filters
#: them, never to stdout (the JVM's default), which is the command's output (``--json``)
LOG_TO_STDERR = "-Xlog:disable -Xlog:all=warning:stderr"


def directory() -> Path | None:
    """Where the archives are kept (None: not used)."""
    chosen = os.environ.get(ENV)
    if chosen is not None:
        return None if chosen.strip().lower() in ("", "off", "0", "false", "no") else Path(chosen)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "fstate" / "spark-cds"


def _java_home() -> Path | None:
    home = os.environ.get("JAVA_HOME")
    if home:
        return Path(home)
    java = shutil.which("java")
    return Path(os.path.realpath(java)).parent.parent if java else None


def _spark_jars() -> Path | None:
    home = os.environ.get("SPARK_HOME")
    if home:
        return Path(home) / "jars"
    import pyspark

    return Path(pyspark.__file__).parent / "jars"


def archive_name() -> str | None:
    """The archive's file name for this Java and Spark (None: either is not found)."""
    java, jars = _java_home(), _spark_jars()
    if java is None or jars is None or not jars.is_dir():
        return None
    digest = hashlib.sha256()
    release = java / "release"
    digest.update(release.read_bytes() if release.is_file() else str(java).encode())
    for jar in sorted(jars.iterdir()):
        stat = jar.stat()
        digest.update(f"{jar.name}\0{stat.st_size}\0{int(stat.st_mtime)}\n".encode())
    return f"spark-{digest.hexdigest()[:20]}.jsa"


@dataclass(frozen=True)
class Archive:
    """The JVM option that maps the archive, or that writes it at exit (:attr:`writing`, to become
    :attr:`final`)."""

    option: str
    writing: Path | None = None
    final: Path | None = None


def java_option() -> Archive | None:
    """The class-data option for a driver JVM about to start (None: archives are off or cannot be
    kept here)."""
    where = directory()
    if where is None or any(c.isspace() or c in "'\"" for c in str(where)):
        return None  # a path Spark would split or unquote in the driver's Java options
    name = archive_name()
    if name is None:
        return None
    final = where / name
    if final.is_file():
        return Archive(f"{LOG_TO_STDERR} -XX:SharedArchiveFile={final}")
    try:
        where.mkdir(parents=True, exist_ok=True)
        _remove_stale(where)
    except OSError:
        return None
    if not os.access(where, os.W_OK):
        return None
    writing = where / f".{name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.part"
    return Archive(f"{LOG_TO_STDERR} -XX:ArchiveClassesAtExit={writing}", writing, final)


#: a file being written for longer than this was left by a process that did not finish it
STALE_SECONDS = 3600
#: archives kept (of as many Java and Spark installations): a new one removes the oldest beyond these
KEPT = 3


def _remove_stale(where: Path) -> None:
    """Archives left half written (their process killed) removed."""
    now = time.time()
    for part in where.glob(".spark-*.part"):
        try:
            if now - part.stat().st_mtime > STALE_SECONDS:
                part.unlink()
        except OSError:
            pass


def _keep_newest(where: Path) -> None:
    """The :data:`KEPT` newest archives kept (another Spark or Java each; an upgrade leaves the old)."""
    try:
        archives = sorted(where.glob("spark-*.jsa"), key=lambda p: p.stat().st_mtime, reverse=True)
        for old in archives[KEPT:]:
            old.unlink()
    except OSError:
        pass


def finish(archive: Archive, process: subprocess.Popen) -> None:
    """At this process's exit: the JVM that writes ``archive`` stopped (its input closed, as when
    this process ends), waited for, and its file made the archive when it is complete."""

    def done() -> None:
        try:
            from pyspark.sql import SparkSession

            active = SparkSession.getActiveSession()
            if active is not None:
                active.stop()
            if process.stdin is not None:
                process.stdin.close()
            code = wait_while_working(process)
        except BaseException:  # noqa: BLE001 - at exit (Ctrl-C included): no archive this time, no traceback
            code = None
            _stop(process)
        try:
            if code == 0 and archive.writing.is_file() and archive.writing.stat().st_size > 0:
                os.replace(archive.writing, archive.final)
                _keep_newest(archive.final.parent)
            else:
                archive.writing.unlink(missing_ok=True)
        except OSError:
            pass

    atexit.register(done)


def wait_while_working(process: subprocess.Popen) -> int | None:
    """``process``'s exit code, waited for while it works: until it has used no CPU for
    :data:`WRITE_SECONDS` (without ``/proc``: for that long in all), at most :data:`MAX_WRITE_SECONDS`;
    then it is stopped (None), so that it leaves no file behind."""
    start = idle_since = time.monotonic()
    used = _cpu_seconds(process.pid)
    while True:
        try:
            return process.wait(POLL_SECONDS)
        except subprocess.TimeoutExpired:
            pass
        now, before, used = time.monotonic(), used, _cpu_seconds(process.pid)
        if used is not None and before is not None and used > before:
            idle_since = now
        if now - idle_since >= WRITE_SECONDS or now - start >= MAX_WRITE_SECONDS:
            _stop(process)
            return None


def _cpu_seconds(pid: int) -> float | None:
    """A process's CPU seconds (user + system) from ``/proc``, None where there is none."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def _stop(process: subprocess.Popen) -> None:
    try:
        process.kill()
        process.wait(10)
    except (OSError, subprocess.TimeoutExpired):
        pass
