"""The checkpoint coordinator: declines, expiry, tolerable failures, min pause and max concurrent
checkpoints, with a manual clock."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from fstate.runtime import (CheckpointedFunction, CheckpointFailureReason, CheckpointListener, CollectSink,
                            JobExecutionException, JobStatus, ManualClock, MapFunction, RestartStrategies,
                            StreamExecutionEnvironment)
from tests.runtime.jobs import Idle, wait_for, wait_until_running


class FlakySnapshot(MapFunction, CheckpointedFunction, CheckpointListener):
    """Declines checkpoint 1 (snapshot_state raises); blocks in checkpoint 2 until released."""

    release = threading.Event()
    log: list = []

    def initialize_state(self, context):
        pass

    def snapshot_state(self, context):
        FlakySnapshot.log.append(("snapshot", context.get_checkpoint_id(), context.get_checkpoint_timestamp()))
        if context.get_checkpoint_id() == 1:
            raise ValueError("cannot snapshot now")
        if context.get_checkpoint_id() == 2:
            FlakySnapshot.release.wait(10)

    def notify_checkpoint_complete(self, checkpoint_id):
        FlakySnapshot.log.append(("complete", checkpoint_id))

    def notify_checkpoint_aborted(self, checkpoint_id):
        FlakySnapshot.log.append(("aborted", checkpoint_id))

    def map(self, value):
        return value


def test_decline_expire_and_complete_with_a_manual_clock(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="fstate.runtime")
    FlakySnapshot.release.clear()
    FlakySnapshot.log = []
    clock = ManualClock(1_000_000)
    env = StreamExecutionEnvironment(clock=clock)
    env.enable_checkpointing(100)
    cc = env.get_checkpoint_config()
    cc.set_checkpoint_storage(str(tmp_path / "chk"))
    cc.set_checkpoint_timeout(1000)
    cc.set_tolerable_checkpoint_failure_number(5)
    env.add_source(Idle()).uid("src").map(FlakySnapshot()).uid("flaky").add_sink(CollectSink("x")).uid("sink")
    client = env.execute_async()
    stats = client.get_checkpoint_stats()
    time.sleep(0.1)
    assert stats.triggered == 0  # time does not move by itself
    clock.advance(100)
    wait_for(lambda: stats.failed)
    assert stats.failed == [(1, "CHECKPOINT_DECLINED")]
    wait_for(lambda: ("aborted", 1) in FlakySnapshot.log)

    clock.advance(100)  # checkpoint 2 hangs in the snapshot
    wait_for(lambda: stats.triggered == 2)
    time.sleep(0.05)
    clock.advance(999)
    time.sleep(0.05)
    assert stats.failed == [(1, "CHECKPOINT_DECLINED")]
    assert stats.triggered == 2  # checkpoint 3 is due, but one may be in flight at a time
    clock.advance(1)
    wait_for(lambda: len(stats.failed) == 2)
    assert stats.failed[1] == (2, "CHECKPOINT_EXPIRED")
    wait_for(lambda: stats.triggered == 3)  # in the same tick, before the clock moves again
    FlakySnapshot.release.set()

    clock.advance(100)
    wait_for(lambda: stats.completed)
    assert stats.completed[0] == 3
    wait_for(lambda: ("complete", 3) in FlakySnapshot.log)
    client.cancel()
    # snapshots carry the checkpoint's id and its trigger time (the manual clock's)
    assert [e for e in FlakySnapshot.log if e[0] == "snapshot"][:3] == [
        ("snapshot", 1, 1_000_100), ("snapshot", 2, 1_000_200), ("snapshot", 3, 1_001_200)]
    text = caplog.text
    assert "Decline checkpoint 1 by task" in text and CheckpointFailureReason.CHECKPOINT_DECLINED.message in text
    assert "Checkpoint 2 of job" in text and "expired before completing" in text
    assert "Completed checkpoint 3" in text


def test_min_pause_and_max_concurrent(tmp_path):
    clock = ManualClock(0)
    env = StreamExecutionEnvironment(clock=clock)
    env.enable_checkpointing(100)
    cc = env.get_checkpoint_config()
    cc.set_checkpoint_storage(str(tmp_path / "chk"))
    cc.set_min_pause_between_checkpoints(500)
    env.add_source(Idle()).uid("src").add_sink(CollectSink("x")).uid("sink")
    client = env.execute_async()
    stats = client.get_checkpoint_stats()
    clock.advance(100)
    wait_for(lambda: stats.completed == [1])
    for _ in range(4):  # 400 ms after the completion: the min pause holds the next one back
        clock.advance(100)
        time.sleep(0.03)
    assert stats.triggered == 1
    clock.advance(100)
    wait_for(lambda: stats.completed == [1, 2])
    client.cancel()


def test_tolerable_failures_exceeded_fails_over(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="fstate.runtime")

    class AlwaysDecline(MapFunction, CheckpointedFunction):
        def initialize_state(self, context):
            pass

        def snapshot_state(self, context):
            raise RuntimeError("no")

        def map(self, value):
            return value

    env = StreamExecutionEnvironment()
    env.enable_checkpointing(20)
    env.get_checkpoint_config().set_checkpoint_storage(str(tmp_path / "chk"))
    env.get_checkpoint_config().set_tolerable_checkpoint_failure_number(1)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(1, 0))
    env.add_source(Idle()).uid("src").map(AlwaysDecline()).uid("m").add_sink(CollectSink("x")).uid("sink")
    with pytest.raises(JobExecutionException, match="Exceeded checkpoint tolerable failure threshold") as e:
        env.execute(timeout=30)
    assert e.value.result.restarts == 1 and e.value.result.status == JobStatus.FAILED
    assert "Recovery is suppressed by FixedDelayRestartBackoffTimeStrategy" in caplog.text


class BlockFirst(MapFunction, CheckpointedFunction):
    release = threading.Event()

    def initialize_state(self, context):
        pass

    def snapshot_state(self, context):
        if context.get_checkpoint_id() == 1:
            BlockFirst.release.wait(10)

    def map(self, value):
        return value


@pytest.mark.parametrize("max_concurrent", [1, 2])
def test_max_concurrent_checkpoints(tmp_path, max_concurrent):
    BlockFirst.release.clear()
    clock = ManualClock(0)
    env = StreamExecutionEnvironment(clock=clock)
    env.enable_checkpointing(100)
    cc = env.get_checkpoint_config()
    cc.set_checkpoint_storage(str(tmp_path / "chk"))
    cc.set_max_concurrent_checkpoints(max_concurrent)
    env.add_source(Idle()).uid("src").map(BlockFirst()).uid("block").add_sink(CollectSink("x")).uid("sink")
    client = env.execute_async()
    stats = client.get_checkpoint_stats()
    wait_until_running(client)
    for i in range(1, 5):  # checkpoint 1 hangs in its snapshot meanwhile
        clock.advance(100)
        # each one is due at its tick; beyond max_concurrent nothing more starts
        wait_for(lambda: stats.triggered >= min(i, max_concurrent))
        time.sleep(0.03)  # a chance for one too many to start (not needed for the test to pass)
    assert stats.triggered == max_concurrent and stats.completed == []
    BlockFirst.release.set()
    wait_for(lambda: len(stats.completed) >= max_concurrent)  # (the next may follow at once: it is due)
    assert stats.completed[:max_concurrent] == list(range(1, max_concurrent + 1)) and stats.failed == []
    client.cancel()
