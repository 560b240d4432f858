"""User function interfaces (PyFlink-style: functions ``yield`` their outputs where Flink has a
Collector), plus the checkpointing hooks ``CheckpointedFunction`` and ``CheckpointListener``.

Plain callables work wherever a function is expected (``ds.map(lambda x: x + 1)``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable

from .callables import call_of
from ..events import IDLE, MAX_WATERMARK, MIN_WATERMARK, Timestamped, Watermark

if TYPE_CHECKING:  # pragma: no cover
    from .context import FunctionInitializationContext, FunctionSnapshotContext, RuntimeContext


class Function:
    """Base of user functions: ``open``/``close`` around the run of one parallel instance."""

    _runtime_context: "RuntimeContext | None" = None

    def open(self, runtime_context: "RuntimeContext") -> None:
        pass

    def close(self) -> None:
        pass

    def set_runtime_context(self, runtime_context: "RuntimeContext") -> None:
        """Called by the runtime before :meth:`open` (the context of this parallel instance)."""
        self._runtime_context = runtime_context

    def get_runtime_context(self) -> "RuntimeContext":
        if self._runtime_context is None:
            raise RuntimeError("the runtime context is only available while the function runs")
        return self._runtime_context


class MapFunction(Function):
    def map(self, value: Any) -> Any:
        raise NotImplementedError


class FlatMapFunction(Function):
    def flat_map(self, value: Any) -> Iterable[Any] | None:
        raise NotImplementedError


class FilterFunction(Function):
    def filter(self, value: Any) -> bool:
        raise NotImplementedError


class ProcessFunction(Function):
    """Non-keyed process function: ``process_element(value, ctx)`` yields outputs."""

    def process_element(self, value: Any, ctx) -> Iterable[Any] | None:
        raise NotImplementedError


class KeyedProcessFunction(Function):
    """Keyed process function: keyed state through the runtime context, timers through
    ``ctx.timer_service()``; ``on_timer(timestamp, ctx)`` yields outputs when a timer fires."""

    def process_element(self, value: Any, ctx) -> Iterable[Any] | None:
        raise NotImplementedError

    def on_timer(self, timestamp: int, ctx) -> Iterable[Any] | None:
        return None


class ReduceFunction(Function):
    def reduce(self, value1: Any, value2: Any) -> Any:
        raise NotImplementedError


class AggregateFunction(Function):
    def create_accumulator(self) -> Any:
        raise NotImplementedError

    def add(self, value: Any, accumulator: Any) -> Any:
        raise NotImplementedError

    def get_result(self, accumulator: Any) -> Any:
        raise NotImplementedError

    def merge(self, acc_a: Any, acc_b: Any) -> Any:
        raise NotImplementedError


class SinkFunction(Function):
    def invoke(self, value: Any, context) -> None:
        raise NotImplementedError

    def finish(self) -> None:
        """End of input (the job's sources are done)."""


class SourceFunction(Function):
    """A replayable source: ``run(ctx)`` is a generator. Between two values it yields, the
    runtime may snapshot the source (implement ``CheckpointedFunction`` to keep offsets), so
    advance the offset *before* yielding the value it covers.

    Yield a value, ``Timestamped(value, ts)``, ``Watermark(ts)``, or ``IDLE`` when there is
    nothing to emit right now (the runtime waits a little and asks again). Returning ends the
    input of this subtask.
    """

    def run(self, ctx) -> Iterable[Any]:
        raise NotImplementedError

    def cancel(self) -> None:
        pass


class CheckpointedFunction:
    """Operator (and keyed) state of a function, drawn at every checkpoint."""

    def initialize_state(self, context: "FunctionInitializationContext") -> None:
        raise NotImplementedError

    def snapshot_state(self, context: "FunctionSnapshotContext") -> None:
        raise NotImplementedError


class CheckpointListener:
    """Told when a checkpoint completed (all its state is durable) or was aborted. There is no
    notification for a checkpoint completed just before a failure: later notifications subsume
    earlier ones."""

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        pass

    def notify_checkpoint_aborted(self, checkpoint_id: int) -> None:
        pass


__all__ = [
    "AggregateFunction", "CheckpointListener", "CheckpointedFunction", "FilterFunction", "FlatMapFunction", "Function",
    "IDLE", "KeyedProcessFunction", "MAX_WATERMARK", "MIN_WATERMARK", "MapFunction", "ProcessFunction",
    "ReduceFunction", "SinkFunction", "SourceFunction", "Timestamped", "Watermark", "call_of",
]
