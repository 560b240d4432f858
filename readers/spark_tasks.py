"""Partition tasks on Spark: the embedded engine's per-partition work (``engine.map_partitions``) run as one
Spark task per partition, on whatever cluster the session has (``local[*]``, or ``--master``).

``fstate read --out DIR`` with Spark writes through here: each task decodes its partition with the
columnar decoder and writes its part file with the same Arrow writers as the embedded engine
(``engine_files``), so both engines give the same files, and the rows never cross into the JVM (no
Arrow → Spark rows → Spark's writers). DataFrames (``fstate sql``, the ``flink-savepoint`` data source)
go through Spark's rows as before. The directory must be one every executor and the driver see (a local
path in ``local[*]``, a shared file system on a cluster), as for Spark's own writers.

Other per-piece work runs the same way (:func:`map_tasks`): ``fstate sizes`` measures a piece of keyed
state, or a subtask's operator state, a task each, and merges the partial results on the driver.
"""

from __future__ import annotations

import threading
import uuid
from typing import Callable

from ..savepoint.errors import carried_to_driver
from . import engine
from . import tables


def map_partitions(spark, table: tables.Table, task: Callable, progress: engine.Progress | None = None,
                   arguments: list[tuple] | None = None) -> list:
    """``task(shippable table, partition, *arguments[i])`` for every partition of ``table``, one Spark task
    each; the results in partition order. ``task`` (a module-level function) returns ``(result, rows)``;
    ``progress`` hears of the bytes of the partitions as Spark's tasks complete, and of the rows at the end."""
    partitions = list(table.partitions)
    if not partitions:
        return []
    arguments = arguments or [()] * len(partitions)
    sizes = [engine.partition_bytes(partition) for partition in partitions] if progress is not None else None
    results = map_tasks(spark, f"fstate: {table.name}", task, [(partition, *extra) for partition, extra
                                                                in zip(partitions, arguments)],
                        shared=(engine.shippable(table),), progress=progress, sizes=sizes)
    if progress is not None:
        progress(sum(rows for _, rows in results), 0)
    return [result for result, _ in results]


def map_tasks(spark, description: str, task: Callable, items: list[tuple], shared: tuple = (),
              progress: engine.Progress | None = None, sizes: list[int] | None = None) -> list:
    """``task(*shared, *items[i])`` for every item, one Spark task each (``task`` a module-level function,
    the items and results picklable); the results in item order. fstate errors raised in a task are noted
    for the driver (:func:`..savepoint.errors.carried_to_driver`: ``spark_errors`` raises them again).
    ``progress`` (with the items' ``sizes`` in bytes) hears of the bytes of the tasks as they complete."""
    if not items:
        return []
    indexed = list(enumerate(items))
    context = spark.sparkContext
    group = f"fstate-{uuid.uuid4().hex}"
    context.setJobGroup(group, description, interruptOnCancel=True)

    def run(slice_items):
        with carried_to_driver():
            for index, item in slice_items:
                yield index, task(*shared, *item)

    done = threading.Event()
    watcher = None
    if progress is not None and sizes:
        watcher = threading.Thread(target=_watch, args=(context, group, sizes, progress, done), daemon=True,
                                   name="fstate-spark-progress")
        watcher.start()
    try:
        results = context.parallelize(indexed, len(indexed)).mapPartitions(run).collect()
    finally:
        done.set()
        if watcher is not None:
            watcher.join()
        context.setLocalProperty("spark.jobGroup.id", None)
    results.sort(key=lambda item: item[0])
    return [result for _, result in results]


def _watch(context, group: str, sizes: list[int], progress: engine.Progress, done: threading.Event) -> None:
    """Reports the bytes of completed tasks (their partitions' mean size: Spark's status does not say
    which ones completed) until ``done``."""
    mean = sum(sizes) / len(sizes)
    reported = 0
    tracker = context.statusTracker()
    while True:
        finished = done.wait(0.5)
        completed = 0
        for job_id in tracker.getJobIdsForGroup(group):
            job = tracker.getJobInfo(job_id)
            for stage_id in (job.stageIds if job is not None else []):
                stage = tracker.getStageInfo(stage_id)
                if stage is not None:
                    completed += stage.numCompletedTasks
        if finished:
            completed = len(sizes)
        target = round(min(completed, len(sizes)) * mean)
        if target > reported:
            progress(0, target - reported)
            reported = target
        if finished:
            return
