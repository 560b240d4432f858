"""Getting a SparkSession: the active one (notebook, spark-submit) or a quiet local one; either way
with the ``flink-savepoint`` data source registered on it (see datasource.register)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from . import register

_LOG4J = (Path(__file__).parent / "log4j2.properties").as_uri()


def get_spark(master: str | None = None, conf: dict[str, str] | None = None):
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None and master is None and not conf:
        register(active)
        return active
    # Executors must run the same interpreter that has fstate installed.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = (SparkSession.builder.appName("fstate")
               .master(master or os.environ.get("FSTATE_SPARK_MASTER", "local[*]"))
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "8")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile={_LOG4J}")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.python.worker.reuse", "true"))
    for k, v in (conf or {}).items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark
