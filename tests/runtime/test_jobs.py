"""Whole jobs: failover and recovery, two-phase commit without checkpoints, file source offsets,
stream shapes (union, broadcast, keyed map and reduce), the job client after the end, and the
tests' paused source."""

from __future__ import annotations

import logging
import os
from collections import Counter

import pytest

from fstate.runtime import (CollectSink, FailAt, FailureInjector, JobStatus, MapFunction, StreamExecutionEnvironment,
                            TwoPhaseCommitFileSink, Types, ValueStateDescriptor, read_committed)
from tests.runtime.jobs import SharedEvent, counting_job, from_paused_sequence, make_env, wait_for


def test_failure_and_recovery_are_logged(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="fstate.runtime")
    out = tmp_path / "out"
    env = make_env(tmp_path, parallelism=2, interval=20)
    env.set_failure_injector(FailureInjector(fail_at=[FailAt("record", "KeyedProcess", nth=700)]))
    counting_job(env, out, 2000, p_src=1, rate=6000)
    res = env.execute("logged")
    assert res.restarts == 1 and res.status == JobStatus.FINISHED
    assert Counter(int(x.split(",")[1]) for x in read_committed(str(out))) == Counter(range(2000))
    text = caplog.text
    assert "switched from RUNNING to FAILED" in text and "injected failure #1" in text
    assert "switched from state RUNNING to RESTARTING" in text
    assert "Restarting job" in text and "Restoring job" in text


def test_two_phase_commit_without_checkpointing_commits_at_the_end(tmp_path):
    env = StreamExecutionEnvironment()
    env.set_parallelism(2)
    env.from_sequence(1, 500).map(lambda x: x * 2).add_sink(TwoPhaseCommitFileSink(str(tmp_path / "o")))
    res = env.execute()
    assert res.status == JobStatus.FINISHED and res.completed_checkpoint_ids == []
    assert sorted(int(x) for x in read_committed(str(tmp_path / "o"))) == [x * 2 for x in range(1, 501)]
    assert not os.listdir(tmp_path / "o" / ".inprogress")


def test_file_source_resumes_from_its_offsets(tmp_path):
    files = []
    for f in range(3):
        p = tmp_path / f"in-{f}.txt"
        p.write_text("".join(f"{f}-{i}\n" for i in range(400)))
        files.append(str(p))
    out = tmp_path / "out"
    env = make_env(tmp_path, parallelism=2, interval=20)
    env.set_failure_injector(FailureInjector(fail_at=[FailAt("record", "File Source", nth=150)]))
    env.read_text_file(files).uid("files").add_sink(TwoPhaseCommitFileSink(str(out))).uid("sink")
    res = env.execute()
    assert res.restarts == 1
    assert Counter(read_committed(str(out))) == Counter(f"{f}-{i}" for f in range(3) for i in range(400))


def test_keyed_map_reduce_union_and_broadcast(tmp_path):
    class Dedup(MapFunction):
        def open(self, ctx):
            self.seen = ctx.get_state(ValueStateDescriptor("seen", Types.BOOLEAN))

        def map(self, value):
            first = self.seen.value() is None
            self.seen.update(True)
            return (value, first)

    CollectSink.clear("dedup")
    CollectSink.clear("sums")
    CollectSink.clear("bcast")
    env = make_env(tmp_path, parallelism=2, interval=20)
    a = env.from_collection([1, 2, 3, 1]).uid("a")
    b = env.from_collection([3, 4, 4]).uid("b")
    both = a.union(b).uid("both")
    both.key_by(lambda x: x).map(Dedup()).uid("dedup").add_sink(CollectSink("dedup")).uid("s1")
    both.map(lambda x: (x % 2, x)).uid("pairs").key_by(lambda t: t[0]).reduce(
        lambda s, t: (s[0], s[1] + t[1]), Types.TUPLE(Types.LONG, Types.LONG)).uid("sum").add_sink(
        CollectSink("sums")).uid("s2")
    a.broadcast().map(lambda x: x * 10).uid("times-ten").set_parallelism(3).add_sink(
        CollectSink("bcast")).uid("s3")
    env.execute()
    dedup = CollectSink.results("dedup")
    assert Counter(v for v, first in dedup if first) == Counter({1: 1, 2: 1, 3: 1, 4: 1})
    assert len(dedup) == 7
    finals = {}
    for parity, total in CollectSink.results("sums"):
        finals[parity] = max(finals.get(parity, 0), total)
    assert finals == {0: 2 + 4 + 4, 1: 1 + 3 + 1 + 3}
    assert Counter(CollectSink.results("bcast")) == Counter({10: 6, 20: 3, 30: 3})


def test_requests_to_a_finished_job_fail_fast(tmp_path):
    env = make_env(tmp_path, parallelism=1)
    env.from_collection([1, 2]).uid("src").add_sink(CollectSink("x")).uid("sink")
    client = env.execute_async()
    client.get_job_execution_result(timeout=30)
    # answered at once, without waiting for the job: even no time at all to wait is enough
    with pytest.raises(RuntimeError, match="not running"):
        client.trigger_savepoint(timeout=0)


def test_a_paused_sequence_stops_at_its_count_and_resumes(tmp_path):
    """The tests' PausedSequenceSource: each subtask stops after exactly ``pause_after`` numbers,
    checkpoints go on meanwhile, and once resumed every number comes exactly once."""
    CollectSink.clear("paused")
    resume = SharedEvent()
    env = make_env(tmp_path, parallelism=2)
    from_paused_sequence(env, 0, 99, 10, resume, splits=4).uid("src").add_sink(CollectSink("paused")).uid("sink")
    client = env.execute_async()
    wait_for(lambda: len(CollectSink.results("paused")) >= 20)
    client.trigger_checkpoint()  # taken during the pause: the source holds still
    assert len(CollectSink.results("paused")) == 20
    resume.set()
    assert client.get_job_execution_result(timeout=60).status == JobStatus.FINISHED
    assert Counter(CollectSink.results("paused")) == Counter(range(100))
