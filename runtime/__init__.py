"""fstate's stream runtime: a small stateful stream processor that checkpoints in Apache Flink's
own savepoint format (``fstate read`` reads its checkpoints; Flink restores its savepoints).

See runtime/README.md for an example job and the design.
"""

from .clock import ManualClock, SystemClock
from .checkpointing.config import (CheckpointConfig, CheckpointingMode, ExternalizedCheckpointCleanup,
                                   ExternalizedCheckpointRetention, HashMapStateBackend)
from .configuration import Configuration
from .checkpointing.restarts import RestartStrategies
from .api.co_functions import (BroadcastProcessFunction, CoFlatMapFunction, CoMapFunction, CoProcessFunction,
                               KeyedBroadcastProcessFunction, KeyedCoProcessFunction, OutputTag)
from .api.connected import BroadcastConnectedStream, BroadcastStream, ConnectedStreams
from .checkpointing.coordinator import (CheckpointException, CheckpointFailureThresholdExceeded, CompletedCheckpoint,
                                        StopWithSavepointError, find_latest_checkpoint)
from .api.datastream import DataStream, KeyedStream, WatermarkStrategy
from .api.environment import StreamExecutionEnvironment
from .events import IDLE, MAX_WATERMARK, MIN_WATERMARK, CheckpointFailureReason, Timestamped, Watermark
from .checkpointing.failures import FailAt, FailureInjector, InjectedFailure
from .api.functions import (AggregateFunction, CheckpointedFunction, CheckpointListener, FilterFunction,
                            FlatMapFunction, KeyedProcessFunction, MapFunction, ProcessFunction, ReduceFunction,
                            SinkFunction, SourceFunction)
from .job import JobClient, JobExecutionException, JobExecutionResult, JobStatus
from .checkpointing.restore import RestoreError
from .api.sinks import (CollectSink, DiscardingSink, TransactionConflictError, TwoPhaseCommitFileSink,
                        TwoPhaseCommitSinkFunction, read_committed)
from .api.sources import CollectionSource, FileSource, SequenceSource
from .state.keyed_backend import (AggregatingStateDescriptor, ListStateDescriptor, MapStateDescriptor,
                                  ReducingStateDescriptor, StateMigrationError, ValueStateDescriptor)
from .state.ttl import StateTtlConfig
from .api.typeinfo import Types
from .api.windowing import (CountTrigger, EventTimeSessionWindows, EventTimeTrigger, ProcessingTimeSessionWindows,
                            ProcessingTimeTrigger, ProcessWindowFunction, PurgingTrigger, SlidingEventTimeWindows,
                            SlidingProcessingTimeWindows, TimeWindow, Trigger, TriggerResult, TumblingEventTimeWindows,
                            TumblingProcessingTimeWindows, WindowAssigner, WindowedStream, WindowFunction)

__all__ = [
    "BroadcastConnectedStream", "BroadcastProcessFunction", "BroadcastStream", "CoFlatMapFunction", "CoMapFunction",
    "CoProcessFunction", "ConnectedStreams", "KeyedBroadcastProcessFunction", "KeyedCoProcessFunction", "OutputTag",
    "AggregateFunction", "AggregatingStateDescriptor", "CheckpointConfig", "CheckpointException",
    "CheckpointFailureReason", "CheckpointFailureThresholdExceeded", "CheckpointListener", "CheckpointedFunction",
    "CheckpointingMode", "CollectSink", "CollectionSource", "CompletedCheckpoint", "Configuration", "DataStream",
    "DiscardingSink", "ExternalizedCheckpointCleanup", "ExternalizedCheckpointRetention", "FailAt",
    "FailureInjector", "FileSource", "FilterFunction", "FlatMapFunction", "HashMapStateBackend", "IDLE",
    "InjectedFailure", "JobClient", "JobExecutionException", "JobExecutionResult", "JobStatus", "KeyedProcessFunction",
    "KeyedStream", "ListStateDescriptor", "MAX_WATERMARK", "MIN_WATERMARK", "ManualClock", "MapFunction",
    "MapStateDescriptor", "ProcessFunction", "ReduceFunction", "ReducingStateDescriptor", "RestartStrategies",
    "RestoreError", "SequenceSource", "SinkFunction", "SourceFunction", "StateMigrationError", "StateTtlConfig",
    "StopWithSavepointError", "StreamExecutionEnvironment", "SystemClock", "Timestamped",
    "TransactionConflictError", "TwoPhaseCommitFileSink",
    "TwoPhaseCommitSinkFunction", "Types", "ValueStateDescriptor", "Watermark", "WatermarkStrategy",
    "find_latest_checkpoint", "read_committed",
    # windows
    "CountTrigger", "EventTimeSessionWindows", "EventTimeTrigger", "ProcessWindowFunction",
    "ProcessingTimeSessionWindows", "ProcessingTimeTrigger", "PurgingTrigger", "SlidingEventTimeWindows",
    "SlidingProcessingTimeWindows", "TimeWindow", "Trigger", "TriggerResult", "TumblingEventTimeWindows",
    "TumblingProcessingTimeWindows", "WindowAssigner", "WindowFunction", "WindowedStream",
]
