"""Getting a SparkSession: the active one (notebook, spark-submit) or a quiet local one; either way
with the ``flink-savepoint`` data source registered on it (see datasource.register).

Quiet: the JVM's start-up lines never reach the terminal. Spark's launcher always gives the driver JVM
``--add-modules=jdk.incubator.vector`` (``JavaModuleOptions``), on which the JVM prints "WARNING: Using
incubator modules"; fstate starts the JVM itself with its stderr piped through a filter that drops that
line and passes everything else on. "Setting default log level" is Spark's note when the log level of an
interactive session is not configured: fstate's ``log4j2.properties`` configures it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from pathlib import Path

from . import register
from . import spark_cds

_LOG4J = (Path(__file__).parent / "log4j2.properties").as_uri()


def get_spark(master: str | None = None, conf: dict[str, str] | None = None, tasks_only: bool = False):
    """The active session (when neither ``master`` nor ``conf`` is given), else a new one. ``tasks_only``: the
    session only runs Python tasks (``spark_tasks``: the rows never enter the JVM), so the driver's JVM
    compiles with C1 alone (``-XX:TieredStopAtLevel=1``): its C2 compiler spends ~4 CPU-s on start-up code
    for nothing, a third of a 10 M-key ``read --out`` on Spark; and its Python workers are forked from a
    daemon that has imported the reader (:mod:`.spark_daemon`); the ``flink-savepoint`` data source is not
    registered (Spark would start a Python process to look up data sources; a later ``get_spark()``
    registers it on the active session); and, with no session active, no SparkSession is made
    (:class:`TasksSession`). A ``spark.driver.extraJavaOptions`` of ``conf`` replaces fstate's, this
    too."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None and master is None and not conf:
        register(active)
        return active
    java_options = f"-Dlog4j2.configurationFile={_LOG4J} -XX:+UseParallelGC" + (
        " -XX:TieredStopAtLevel=1" if tasks_only else "")
    # Executors must run the same interpreter that has fstate installed.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    settings = {"spark.app.name": "fstate",
                "spark.master": master or os.environ.get("FSTATE_SPARK_MASTER", "local[*]"),
                "spark.ui.enabled": "false",
                "spark.sql.shuffle.partitions": "8",
                "spark.sql.session.timeZone": "UTC",
                # the throughput collector: fstate's jobs are batch reads and writes
                "spark.driver.extraJavaOptions": java_options,
                "spark.driver.memory": _driver_memory(),
                "spark.ui.showConsoleProgress": "false",
                "spark.python.worker.reuse": "true"}
    if tasks_only:
        settings["spark.python.daemon.module"] = "fstate.readers.spark_daemon"
    settings.update(conf or {})
    _start_quiet_jvm(settings, own_java_options=settings["spark.driver.extraJavaOptions"] == java_options)
    if tasks_only:
        return TasksSession(settings)
    builder = SparkSession.builder
    for k, v in settings.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    if not tasks_only:  # registering makes Spark look up Python data sources: a Python process, ~0.75 CPU-s
        register(spark)
    return spark


class TasksSession:
    """Spark for fstate's Python tasks alone (``get_spark(tasks_only=True)``, no session active): a
    SparkContext made with the session's settings (the one running already, if any), without the
    SparkSession, whose SQL state takes about 0.8 s to make on this machine and is never used (the
    tasks' rows never enter the JVM). What runs tasks (``spark_tasks``) asks only for
    ``sparkContext``, as of a SparkSession; a later ``get_spark()`` makes a session on this context."""

    def __init__(self, settings: dict[str, str]):
        from pyspark import SparkConf, SparkContext

        conf = SparkConf()  # Spark's defaults and the JVM's spark.* properties, as a session's builder
        for key, value in settings.items():
            conf.set(key, value)
        self.sparkContext = SparkContext.getOrCreate(conf)
        self.sparkContext.setLogLevel("ERROR")

    def stop(self) -> None:
        self.sparkContext.stop()


def _driver_memory() -> str:
    """The driver JVM's heap (in ``local[*]`` also the executors'): a quarter of this machine's memory,
    from 1 to 4 GiB (Spark's default of 1 GiB spends a large read's time collecting garbage)."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # not a POSIX system: Spark's default
        return "1g"
    return f"{max(1, min(4, total // 4 // (1 << 30)))}g"


#: JVM start-up lines that say nothing to a user of fstate (the class-data archive's warnings
#: included: an archive the JVM cannot use, or classes it cannot archive, change nothing but the speed)
_JVM_NOISE = re.compile(rb"^(WARNING: Using incubator modules|Setting default log level to |To adjust logging level use "
                        rb"|\[[0-9.]+s\]\[(warning|info)\]\[cds)")


def _start_quiet_jvm(settings: dict[str, str], own_java_options: bool = False) -> None:
    """Start PySpark's JVM (when none runs yet) with its stderr filtered (see the module doc);
    ``own_java_options`` (the driver's Java options are fstate's): its classes from the class-data
    archive (:mod:`.spark_cds`)."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    if SparkContext._gateway is not None or "PYSPARK_GATEWAY_PORT" in os.environ:
        return
    archive = spark_cds.java_option() if own_java_options else None
    if archive is not None:
        settings = {**settings, "spark.driver.extraJavaOptions": settings["spark.driver.extraJavaOptions"] + " "
                    + archive.option}
    spark_conf = SparkConf(loadDefaults=False)
    for key, value in settings.items():
        spark_conf.set(key, value)
    gateway = launch_gateway(spark_conf, popen_kwargs={"stderr": subprocess.PIPE})
    if archive is not None and archive.writing is not None:
        spark_cds.finish(archive, gateway.proc)
    threading.Thread(target=_forward_stderr, args=(gateway.proc.stderr,), daemon=True,
                     name="fstate-jvm-stderr").start()
    SparkContext._ensure_initialized(gateway=gateway, conf=spark_conf)


def _forward_stderr(stream) -> None:
    """The JVM's stderr, less its start-up noise, onto this process's stderr."""
    for line in iter(stream.readline, b""):
        if _JVM_NOISE.match(line):
            continue
        try:
            os.write(2, line)
        except OSError:
            return
