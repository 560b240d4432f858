"""The crash oracle: a keyed counting job over a replayable source, with failures injected at
random points inside checkpoints (snapshot, completion notification, finalization before
`_metadata`) and between them (record processing), plus a whole-process crash restored from the
checkpoint on disk. With EXACTLY_ONCE the committed output of the two-phase-commit file sink
equals a failure-free run; with AT_LEAST_ONCE nothing is missing. The same holds over repeated
runs of one job id into one output directory, and when a sink commit fails during
stop-with-savepoint."""

from __future__ import annotations

import os
import time
from collections import Counter

import pytest

from fstate.runtime import (CheckpointingMode, ExternalizedCheckpointRetention, FailAt, FailureInjector,
                            JobExecutionException, JobStatus, KeyedProcessFunction, RestartStrategies,
                            StopWithSavepointError, StreamExecutionEnvironment, TransactionConflictError,
                            TwoPhaseCommitFileSink, Types, ValueStateDescriptor, find_latest_checkpoint,
                            read_committed)
from tests.runtime.jobs import Progress, SharedEvent, from_paused_sequence, wait_until_running

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


# ---------------------------------------------------------------------------------------------
# repeated runs of one job id, and a commit failing during stop-with-savepoint

FIXED_JOB_ID = "fixedjob0123456789abcdef01234567"


class CountingFileSink(TwoPhaseCommitFileSink):
    """The file sink; counts the records it wrote (all subtasks) and the transactions it committed.
    With ``fail_commit`` set, subtask 1's next commit waits until subtask 0 committed, then fails
    (once): the sink's output is committed on one subtask and not on the other."""

    def __init__(self, directory, writes: Progress, commits: Progress | None = None,
                 fail_commit: SharedEvent | None = None):
        super().__init__(directory)
        self.writes = writes
        self.commits = commits or Progress()
        self.fail_commit = fail_commit or SharedEvent()

    def write(self, txn, value, context):
        super().write(txn, value, context)
        self.writes.add()

    def commit(self, txn):
        if self.fail_commit.is_set() and self.get_runtime_context().get_index_of_this_subtask() == 1:
            self.commits.wait_for(1)
            self.fail_commit.clear()
            raise OSError("injected: the commit of the sink failed")
        super().commit(txn)
        self.commits.add()


def build_run(tmp_path, sink: TwoPhaseCommitFileSink, *, start=0, end=N - 1, restore=None, pause_after=None,
              resume: SharedEvent | None = None) -> StreamExecutionEnvironment:
    """The counting job with checkpoints only when the test asks for them (and at the end of input)."""
    env = StreamExecutionEnvironment()
    env.set_parallelism(2)
    env.enable_checkpointing(3_600_000)
    cc = env.get_checkpoint_config()
    cc.set_checkpoint_storage(str(tmp_path / "runs-chk"))
    cc.set_externalized_checkpoint_retention(ExternalizedCheckpointRetention.RETAIN_ON_CANCELLATION)
    env.set_default_savepoint_directory(str(tmp_path / "runs-sp"))
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(5, 0))
    if restore:
        env.restore_from(restore)
    if pause_after is None:
        source = env.from_sequence(start, end, splits=6)
    else:
        source = from_paused_sequence(env, start, end, pause_after, resume, splits=6)
    (source.uid("src")
     .key_by(lambda i: f"k-{i % KEYS}", key_type=Types.STRING)
     .process(CountPerKey()).uid("count")
     .add_sink(sink).uid("sink"))
    return env


def test_repeated_runs_with_a_fixed_job_id_restored_lose_nothing(tmp_path, reference):
    """Four runs with one job id into one directory: stopped with a savepoint, restored from it and
    killed after a checkpoint, restored from that checkpoint and stopped again, restored and run to
    the end. The committed output is that of one failure-free run: no part file replaced."""
    out = str(tmp_path / "out")
    restore = None
    for run in range(3):
        writes = Progress()
        env = build_run(tmp_path, CountingFileSink(out, writes), restore=restore, pause_after=N // 16)
        client = env.execute_async(f"run {run}", job_id=FIXED_JOB_ID)
        wait_until_running(client)
        writes.wait_for(2 * (N // 16))  # both source subtasks paused, every record written
        if run == 1:
            restore = client.trigger_checkpoint()
            client.kill()
            with pytest.raises(JobExecutionException, match="killed"):
                client.get_job_execution_result()
        else:
            restore = client.stop_with_savepoint()
            assert client.get_job_status() == JobStatus.FINISHED
            committed = Counter(read_committed(out))  # everything so far, each once
            assert max(committed.values()) == 1 and sum(committed.values()) == 2 * (N // 16) * (run + 1)
    res = build_run(tmp_path, CountingFileSink(out, Progress()), restore=restore).execute("last run",
                                                                                            job_id=FIXED_JOB_ID)
    assert res.status == JobStatus.FINISHED and res.restarts == 0
    committed = Counter(read_committed(out))
    assert sum(committed.values()) == N + KEYS, f"{N + KEYS - sum(committed.values())} records lost"
    assert committed == reference


def test_fresh_runs_with_a_fixed_job_id_into_one_directory_keep_every_part(tmp_path):
    """Three runs started fresh (no restore) with one job id, each over its own numbers, into one
    output directory: every run's output stays."""
    out = str(tmp_path / "out")
    third = N // 3
    for run in range(3):
        res = build_run(tmp_path, CountingFileSink(out, Progress()), start=run * third,
                        end=(run + 1) * third - 1).execute(f"fresh run {run}", job_id=FIXED_JOB_ID)
        assert res.status == JobStatus.FINISHED
    committed = Counter(read_committed(out))
    records = Counter(line for line in committed.elements() if line.startswith("r,"))
    assert records == Counter(f"r,k-{v % KEYS},{v}" for v in range(3 * third))
    counts = Counter(line for line in committed.elements() if line.startswith("c,"))
    assert sum(counts.values()) == 3 * KEYS


def test_a_commit_never_replaces_a_committed_part_file(tmp_path):
    sink = TwoPhaseCommitFileSink(str(tmp_path))
    os.makedirs(tmp_path / ".inprogress")
    (tmp_path / "part-t1").write_text("committed before\n")
    (tmp_path / ".inprogress" / "t1").write_text("another transaction of the same name\n")
    with pytest.raises(TransactionConflictError, match="part-t1"):
        sink.commit("t1")
    assert read_committed(str(tmp_path)) == ["committed before"]
    # committed, then a crash before the transaction file was removed: the commit completes
    (tmp_path / ".inprogress" / "t2").write_text("two\n")
    os.link(tmp_path / ".inprogress" / "t2", tmp_path / "part-t2")
    sink.commit("t2")
    sink.commit("t2")  # idempotent
    assert read_committed(str(tmp_path)) == ["committed before", "two"]
    assert not (tmp_path / ".inprogress" / "t2").exists()


def test_a_commit_failing_during_stop_with_savepoint(tmp_path, reference):
    """Subtask 0 of the sink commits the savepoint's transaction, subtask 1 fails to: the stop
    raises (no savepoint path), the job fails over from that savepoint and keeps RUNNING, and after
    it ran to the end no committed record is there twice."""
    out = str(tmp_path / "out")
    writes, commits, fail_commit = Progress(), Progress(), SharedEvent()
    resume = SharedEvent()
    env = build_run(tmp_path, CountingFileSink(out, writes, commits, fail_commit), pause_after=N // 8, resume=resume)
    client = env.execute_async("stopped while a commit fails")
    wait_until_running(client)
    writes.wait_for(2 * (N // 8))
    fail_commit.set()
    with pytest.raises(StopWithSavepointError, match="failed over"):
        client.stop_with_savepoint()
    assert not fail_commit.is_set(), "the commit failed"
    assert client.get_job_status() in (JobStatus.RESTARTING, JobStatus.RUNNING)
    wait_until_running(client)
    # subtask 0 committed, subtask 1 failed; restored, both commit the savepoint's transactions again
    commits.wait_for(3)
    committed = Counter(read_committed(out))
    assert max(committed.values()) == 1 and sum(committed.values()) == 2 * (N // 8)
    resume.set()
    res = client.get_job_execution_result(120)
    assert res.status == JobStatus.FINISHED and res.restarts == 1 and res.savepoint_path is None
    assert res.checkpoints[0].is_savepoint
    committed = Counter(read_committed(out))
    assert sum(committed.values()) - (N + KEYS) == 0, f"{sum(committed.values()) - (N + KEYS)} duplicated"
    assert committed == reference
