"""Flink-style configuration keys (``execution.checkpointing.*``, ``restart-strategy.*``, ...): set in
code or read from a Flink ``config.yaml`` (flat ``a.b.c: v`` keys or nested mappings), and applied
to the checkpointing settings and the restart strategy."""

from __future__ import annotations

import os
from typing import Any, Mapping

from ..savepoint.errors import InvalidArgumentError
from ..savepoint.io.uri import strip_file_scheme
from .checkpointing.config import (UNALIGNED_KEYS, UNALIGNED_REFUSED, CheckpointConfig, CheckpointingMode,
                                   ExternalizedCheckpointRetention, HashMapStateBackend, StateBackend)
from .config_values import parse_duration_ms, parse_int, parse_float, enum_value
from .checkpointing.restarts import RestartStrategies, RestartStrategyConfiguration

# ---------------------------------------------------------------------------------------------
# Configuration (Flink keys)


class Configuration:
    """A flat ``key -> value`` map of Flink configuration keys."""

    def __init__(self, values: Mapping[str, Any] | None = None):
        self._values: dict[str, Any] = {}
        if values:
            self._values.update(_flatten(values))

    @classmethod
    def from_yaml(cls, source: str) -> "Configuration":
        """Parse a Flink ``config.yaml``: a path, or YAML text."""
        import yaml

        text = source
        if "\n" not in source and os.path.exists(source):
            with open(source, encoding="utf-8") as f:
                text = f.read()
        data = yaml.safe_load(text) or {}
        if not isinstance(data, dict):
            raise InvalidArgumentError("a Flink configuration must be a YAML mapping")
        return cls(data)

    def set(self, key: str, value: Any) -> "Configuration":
        self._values[key] = value
        return self

    def get(self, key: str, default: Any = None) -> Any:
        return self._values.get(key, default)

    def contains(self, key: str) -> bool:
        return key in self._values

    def to_dict(self) -> dict[str, Any]:
        return dict(self._values)

    def first(self, *keys: str) -> Any:
        for k in keys:
            if k in self._values:
                return self._values[k]
        return None

    def restart_strategy(self) -> RestartStrategyConfiguration | None:
        kind = self.get("restart-strategy.type", self.get("restart-strategy"))
        if kind is None:
            return None
        k = str(kind).strip().lower().replace("_", "-")
        g = self.get
        if k in ("none", "off", "disable", "disabled", "norestart"):
            return RestartStrategies.no_restart()
        if k in ("fixed-delay", "fixeddelay"):
            return RestartStrategies.fixed_delay_restart(
                parse_int(g("restart-strategy.fixed-delay.attempts", 1), "restart-strategy.fixed-delay.attempts"),
                parse_duration_ms(g("restart-strategy.fixed-delay.delay", "1 s"), "restart-strategy.fixed-delay.delay"))
        if k in ("exponential-delay", "exponentialdelay"):
            p = "restart-strategy.exponential-delay."
            return RestartStrategies.exponential_delay_restart(
                parse_duration_ms(g(p + "initial-backoff", "1 s"), p + "initial-backoff"),
                parse_duration_ms(g(p + "max-backoff", "1 min"), p + "max-backoff"),
                parse_float(g(p + "backoff-multiplier", 1.5), p + "backoff-multiplier"),
                parse_duration_ms(g(p + "reset-backoff-threshold", "1 h"), p + "reset-backoff-threshold"),
                parse_float(g(p + "jitter-factor", 0.1), p + "jitter-factor"),
                parse_int(g(p + "attempts-before-reset-backoff", "inf"), p + "attempts-before-reset-backoff"))
        if k in ("failure-rate", "failurerate"):
            p = "restart-strategy.failure-rate."
            return RestartStrategies.failure_rate_restart(
                parse_int(g(p + "max-failures-per-interval", 1), p + "max-failures-per-interval"),
                parse_duration_ms(g(p + "failure-rate-interval", "1 min"), p + "failure-rate-interval"),
                parse_duration_ms(g(p + "delay", "1 s"), p + "delay"))
        raise InvalidArgumentError(f"restart-strategy.type: unknown strategy {kind!r} "
                                   "(none, fixed-delay, exponential-delay, failure-rate)")

    def apply_checkpointing(self, cc: CheckpointConfig) -> None:
        f = self.first
        interval = f("execution.checkpointing.interval")
        if interval is not None:
            ms = parse_duration_ms(interval, "execution.checkpointing.interval")
            if ms > 0:
                cc.set_checkpoint_interval(ms)
        mode = f("execution.checkpointing.mode")
        if mode is not None:
            cc.set_checkpointing_mode(enum_value(CheckpointingMode, mode, "execution.checkpointing.mode"))
        v = f("execution.checkpointing.timeout")
        if v is not None:
            cc.set_checkpoint_timeout(parse_duration_ms(v, "execution.checkpointing.timeout"))
        v = f("execution.checkpointing.min-pause")
        if v is not None:
            cc.set_min_pause_between_checkpoints(parse_duration_ms(v, "execution.checkpointing.min-pause"))
        v = f("execution.checkpointing.max-concurrent-checkpoints")
        if v is not None:
            cc.set_max_concurrent_checkpoints(parse_int(v, "execution.checkpointing.max-concurrent-checkpoints"))
        v = f("execution.checkpointing.tolerable-failed-checkpoints")
        if v is not None:
            cc.set_tolerable_checkpoint_failure_number(
                parse_int(v, "execution.checkpointing.tolerable-failed-checkpoints"))
        v = f("execution.checkpointing.externalized-checkpoint-retention")
        if v is not None:
            cc.set_externalized_checkpoint_retention(
                enum_value(ExternalizedCheckpointRetention, v, "execution.checkpointing.externalized-checkpoint-retention"))
        v = f("state.checkpoints.num-retained", "execution.checkpointing.num-retained")
        if v is not None:
            cc.set_num_retained_checkpoints(parse_int(v, "state.checkpoints.num-retained"))
        for key in UNALIGNED_KEYS:
            v = self.get(key)
            if v is not None and str(v).strip().lower() not in ("false", "0", "no", "off"):
                raise InvalidArgumentError(f"{key}: {v!r}: {UNALIGNED_REFUSED}")
        v = f("state.checkpoints.dir", "execution.checkpointing.dir")
        if v is not None:
            cc.set_checkpoint_storage(str(v))

    def state_backend(self) -> StateBackend | None:
        v = self.first("state.backend.type", "state.backend")
        if v is None:
            return None
        name = str(v).strip().lower()
        if name in ("hashmap", "heap", "filesystem", "jobmanager", "memory"):
            return HashMapStateBackend()
        raise InvalidArgumentError(f"state.backend.type: {v!r} is not supported by fstate's runtime "
                                   "(only 'hashmap'; its snapshots restore into any Flink backend)")

    def savepoint_dir(self) -> str | None:
        v = self.first("state.savepoints.dir", "execution.checkpointing.savepoint-dir")
        return strip_file_scheme(str(v)) if v is not None else None

    def restore_path(self) -> str | None:
        v = self.first("execution.state-recovery.path", "execution.savepoint.path")
        return strip_file_scheme(str(v)) if v is not None else None

    def allow_non_restored_state(self) -> bool:
        v = self.first("execution.state-recovery.ignore-unclaimed-state",
                       "execution.savepoint.ignore-unclaimed-state")
        return str(v).strip().lower() == "true" if v is not None else False


def _flatten(values: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in values.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out
