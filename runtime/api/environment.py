"""``StreamExecutionEnvironment``: where a job is defined, configured and started."""

from __future__ import annotations

import uuid
from typing import Any, Iterable

from ...savepoint.errors import InvalidArgumentError
from ...savepoint.limits import UPPER_MAX_PARALLELISM
from ...savepoint.io.uri import strip_file_scheme
from ..clock import Clock, SystemClock
from ..checkpointing.config import CheckpointConfig, CheckpointingMode, HashMapStateBackend, StateBackend
from ..configuration import Configuration
from ..checkpointing.restarts import RestartStrategyConfiguration
from .datastream import DataStream
from ..checkpointing.failures import FailureInjector
from ..graph import StreamGraph
from ..job import JobClient, JobExecutionResult, JobMaster
from .sources import CollectionSource, FileSource, SequenceSource


class StreamExecutionEnvironment:
    """Defines a streaming job and runs it.

    >>> env = StreamExecutionEnvironment.get_execution_environment()
    >>> env.enable_checkpointing(1000, CheckpointingMode.EXACTLY_ONCE)
    >>> env.from_sequence(1, 100).map(lambda x: x * 2).print()
    >>> env.execute("doubling")
    """

    def __init__(self, configuration: Configuration | dict | None = None, *, clock: Clock | None = None):
        conf = configuration if isinstance(configuration, Configuration) else Configuration(configuration or {})
        self.configuration = conf
        self.parallelism = int(conf.get("parallelism.default", 1))
        mp = conf.get("pipeline.max-parallelism")
        self.max_parallelism: int | None = int(mp) if mp is not None else None
        self.checkpoint_config = CheckpointConfig()
        conf.apply_checkpointing(self.checkpoint_config)
        self.state_backend: StateBackend = conf.state_backend() or HashMapStateBackend()
        self.restart_strategy: RestartStrategyConfiguration | None = conf.restart_strategy()
        self.savepoint_dir = conf.savepoint_dir()
        self.restore_path = conf.restore_path()
        self.allow_non_restored_state = conf.allow_non_restored_state()
        self.clock: Clock = clock or SystemClock()
        self.failure_injector: FailureInjector | None = None
        #: records a source emits between two looks at its mailbox (checkpoint triggers)
        self.source_batch_size = 64
        #: records per network buffer
        self.network_batch_size = int(conf.get("fstate.runtime.network-batch-size", 256))
        #: the operators defined so far and the edges between them
        self.graph = StreamGraph()

    @staticmethod
    def get_execution_environment(configuration: Configuration | dict | None = None) -> "StreamExecutionEnvironment":
        return StreamExecutionEnvironment(configuration)

    # -- settings ------------------------------------------------------------------------------
    def set_parallelism(self, parallelism: int) -> "StreamExecutionEnvironment":
        if parallelism < 1:
            raise InvalidArgumentError("parallelism must be >= 1")
        self.parallelism = parallelism
        return self

    def get_parallelism(self) -> int:
        return self.parallelism

    def set_max_parallelism(self, max_parallelism: int) -> "StreamExecutionEnvironment":
        if not 1 <= max_parallelism <= UPPER_MAX_PARALLELISM:
            raise InvalidArgumentError(f"max parallelism must be within 1..{UPPER_MAX_PARALLELISM}")
        self.max_parallelism = max_parallelism
        return self

    def get_max_parallelism(self) -> int | None:
        return self.max_parallelism

    def enable_checkpointing(self, interval_ms: int,
                             mode: CheckpointingMode = CheckpointingMode.EXACTLY_ONCE) -> "StreamExecutionEnvironment":
        self.checkpoint_config.set_checkpoint_interval(interval_ms)
        self.checkpoint_config.set_checkpointing_mode(mode)
        return self

    def get_checkpoint_config(self) -> CheckpointConfig:
        return self.checkpoint_config

    def set_state_backend(self, backend: StateBackend) -> "StreamExecutionEnvironment":
        if not isinstance(backend, HashMapStateBackend):
            raise InvalidArgumentError(f"fstate's runtime keeps keyed state on the heap (HashMapStateBackend); "
                                       f"{type(backend).__name__} is not supported")
        self.state_backend = backend
        return self

    def get_state_backend(self) -> StateBackend:
        return self.state_backend

    def set_restart_strategy(self, strategy: RestartStrategyConfiguration) -> "StreamExecutionEnvironment":
        self.restart_strategy = strategy
        return self

    def set_default_savepoint_directory(self, directory: str) -> "StreamExecutionEnvironment":
        self.savepoint_dir = strip_file_scheme(str(directory))
        return self

    def restore_from(self, path: str, allow_non_restored_state: bool = False) -> "StreamExecutionEnvironment":
        """Start the job from a savepoint or retained checkpoint (``execution.state-recovery.path``).
        State of operators the job no longer has is an error unless ``allow_non_restored_state``."""
        self.restore_path = strip_file_scheme(str(path))
        self.allow_non_restored_state = allow_non_restored_state
        return self

    def set_failure_injector(self, injector: FailureInjector | None) -> "StreamExecutionEnvironment":
        self.failure_injector = injector
        return self

    # -- sources ------------------------------------------------------------------------------
    def add_source(self, source: Any, name: str = "Source", parallelism: int | None = None) -> DataStream:
        node = self.graph.add_node("source", name, source)
        node.parallelism = parallelism
        return DataStream(self, node)

    def from_sequence(self, start: int, end: int, **options: Any) -> DataStream:
        """The numbers ``start..end`` (inclusive) from a replayable, parallel source."""
        return self.add_source(SequenceSource(start, end, **options), "Sequence Source")

    def from_collection(self, values: Iterable[Any], **options: Any) -> DataStream:
        return self.add_source(CollectionSource(values, **options), "Collection Source", parallelism=1)

    def read_text_file(self, paths: str | list[str], **options: Any) -> DataStream:
        return self.add_source(FileSource(paths, **options), "File Source")

    # -- running ----------------------------------------------------------------------------------
    def _master(self, job_name: str | None, job_id: str | None) -> JobMaster:
        nodes = self.graph.nodes
        if not nodes:
            raise InvalidArgumentError("no operators defined in this job")
        if not any(n.is_source for n in nodes):
            raise InvalidArgumentError("a job needs a source")
        return JobMaster(self, job_name or "fstate job", job_id or uuid.uuid4().hex, nodes)

    def execute_async(self, job_name: str | None = None, *, job_id: str | None = None) -> JobClient:
        master = self._master(job_name, job_id)
        master.start()
        return JobClient(master)

    def execute(self, job_name: str | None = None, *, job_id: str | None = None,
                timeout: float | None = None) -> JobExecutionResult:
        """Run the job until it finishes (or fails for good); raises JobExecutionException then."""
        return self.execute_async(job_name, job_id=job_id).get_job_execution_result(timeout)
