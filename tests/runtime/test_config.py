"""Flink-style configuration and restart strategies."""

from __future__ import annotations

import pytest

from fstate.runtime import (CheckpointingMode, Configuration, ExternalizedCheckpointRetention, RestartStrategies,
                            StreamExecutionEnvironment)
from fstate.runtime.checkpointing.restarts import (ExponentialDelayRestartBackoffTimeStrategy,
                                                  FailureRateRestartBackoffTimeStrategy,
                                                  FixedDelayRestartBackoffTimeStrategy, NoRestartBackoffTimeStrategy)
from fstate.runtime.config_values import parse_duration_ms


def test_flink_style_yaml_configuration(tmp_path):
    cfg = Configuration.from_yaml(f"""
parallelism.default: 3
state.backend.type: hashmap
state.checkpoints.dir: file://{tmp_path}/chk
state.savepoints.dir: {tmp_path}/sp
execution:
  checkpointing:
    interval: 2 s
    mode: AT_LEAST_ONCE
    timeout: 1 min
    min-pause: 500 ms
    max-concurrent-checkpoints: 2
    tolerable-failed-checkpoints: 4
    externalized-checkpoint-retention: RETAIN_ON_CANCELLATION
restart-strategy:
  type: exponential-delay
  exponential-delay:
    initial-backoff: 10 ms
    max-backoff: 2 s
    backoff-multiplier: 2.0
    reset-backoff-threshold: 1 min
    jitter-factor: 0.25
""")
    env = StreamExecutionEnvironment(cfg)
    cc = env.get_checkpoint_config()
    assert env.get_parallelism() == 3
    assert (cc.interval_ms, cc.mode, cc.timeout_ms, cc.min_pause_ms, cc.max_concurrent, cc.tolerable_failures) == \
        (2000, CheckpointingMode.AT_LEAST_ONCE, 60_000, 500, 2, 4)
    assert cc.retention == ExternalizedCheckpointRetention.RETAIN_ON_CANCELLATION
    assert cc.checkpoint_dir == f"{tmp_path}/chk" and env.savepoint_dir == f"{tmp_path}/sp"
    rs = env.restart_strategy.create(seed=1)
    assert isinstance(rs, ExponentialDelayRestartBackoffTimeStrategy)
    assert (rs.initial_ms, rs.max_ms, rs.multiplier, rs.reset_threshold_ms, rs.jitter) == (10, 2000, 2.0, 60_000, 0.25)

    flat = Configuration({"restart-strategy.type": "fixed-delay", "restart-strategy.fixed-delay.attempts": 7,
                          "restart-strategy.fixed-delay.delay": "3 s"})
    fd = flat.restart_strategy().create()
    assert isinstance(fd, FixedDelayRestartBackoffTimeStrategy) and (fd.attempts, fd.delay_ms) == (7, 3000)
    fr = Configuration({"restart-strategy.type": "failure-rate",
                        "restart-strategy.failure-rate.max-failures-per-interval": 2,
                        "restart-strategy.failure-rate.failure-rate-interval": "10 s",
                        "restart-strategy.failure-rate.delay": "0 ms"}).restart_strategy().create()
    assert isinstance(fr, FailureRateRestartBackoffTimeStrategy) and (fr.max_failures, fr.interval_ms) == (2, 10_000)
    assert isinstance(Configuration({"restart-strategy.type": "none"}).restart_strategy().create(),
                      NoRestartBackoffTimeStrategy)
    with pytest.raises(Exception, match="rocksdb"):
        StreamExecutionEnvironment({"state.backend.type": "rocksdb"})
    with pytest.raises(Exception, match="duration"):
        parse_duration_ms("soon", "x")
    assert parse_duration_ms("1.5 min") == 90_000 and parse_duration_ms(250) == 250


def test_restart_strategies():
    fd = RestartStrategies.fixed_delay_restart(2, 50).create()
    decisions = []
    for t in range(3):
        fd.notify_failure(t)
        decisions.append((fd.can_restart(), fd.backoff_ms()))
    assert decisions == [(True, 50), (True, 50), (False, 50)]

    ex = RestartStrategies.exponential_delay_restart(100, 1000, 2.0, 10_000, 0.0).create()
    backoffs = []
    for t in (0, 1, 2, 3, 4, 5):
        ex.notify_failure(t)
        backoffs.append(ex.backoff_ms())
    assert backoffs == [100, 200, 400, 800, 1000, 1000]
    ex.notify_failure(20_000)  # quiet for longer than the reset threshold
    assert ex.backoff_ms() == 100 and ex.can_restart()
    jit = RestartStrategies.exponential_delay_restart(1000, 60_000, 1.5, 3_600_000, 0.1).create(seed=3)
    for t in range(5):
        jit.notify_failure(t)
        base = min(1000 * 1.5 ** t, 60_000)
        assert base * 0.9 - 1 <= jit.backoff_ms() <= base * 1.1 + 1

    fr = RestartStrategies.failure_rate_restart(2, 1000, 0).create()
    fr.notify_failure(0)
    fr.notify_failure(100)
    assert fr.can_restart() is False or fr.failures  # 2 failures within the interval: the limit
    fr2 = RestartStrategies.failure_rate_restart(2, 1000, 0).create()
    for t in (0, 100, 200):
        fr2.notify_failure(t)
    assert not fr2.can_restart()
    fr3 = RestartStrategies.failure_rate_restart(2, 1000, 0).create()
    for t in (0, 2000, 4000):
        fr3.notify_failure(t)
    assert fr3.can_restart()
