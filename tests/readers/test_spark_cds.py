"""The Spark driver's class-data archive (readers/spark_cds.py): where it is kept, its name per Java
and Spark installation, the JVM option of a start with and without one, and the archive made whole
only when the JVM that writes it has exited. The real Spark start that writes one is
tests/writers/test_bootstrap_validation.py's real-process test."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import pytest

from fstate.readers import spark_cds


def test_the_directory_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv(spark_cds.ENV, str(tmp_path / "here"))
    assert spark_cds.directory() == tmp_path / "here"
    for off in ("off", "0", "", "No"):
        monkeypatch.setenv(spark_cds.ENV, off)
        assert spark_cds.directory() is None and spark_cds.java_option() is None
    monkeypatch.setenv(spark_cds.ENV, str(tmp_path / "a dir"))  # not one option word: not used
    assert spark_cds.java_option() is None
    monkeypatch.delenv(spark_cds.ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert spark_cds.directory() == tmp_path / "xdg" / "fstate" / "spark-cds"


def test_the_name_changes_with_sparks_jars(monkeypatch, tmp_path):
    jars = tmp_path / "spark" / "jars"
    jars.mkdir(parents=True)
    (jars / "a.jar").write_bytes(b"a")
    monkeypatch.setenv("SPARK_HOME", str(tmp_path / "spark"))
    first = spark_cds.archive_name()
    assert first == spark_cds.archive_name() and first.startswith("spark-") and first.endswith(".jsa")
    (jars / "b.jar").write_bytes(b"b")
    assert spark_cds.archive_name() != first
    monkeypatch.setenv("SPARK_HOME", str(tmp_path / "none"))
    assert spark_cds.archive_name() is None


def test_a_start_writes_one_then_maps_it(monkeypatch, tmp_path):
    monkeypatch.setenv(spark_cds.ENV, str(tmp_path))
    stale = tmp_path / ".spark-old.jsa.1-x.part"
    stale.write_bytes(b"x")
    os.utime(stale, (time.time() - 2 * spark_cds.STALE_SECONDS,) * 2)
    fresh = tmp_path / ".spark-new.jsa.2-y.part"  # another process writing now
    fresh.write_bytes(b"y")
    writing = spark_cds.java_option()
    assert "-XX:ArchiveClassesAtExit=" in writing.option and spark_cds.LOG_TO_STDERR in writing.option
    assert writing.final == tmp_path / spark_cds.archive_name() and writing.writing.parent == tmp_path
    assert not stale.exists() and fresh.exists()
    writing.final.write_bytes(b"archive")
    mapping = spark_cds.java_option()
    assert mapping.writing is None and mapping.option.endswith(f"-XX:SharedArchiveFile={writing.final}")


def _fake_jvm(path, code: int = 0) -> subprocess.Popen:
    """A process that, as the JVM with ArchiveClassesAtExit, writes the file when its input closes."""
    script = (f"import sys, time; sys.stdin.read(); time.sleep(0.3); "
              f"open({str(path)!r}, 'wb').write(b'classes'); sys.exit({code})")
    return subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE)


@pytest.mark.parametrize("code", [0, 1])
def test_the_archive_is_renamed_once_its_writer_has_exited(monkeypatch, tmp_path, code):
    monkeypatch.setenv(spark_cds.ENV, str(tmp_path))
    others = [tmp_path / f"spark-{n}.jsa" for n in range(spark_cds.KEPT)]  # other installations' archives
    for age, other in enumerate(others):
        other.write_bytes(b"old")
        os.utime(other, (time.time() - 100 * (age + 1),) * 2)
    archive = spark_cds.java_option()
    handlers = []
    monkeypatch.setattr(spark_cds.atexit, "register", handlers.append)
    # the handler stops the active Spark session, as at exit: not the one this worker's other tests share
    from pyspark.sql import SparkSession
    monkeypatch.setattr(SparkSession, "getActiveSession", classmethod(lambda cls: None))
    process = _fake_jvm(archive.writing, code)
    spark_cds.finish(archive, process)
    assert not archive.final.exists() and process.poll() is None  # nothing until this process exits
    handlers[0]()
    assert process.returncode == code and not archive.writing.exists()
    assert archive.final.exists() == (code == 0)  # a JVM that failed leaves no archive
    # a new archive: the oldest of the others removed, the newest KEPT kept
    assert [other.exists() for other in others] == [True] * (spark_cds.KEPT - 1) + [code != 0]


@pytest.mark.skipif(not os.path.exists(f"/proc/{os.getpid()}/stat"), reason="no /proc")
def test_a_writer_is_waited_for_while_it_works_and_stopped_when_it_does_not(monkeypatch, tmp_path):
    """On a loaded machine the JVM may take minutes to write its archive: it is waited for as long
    as it uses CPU, past WRITE_SECONDS; one idle for WRITE_SECONDS is stopped (it writes nothing after)."""
    monkeypatch.setattr(spark_cds, "WRITE_SECONDS", 1.5)
    monkeypatch.setattr(spark_cds, "POLL_SECONDS", 0.2)
    spin = "import time\nend = time.time() + 4\nwhile time.time() < end: pass"
    busy = subprocess.Popen([sys.executable, "-c", spin])
    started = time.monotonic()
    assert spark_cds.wait_while_working(busy) == 0 and time.monotonic() - started > 3
    idle = subprocess.Popen([sys.executable, "-c", f"import time; time.sleep(20); open({str(tmp_path / 'late')!r}, 'w')"])
    started = time.monotonic()
    assert spark_cds.wait_while_working(idle) is None and time.monotonic() - started < 10
    assert idle.poll() is not None and not (tmp_path / "late").exists()


@pytest.mark.skipif(shutil.which("java") is None, reason="no java")
def test_the_jvm_starts_on_a_damaged_archive_and_says_so_on_stderr_only(tmp_path):
    """What the design relies on: a JVM given an archive it cannot map starts without it, its warning
    on stderr (which session.py filters), none on stdout (the command's output)."""
    damaged = tmp_path / "damaged.jsa"
    damaged.write_bytes(b"not an archive" * 1000)
    option = f"{spark_cds.LOG_TO_STDERR} -XX:SharedArchiveFile={damaged}"
    result = subprocess.run(["java", *option.split(), "-version"], capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout == "", result.stdout
    assert "version" in result.stderr
