"""PySpark's worker daemon for sessions that run fstate's Python tasks (``spark.python.daemon.module``, set by
``session.get_spark(tasks_only=True)``): PySpark's daemon forks a worker process per task slot from itself, so
importing what a task runs (PySpark's worker, the reader and pyarrow) here, once, spares every worker its
own imports (~0.4 CPU-s each). The daemon started for other workers (Spark's lookup of Python data sources)
imports nothing more."""

import sys

if __name__ == "__main__":
    if sys.argv[1:2] == ["pyspark.worker"]:
        import pyspark.worker  # noqa: F401

        from fstate.readers import engine_files, spark_tasks  # noqa: F401
    from pyspark.daemon import manager

    manager()
