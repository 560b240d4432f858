"""What user functions get from the runtime: the runtime context (task information, keyed
state), the context of ``CheckpointedFunction.initialize_state`` (operator and keyed state
stores) and of ``snapshot_state`` (checkpoint id and timestamp).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..state.operator_backend import OperatorStateBackend
from ..state.keyed_backend import (AggregatingStateDescriptor, KeyedStateBackend, KeyedStateStore, ListStateDescriptor,
                           MapStateDescriptor, ReducingStateDescriptor, ValueStateDescriptor)


@dataclass
class OperatorInfo:
    job_id: str
    job_name: str
    name: str
    uid: str
    subtask: int
    parallelism: int
    max_parallelism: int
    attempt: int
    clock: Any
    checkpointing: bool = False

    @property
    def where(self) -> str:
        return f"{self.name} ({self.subtask + 1}/{self.parallelism})"


class RuntimeContext:
    def __init__(self, info: OperatorInfo, keyed: KeyedStateBackend | None):
        self._info = info
        self._keyed = keyed

    # task information ----------------------------------------------------------------------
    def get_index_of_this_subtask(self) -> int:
        return self._info.subtask

    def get_number_of_parallel_subtasks(self) -> int:
        return self._info.parallelism

    def get_max_number_of_parallel_subtasks(self) -> int:
        return self._info.max_parallelism

    def get_task_name(self) -> str:
        return self._info.name

    def get_attempt_number(self) -> int:
        return self._info.attempt

    def get_job_id(self) -> str:
        return self._info.job_id

    def is_checkpointing_enabled(self) -> bool:
        return self._info.checkpointing

    def current_processing_time(self) -> int:
        return self._info.clock.now_ms()

    index_of_this_subtask = property(get_index_of_this_subtask)
    number_of_parallel_subtasks = property(get_number_of_parallel_subtasks)
    attempt_number = property(get_attempt_number)

    # keyed state -------------------------------------------------------------------------------
    def _backend(self) -> KeyedStateBackend:
        if self._keyed is None:
            raise RuntimeError("Keyed state can only be used on a 'keyed stream', i.e., after a 'key_by()' operation "
                               f"({self._info.where})")
        return self._keyed

    def get_state(self, desc: ValueStateDescriptor):
        return self._backend().get_state(desc)

    def get_list_state(self, desc: ListStateDescriptor):
        return self._backend().get_state(desc)

    def get_map_state(self, desc: MapStateDescriptor):
        return self._backend().get_state(desc)

    def get_reducing_state(self, desc: ReducingStateDescriptor):
        return self._backend().get_state(desc)

    def get_aggregating_state(self, desc: AggregatingStateDescriptor):
        return self._backend().get_state(desc)


class FunctionInitializationContext:
    def __init__(self, restored_checkpoint_id: int | None, operator_store: OperatorStateBackend,
                 keyed: KeyedStateBackend | None, where: str):
        self._restored = restored_checkpoint_id
        self._ops = operator_store
        self._keyed = keyed
        self._where = where

    def is_restored(self) -> bool:
        return self._restored is not None

    def get_restored_checkpoint_id(self) -> int | None:
        return self._restored

    def get_operator_state_store(self) -> OperatorStateBackend:
        return self._ops

    def get_keyed_state_store(self) -> KeyedStateStore:
        if self._keyed is None:
            raise RuntimeError(f"{self._where}: keyed state is only available after key_by()")
        return KeyedStateStore(self._keyed)

    # Flink's shorter aliases
    get_operator_state = get_operator_state_store
    get_keyed_state = get_keyed_state_store


class FunctionSnapshotContext:
    __slots__ = ("checkpoint_id", "checkpoint_timestamp")

    def __init__(self, checkpoint_id: int, timestamp: int):
        self.checkpoint_id = checkpoint_id
        self.checkpoint_timestamp = timestamp

    def get_checkpoint_id(self) -> int:
        return self.checkpoint_id

    def get_checkpoint_timestamp(self) -> int:
        return self.checkpoint_timestamp
