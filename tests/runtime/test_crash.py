"""The crash oracle: a keyed counting job over a replayable source, with failures injected at
random points inside checkpoints (snapshot, completion notification, finalization before
`_metadata`) and between them (record processing), plus a whole-process crash restored from the
checkpoint on disk. With EXACTLY_ONCE the committed output of the two-phase-commit file sink
equals a failure-free run; with AT_LEAST_ONCE nothing is missing."""

from __future__ import annotations

import time
from collections import Counter

import pytest

from fstate.runtime import (CheckpointingMode, ExternalizedCheckpointRetention, FailAt, FailureInjector,
                            JobExecutionException, JobStatus, KeyedProcessFunction, RestartStrategies,
                            StreamExecutionEnvironment, TwoPhaseCommitFileSink, Types, ValueStateDescriptor,
                            find_latest_checkpoint, read_committed)
from tests.runtime.jobs import from_paused_sequence

N = 2400
KEYS = 11
END_OF_INPUT = 1 << 62


class CountPerKey(KeyedProcessFunction):
    """One line per record, and the key's count when the input ends (the final watermark fires
    the timer): output that does not depend on how the two source subtasks interleave."""

    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count", Types.LONG))

    def process_element(self, value, ctx):
        self.count.update((self.count.value() or 0) + 1)
        ctx.timer_service().register_event_time_timer(END_OF_INPUT)
        yield f"r,{ctx.get_current_key()},{value}"

    def on_timer(self, timestamp, ctx):
        yield f"c,{ctx.get_current_key()},{self.count.value()}"


def build(tmp_path, name: str, mode=CheckpointingMode.EXACTLY_ONCE, injector=None, rate=4000,
          restore: str | None = None, retain: bool = False, pause_after: int | None = None
          ) -> StreamExecutionEnvironment:
    """The counting job; with ``pause_after`` each source subtask stops after that many records
    (and idles, checkpointing on) instead of running to the end."""
    env = StreamExecutionEnvironment()
    env.set_parallelism(2)
    env.enable_checkpointing(15, mode)
    cc = env.get_checkpoint_config()
    cc.set_checkpoint_storage(str(tmp_path / f"{name}-chk"))
    if retain:
        cc.set_externalized_checkpoint_retention(ExternalizedCheckpointRetention.RETAIN_ON_CANCELLATION)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(50, 0))
    env.set_failure_injector(injector)
    if restore:
        env.restore_from(restore)
    if pause_after is None:
        source = env.from_sequence(0, N - 1, splits=6, records_per_second=rate)
    else:
        source = from_paused_sequence(env, 0, N - 1, pause_after, splits=6, records_per_second=rate)
    (source.uid("src")
     .key_by(lambda i: f"k-{i % KEYS}", key_type=Types.STRING)
     .process(CountPerKey()).uid("count")
     .add_sink(TwoPhaseCommitFileSink(str(tmp_path / name))).uid("sink"))
    return env


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("reference")
    res = build(tmp, "ref").execute("reference")
    assert res.status == JobStatus.FINISHED and res.restarts == 0
    out = read_committed(str(tmp / "ref"))
    assert len(out) == N + KEYS
    return Counter(out)


#: run 0 walks every site deterministically; the others fail at random (seeded) points
SCHEDULES = [
    dict(fail_at=[FailAt("snapshot", "Sequence Source", nth=3, attempt=0),
                  FailAt("notify", "KeyedProcess", nth=2, attempt=1),
                  FailAt("finalize", "coordinator", nth=2, attempt=2),
                  FailAt("record", "KeyedProcess", nth=300, attempt=3),
                  FailAt("snapshot", "KeyedProcess", nth=4, attempt=4),
                  FailAt("record", "Sequence Source", nth=500, attempt=5)]),
    dict(seed=1, record=1 / 350, snapshot=0.08, notify=0.08, finalize=0.08),
    dict(seed=2, record=1 / 350, snapshot=0.08, notify=0.08, finalize=0.08),
    dict(seed=3, record=1 / 350, snapshot=0.08, notify=0.08, finalize=0.08),
]


def test_exactly_once_under_crashes(tmp_path, reference):
    crashes = Counter()
    for i, schedule in enumerate(SCHEDULES):
        injector = FailureInjector(max_failures=6, **schedule)
        res = build(tmp_path, f"eo-{i}", injector=injector).execute(f"exactly-once {i}")
        assert res.status == JobStatus.FINISHED
        assert res.restarts >= 1 and res.restarts <= injector.count  # failures of two subtasks at once: one failover
        assert Counter(read_committed(str(tmp_path / f"eo-{i}"))) == reference, f"run {i}: {injector.injected}"
        crashes.update(injector.sites())
    assert sum(crashes.values()) >= 20, crashes
    assert set(crashes) == {"record", "snapshot", "notify", "finalize"}, crashes


def test_at_least_once_nothing_missing(tmp_path, reference):
    injector = FailureInjector(seed=7, record=1 / 300, snapshot=0.1, notify=0.1, finalize=0.1, max_failures=6)
    res = build(tmp_path, "alo", CheckpointingMode.AT_LEAST_ONCE, injector).execute("at-least-once")
    assert res.status == JobStatus.FINISHED and 1 <= res.restarts <= injector.count
    out = Counter(read_committed(str(tmp_path / "alo")))
    records = {line for line in reference if line.startswith("r,")}
    assert records <= set(out), "every record's output was committed"
    want = {line.split(",")[1]: int(line.split(",")[2]) for line in reference if line.startswith("c,")}
    got: dict[str, int] = {}
    for line in out:
        if line.startswith("c,"):
            _, k, c = line.split(",")
            got[k] = max(got.get(k, 0), int(c))
    assert set(got) == set(want) and all(got[k] >= want[k] for k in want), "no count lost (some may double)"


def test_process_crash_restores_from_the_checkpoint_on_disk(tmp_path, reference):
    """The job dies like a killed process (nothing cleaned up); a new job restores the newest
    chk-N found on disk, fails a few more times, and the committed output is still exact."""
    # the two source subtasks stop after N/2 records in all: the kill comes mid-way at any speed
    env = build(tmp_path, "kill", retain=True, rate=2000, pause_after=N // 4)
    client = env.execute_async("to be killed")
    deadline = time.monotonic() + 120
    while len(client.completed_checkpoints()) < 3 or not read_committed(str(tmp_path / "kill")):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    client.kill()
    with pytest.raises(JobExecutionException, match="killed"):
        client.get_job_execution_result()
    latest = find_latest_checkpoint(str(tmp_path / "kill-chk"))
    assert latest is not None and latest.startswith(str(tmp_path / "kill-chk" / client.job_id))
    committed_before = len(read_committed(str(tmp_path / "kill")))
    assert 0 < committed_before < N

    injector = FailureInjector(seed=11, record=1 / 400, snapshot=0.05, notify=0.1, finalize=0.05, max_failures=4)
    res = build(tmp_path, "kill", injector=injector, restore=latest).execute("restored")
    assert res.status == JobStatus.FINISHED and res.restored_from == latest
    assert Counter(read_committed(str(tmp_path / "kill"))) == reference
