"""The crash oracle for the broadcast state pattern: keyed events connected to a broadcast stream
of rules (``RuleTotals``: keyed ValueState, broadcast MapState, event timers, a side output),
with failures injected inside and between checkpoints. With EXACTLY_ONCE the committed output of
both two-phase-commit sinks (main and side output) equals a failure-free run: no event and no
broadcast element is lost or processed twice, and the broadcast state survives every restore."""

from __future__ import annotations

from collections import Counter

import pytest

from fstate.runtime import (CheckpointingMode, FailAt, FailureInjector, JobStatus, RestartStrategies,
                            StreamExecutionEnvironment, TwoPhaseCommitFileSink, Types, read_committed)
from tests.runtime.broadcast_jobs import BIG, RULES, RuleTotals
from tests.runtime.jobs import from_paused_sequence

N = 1200
KEYS = 7
RULE_ELEMENTS = [("limit", 5), ("mode", 2)]


def build(tmp_path, name: str, parallelism: int = 2, injector=None, restore: str | None = None,
          pause_after: int | None = None, rate: int = 2000) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment()
    env.set_parallelism(parallelism)
    env.enable_checkpointing(15, CheckpointingMode.EXACTLY_ONCE)
    env.get_checkpoint_config().set_checkpoint_storage(str(tmp_path / f"{name}-chk"))
    env.set_default_savepoint_directory(str(tmp_path / f"{name}-sp"))
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(50, 0))
    env.set_failure_injector(injector)
    if restore:
        env.restore_from(restore)
    if pause_after is None:
        events = env.from_sequence(0, N - 1, splits=6, records_per_second=rate)
    else:
        events = from_paused_sequence(env, 0, N - 1, pause_after, splits=6, records_per_second=rate)
    rules = env.from_collection(RULE_ELEMENTS).uid("rules")
    totals = (events.uid("events")
              .key_by(lambda i: f"k-{i % KEYS}", key_type=Types.STRING)
              .connect(rules.broadcast(RULES))
              .process(RuleTotals()).uid("rules-totals"))
    totals.add_sink(TwoPhaseCommitFileSink(str(tmp_path / name))).uid("sink")
    totals.get_side_output(BIG).add_sink(TwoPhaseCommitFileSink(str(tmp_path / f"{name}-big"))).uid("big-sink")
    return env


def expected(parallelism: int = 2) -> tuple[Counter, list[str]]:
    """What a failure-free run commits: the main output and the side output."""
    main = Counter(f"r,k-{i % KEYS},{i}" for i in range(N))
    main.update(f"b,{s},{name}" for s in range(parallelism) for name, _ in RULE_ELEMENTS)
    rules = sorted(RULE_ELEMENTS)
    main.update(f"c,k-{k},{sum(i for i in range(N) if i % KEYS == k)},{rules}" for k in range(KEYS))
    big = [f"big,k-{i % KEYS},{i}" for i in range(1000, N)]
    return main, big


def committed(tmp_path, name: str) -> tuple[Counter, list[str]]:
    return Counter(read_committed(str(tmp_path / name))), sorted(read_committed(str(tmp_path / f"{name}-big")))


SCHEDULES = [
    dict(fail_at=[FailAt("finalize", "coordinator", nth=2, attempt=0),
                  FailAt("snapshot", "KeyedBroadcastProcess", nth=2, attempt=1),
                  FailAt("record", "KeyedBroadcastProcess", nth=300, attempt=2),
                  FailAt("notify", "Sink", nth=2, attempt=3),
                  FailAt("record", "Collection Source", nth=2, attempt=4)]),
    dict(seed=11, record=1 / 300, snapshot=0.08, notify=0.08, finalize=0.08),
]


def test_broadcast_pattern_exactly_once_under_crashes(tmp_path):
    main, big = expected()
    res = build(tmp_path, "ref").execute("reference")
    assert res.status == JobStatus.FINISHED and res.restarts == 0
    assert committed(tmp_path, "ref") == (main, sorted(big))
    crashes = Counter()
    for i, schedule in enumerate(SCHEDULES):
        injector = FailureInjector(max_failures=5, **schedule)
        res = build(tmp_path, f"eo-{i}", injector=injector).execute(f"broadcast exactly-once {i}")
        assert res.status == JobStatus.FINISHED
        assert 1 <= res.restarts <= injector.count
        assert committed(tmp_path, f"eo-{i}") == (main, sorted(big)), f"run {i}: {injector.injected}"
        crashes.update(injector.sites())
    assert sum(crashes.values()) >= 6, crashes
    assert {"record", "snapshot", "notify", "finalize"} <= set(crashes), crashes


@pytest.mark.parametrize("parallelism", [3])
def test_restored_at_another_parallelism_keeps_the_broadcast_state(tmp_path, parallelism):
    """Stop with a savepoint half-way (the rules are in), restore at another parallelism: every
    new subtask holds the rules, nothing is lost or repeated."""
    from tests.runtime.jobs import wait_for

    env = build(tmp_path, "first", pause_after=N // 4)
    client = env.execute_async()
    wait_for(lambda: len(client.completed_checkpoints()) >= 3 and len(read_committed(str(tmp_path / "first")))
             >= N // 2 + len(RULE_ELEMENTS) * 2)
    sp = client.stop_with_savepoint()
    res = build(tmp_path, "second", parallelism=parallelism, restore=sp).execute()
    assert res.status == JobStatus.FINISHED
    main, big = expected(2)  # the rules were broadcast (to 2 subtasks) before the savepoint
    first, first_big = committed(tmp_path, "first")
    second, second_big = committed(tmp_path, "second")
    assert first + second == main
    assert sorted(first_big + second_big) == sorted(big)
