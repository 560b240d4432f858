"""The runtime benchmark's keyed count on bytewax (``runtime_bench.py`` runs it when bytewax is
installed): a partitioned source of the numbers 0..n-1 (one partition per worker, resumable from
its offset) -> (key, value) -> a per-key count in ``stateful_map`` -> a discarding sink; workers
are threads of one process; recovery on, a snapshot at the end of every epoch of ``interval`` ms
(bytewax's exactly-once).
"""

from __future__ import annotations

import shutil
import tempfile
import time
from datetime import timedelta

try:
    import bytewax.operators as bytewax_operators
    from bytewax.dataflow import Dataflow
    from bytewax.inputs import FixedPartitionedSource, StatefulSourcePartition
    from bytewax.outputs import DynamicSink, StatelessSinkPartition
    from bytewax.recovery import RecoveryConfig, init_db_dir
    from bytewax.testing import cluster_main
except ImportError:  # pragma: no cover - bytewax is optional
    bytewax_operators = None

BATCH = 1000


def available() -> bool:
    return bytewax_operators is not None


if available():
    class _Range(StatefulSourcePartition):
        def __init__(self, start: int, end: int, resume: int | None):
            self.next = start if resume is None else resume
            self.end = end

        def next_batch(self):
            if self.next >= self.end:
                raise StopIteration()
            batch = list(range(self.next, min(self.next + BATCH, self.end)))
            self.next += len(batch)
            return batch

        def snapshot(self):
            return self.next

    class _Sequence(FixedPartitionedSource):
        def __init__(self, records: int, partitions: int):
            self.records = records
            self.partitions = partitions

        def list_parts(self):
            return [str(i) for i in range(self.partitions)]

        def build_part(self, step_id, for_part, resume_state):
            i = int(for_part)
            return _Range(self.records * i // self.partitions, self.records * (i + 1) // self.partitions, resume_state)

    class _Discard(StatelessSinkPartition):
        def write_batch(self, items) -> None:
            pass

    class _DiscardingSink(DynamicSink):
        def build(self, step_id, worker_index, worker_count):
            return _Discard()


def _count(state, value):
    n = (state or 0) + 1
    return n, n


def run(records: int, parallelism: int, keys: int, interval: int) -> float:
    """Records per second of the keyed count with recovery (a snapshot every ``interval`` ms)."""
    db = tempfile.mkdtemp(prefix="fstate-bench-bytewax-")
    try:
        init_db_dir(db, parallelism)
        flow = Dataflow("keyed-count")
        numbers = bytewax_operators.input("src", flow, _Sequence(records, parallelism))
        keyed = bytewax_operators.key_on("key", numbers, lambda i: str(i % keys))
        counts = bytewax_operators.stateful_map("count", keyed, _count)
        bytewax_operators.output("sink", counts, _DiscardingSink())
        t0 = time.perf_counter()
        cluster_main(flow, [], 0, epoch_interval=timedelta(milliseconds=interval),
                     recovery_config=RecoveryConfig(db), worker_count_per_proc=parallelism)
        return records / (time.perf_counter() - t0)
    finally:
        shutil.rmtree(db, ignore_errors=True)
