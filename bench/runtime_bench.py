"""Throughput of fstate's stream runtime: records per second, checkpointing off and on.

    python bench/runtime_bench.py [--records 400000] [--parallelism 2] [--interval 100] [--keys 1000]

The job: a parallel sequence source -> map to (key, value) -> key_by -> a keyed count in
ValueState<Long> -> discarding sink; every subtask is a thread, records cross two network edges
(rebalance-free forward chain source->map, hash partition to the keyed operator). With
checkpointing on, every checkpoint is aligned (EXACTLY_ONCE) and written as a Flink checkpoint.
The windowed job counts per key in tumbling event-time windows of 10 s (each source subtask reads
one split, its record n at timestamp n ms, watermarks after every 100 records: about 10 records
per key and window): window-contents ReducingState and window timers.

When bytewax is installed (``pip install bytewax``), the same keyed count runs on bytewax in the
same run (``bench/bytewax_bench.py``: workers = parallelism, threads of one process, recovery on
with a snapshot every epoch of ``--interval`` ms: its exactly-once) and the ratio is printed.
Prints numbers only: nothing here asserts on time.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import tempfile
import time

from fstate.runtime import (CheckpointingMode, DiscardingSink, KeyedProcessFunction, StreamExecutionEnvironment,
                            TumblingEventTimeWindows, Types, ValueStateDescriptor, WatermarkStrategy)


class Count(KeyedProcessFunction):
    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count", Types.LONG))

    def process_element(self, value, ctx):
        self.count.update((self.count.value() or 0) + 1)
        return None


def _add(a, b):
    return (a[0], a[1] + b[1])


def run(records: int, parallelism: int, keys: int, interval: int | None, mode=CheckpointingMode.EXACTLY_ONCE,
        stateless: bool = False, windowed: bool = False) -> tuple[float, int]:
    tmp = tempfile.mkdtemp(prefix="fstate-bench-")
    try:
        env = StreamExecutionEnvironment()
        env.set_parallelism(parallelism)
        if interval:
            env.enable_checkpointing(interval, mode)
            env.get_checkpoint_config().set_checkpoint_storage(tmp)
        if windowed:  # one split per subtask, each at timestamps 0, 1, ...: the subtasks' watermarks keep pace
            chunk = records // parallelism
            src = env.from_sequence(0, chunk * parallelism - 1, splits=parallelism).uid("src")
            src = src.assign_timestamps_and_watermarks(
                WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda i, ts: i % chunk)).uid("wm")
        else:
            src = env.from_sequence(0, records - 1).uid("src")
        ds = src.map(lambda i: (i % keys, i)).uid("map")
        if windowed:
            (ds.map(lambda t: (t[0], 1)).uid("ones")
             .key_by(lambda t: t[0], key_type=Types.LONG).window(TumblingEventTimeWindows.of(10_000))
             .reduce(_add, value_type=Types.TUPLE(Types.LONG, Types.LONG)).uid("window")
             .add_sink(DiscardingSink()).uid("sink"))
        elif stateless:
            ds.filter(lambda t: t[1] >= 0).uid("filter").add_sink(DiscardingSink()).uid("sink")
        else:
            (ds.key_by(lambda t: t[0], key_type=Types.LONG).process(Count()).uid("count")
             .add_sink(DiscardingSink()).uid("sink"))
        t0 = time.perf_counter()
        res = env.execute("bench")
        dt = time.perf_counter() - t0
        return records / dt, len(res.completed_checkpoint_ids)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=400_000)
    ap.add_argument("--parallelism", type=int, default=2)
    ap.add_argument("--keys", type=int, default=1000)
    ap.add_argument("--interval", type=int, default=100, help="checkpoint interval in ms (checkpointing on)")
    ap.add_argument("--repeat", type=int, default=2, help="runs per configuration (the best is printed)")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    configs = [
        ("stateless, checkpointing off", dict(interval=None, stateless=True)),
        ("keyed count, checkpointing off", dict(interval=None)),
        (f"keyed count, exactly-once every {args.interval} ms", dict(interval=args.interval)),
        (f"keyed count, at-least-once every {args.interval} ms",
         dict(interval=args.interval, mode=CheckpointingMode.AT_LEAST_ONCE)),
        ("windowed count (tumbling 10 s), checkpointing off", dict(interval=None, windowed=True)),
        (f"windowed count, exactly-once every {args.interval} ms", dict(interval=args.interval, windowed=True)),
    ]
    print(f"{args.records} records, parallelism {args.parallelism}, {args.keys} keys")
    rates = {}
    for label, kw in configs:
        best, cps = 0.0, 0
        for _ in range(args.repeat):
            rate, n = run(args.records, args.parallelism, args.keys, **kw)
            if rate > best:
                best, cps = rate, n
        rates[label] = best
        extra = f"  ({cps} checkpoints)" if kw.get("interval") else ""
        print(f"  {label:45s} {best:12,.0f} records/s{extra}")
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import bytewax_bench

    if not bytewax_bench.available():
        print("  bytewax: not installed (pip install bytewax)")
        return
    best = max(bytewax_bench.run(args.records, args.parallelism, args.keys, args.interval)
               for _ in range(args.repeat))
    ours = rates[f"keyed count, exactly-once every {args.interval} ms"]
    print(f"  {'bytewax keyed count, recovery every ' + str(args.interval) + ' ms':45s} {best:12,.0f} records/s")
    print(f"  keyed count, exactly-once: fstate runtime / bytewax = {ours / best:.2f}x")


if __name__ == "__main__":
    main()
