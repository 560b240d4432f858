"""Throughput of fstate's stream runtime: records per second, checkpointing off and on.

    python bench/runtime_bench.py [--records 400000] [--parallelism 2] [--interval 100] [--keys 1000]

The job: a parallel sequence source -> map to (key, value) -> key_by -> a keyed count in
ValueState<Long> -> discarding sink; every subtask is a thread, records cross two network edges
(rebalance-free forward chain source->map, hash partition to the keyed operator). With
checkpointing on, every checkpoint is aligned (EXACTLY_ONCE) and written as a Flink checkpoint.
Prints numbers only: nothing here asserts on time.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import tempfile
import time

from fstate.runtime import (CheckpointingMode, DiscardingSink, KeyedProcessFunction, StreamExecutionEnvironment,
                            Types, ValueStateDescriptor)


class Count(KeyedProcessFunction):
    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count", Types.LONG))

    def process_element(self, value, ctx):
        self.count.update((self.count.value() or 0) + 1)
        return None


def run(records: int, parallelism: int, keys: int, interval: int | None, mode=CheckpointingMode.EXACTLY_ONCE,
        stateless: bool = False) -> tuple[float, int]:
    tmp = tempfile.mkdtemp(prefix="fstate-bench-")
    try:
        env = StreamExecutionEnvironment()
        env.set_parallelism(parallelism)
        if interval:
            env.enable_checkpointing(interval, mode)
            env.get_checkpoint_config().set_checkpoint_storage(tmp)
        ds = env.from_sequence(0, records - 1).uid("src").map(lambda i: (i % keys, i)).uid("map")
        if stateless:
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
    ]
    print(f"{args.records} records, parallelism {args.parallelism}, {args.keys} keys")
    for label, kw in configs:
        best, cps = 0.0, 0
        for _ in range(args.repeat):
            rate, n = run(args.records, args.parallelism, args.keys, **kw)
            if rate > best:
                best, cps = rate, n
        extra = f"  ({cps} checkpoints)" if kw.get("interval") else ""
        print(f"  {label:45s} {best:12,.0f} records/s{extra}")


if __name__ == "__main__":
    main()
