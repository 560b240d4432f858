"""Tasks: one thread per parallel subtask of an operator chain, connected by bounded channels.

Records travel in batches; checkpoint barriers, watermarks and end-of-stream travel in order
with them. A task's input gate is one bounded queue fed by all its input channels (each item is
tagged with its channel). For EXACTLY_ONCE a task *aligns* barriers: after the barrier of
checkpoint n arrived on a channel, further input of that channel is held back until the barrier
arrived on every channel; then the task snapshots its operators, forwards the barrier and
replays the held-back input. For AT_LEAST_ONCE barriers are only counted (Flink's barrier
tracker): the snapshot is taken when the last one arrives, and no input waits.
"""

from __future__ import annotations

import logging
import queue
import threading
import traceback
from collections import deque
from typing import Any

from ..savepoint.types.hashing import key_group_for_hash, operator_index_for_key_group
from .events import (BARRIER, DATA, EOS, IDLE, MAX_WATERMARK, MIN_WATERMARK, WAKE, WATERMARK, CheckpointBarrier,
                     CheckpointFailureReason, FinishSource, NotifyCheckpointAborted, NotifyCheckpointComplete,
                     ResumeSource, SourceExhausted, TaskFailed, TaskFinished, TaskMail, Timestamped, TriggerCheckpoint,
                     TriggerStopWithSavepoint, Watermark)
from .checkpointing.failures import InjectedFailure
from .graph import Edge, Partitioning
from .api.typeinfo import infer_key_type
from .exceptions import TaskCancelled

log = logging.getLogger("fstate.runtime.task")

_WAKE_ITEM = (-1, WAKE, None)
POLL_S = 0.05


class InputGate:
    def __init__(self, num_channels: int, capacity: int, channel_inputs: list[int] | None = None):
        self.num_channels = num_channels
        self.q: queue.Queue = queue.Queue(max(2, capacity))
        #: per channel, the input of the head operator it feeds (1: a two-input operator's second)
        self.channel_inputs = channel_inputs if channel_inputs is not None else [0] * num_channels


def put_blocking(q: queue.Queue, item, cancelled: threading.Event) -> None:
    try:
        q.put_nowait(item)
        return
    except queue.Full:
        pass
    while True:
        if cancelled.is_set():
            raise TaskCancelled()
        try:
            q.put(item, timeout=POLL_S)
            return
        except queue.Full:
            continue


class RecordWriter:
    """Partitions one output edge of a subtask over the downstream subtasks' channels."""

    def __init__(self, edge: Edge, targets: list[tuple[InputGate, int]], subtask: int, batch_size: int,
                 cancelled: threading.Event):
        self.edge = edge
        self.targets = targets
        self.cancelled = cancelled
        self.batch_size = batch_size
        self.buffers: list[list] = [[] for _ in targets]
        self.emit = self._make_emit(subtask)

    def _make_emit(self, subtask: int):
        bufs = self.buffers
        size = self.batch_size
        flush = self._flush
        n = len(bufs)
        kind = self.edge.partitioning
        if kind == Partitioning.FORWARD or n == 1:
            def emit_one(ts, v):
                b = bufs[0]
                b.append((ts, v))
                if len(b) >= size:
                    flush(0)

            return emit_one
        if kind == Partitioning.REBALANCE:
            pos = [subtask % n]

            def emit_rr(ts, v):
                i = pos[0]
                pos[0] = (i + 1) % n
                b = bufs[i]
                b.append((ts, v))
                if len(b) >= size:
                    flush(i)

            return emit_rr
        if kind == Partitioning.BROADCAST:
            def emit_all(ts, v):
                for i, b in enumerate(bufs):
                    b.append((ts, v))
                    if len(b) >= size:
                        flush(i)

            return emit_all
        if kind == Partitioning.HASH:
            select = self.edge.key_selector
            key_type = self.edge.key_type
            maxp = self.edge.target.resolved_max_parallelism
            cache: dict[Any, int] = {}

            def emit_hash(ts, v):
                key = select(v)
                t = cache.get(key)
                if t is None:
                    kt = key_type if key_type is not None else infer_key_type(key)
                    t = operator_index_for_key_group(key_group_for_hash(kt.java_hash(key), maxp), n, maxp)
                    if len(cache) > 65536:
                        cache.clear()
                    cache[key] = t
                b = bufs[t]
                b.append((ts, v))
                if len(b) >= size:
                    flush(t)

            return emit_hash
        raise ValueError(f"unknown partitioning {kind}")

    def _flush(self, i: int) -> None:
        b = self.buffers[i]
        if not b:
            return
        self.buffers[i] = []
        gate, ch = self.targets[i]
        put_blocking(gate.q, (ch, DATA, b), self.cancelled)

    def flush(self) -> None:
        for i in range(len(self.buffers)):
            if self.buffers[i]:
                self._flush(i)

    def broadcast(self, kind: int, payload) -> None:
        self.flush()
        for gate, ch in self.targets:
            put_blocking(gate.q, (ch, kind, payload), self.cancelled)


class Task:
    """One subtask of an operator chain, run by its own thread."""

    def __init__(self, master, attempt, chain, subtask: int, operators: list, gate: InputGate | None,
                 writers: list[RecordWriter], restores: dict, restored_checkpoint_id: int | None):
        self.master = master
        self.attempt = attempt
        self.chain = chain
        self.subtask = subtask
        self.operators = operators
        self.gate = gate
        self.writers = writers
        self.restores = restores
        self.restored_checkpoint_id = restored_checkpoint_id
        self.key = (chain.id, subtask)
        self.name = f"{chain.name} ({subtask + 1}/{chain.parallelism})"
        self.is_source = chain.is_source
        self.mail: queue.SimpleQueue = queue.SimpleQueue()
        self.cancelled: threading.Event = attempt.cancelled
        self.mode_aligned = master.aligned
        self.thread = threading.Thread(target=self._run, name=f"fstate-{self.name}", daemon=True)
        # input state
        self._open: set[int] = set(range(gate.num_channels)) if gate else set()
        self._wms: list[int] = [MIN_WATERMARK] * (gate.num_channels if gate else 0)
        self._wm = MIN_WATERMARK
        self._aligning: CheckpointBarrier | None = None
        self._seen: set[int] = set()
        self._last_barrier = 0
        self._blocked: set[int] = set()
        self._buffered: dict[int, list] = {}
        self._replay: deque = deque()
        # source state
        self._finish_requested = False
        self._suspended = False
        self._timer_ops: list = []  # operators with processing-time timers (set up in _setup)
        self._processors: list = []  # per input channel: the head operator's process_record(2)
        self._record_check = None

    # ------------------------------------------------------------------------------------------
    def start(self) -> None:
        self.thread.start()

    def post(self, msg: TaskMail) -> None:
        self.mail.put(msg)
        if self.gate is not None:
            try:
                self.gate.q.put_nowait(_WAKE_ITEM)
            except queue.Full:
                pass  # the task is busy reading anyway

    def _run(self) -> None:
        try:
            self._setup()
            if self.is_source:
                self._run_source()
            else:
                self._run_input()
            self._end_of_input()
            self.master.post(TaskFinished(self.attempt.number, self.key))
        except TaskCancelled:
            pass
        except BaseException as e:  # noqa: BLE001 - any failure of user code fails the task
            if not self.cancelled.is_set():
                self.master.post(TaskFailed(self.attempt.number, self.name, e, traceback.format_exc()))
        finally:
            for op in self.operators:
                try:
                    op.close()
                except Exception:  # noqa: BLE001
                    log.debug("closing %s failed", self.name, exc_info=True)

    def _setup(self) -> None:
        for op in self.operators:
            op.initialize_state(self.restores.get(op.node.id), self.restored_checkpoint_id)
        self._timer_ops = [op for op in self.operators if getattr(op, "timer_service", None) is not None]
        # wire and open from the tail: each operator's emit is the next one's process_record
        tail = self.operators[-1]
        main = [w for w in self.writers if w.edge.side_tag is None]
        if len(main) == 1:
            tail.emit = main[0].emit
        elif main:
            def fan_out(ts, v):
                for w in main:
                    w.emit(ts, v)

            tail.emit = fan_out
        side: dict[str, list] = {}
        for w in self.writers:
            if w.edge.side_tag is not None:
                side.setdefault(w.edge.side_tag.tag_id, []).append(w.emit)
        if side:
            def emit_side(tag, ts, v):
                for emit in side.get(tag.tag_id, ()):
                    emit(ts, v)

            tail.emit_side = emit_side
        tail.emit_watermark = self._emit_watermark_downstream
        for i in range(len(self.operators) - 1, -1, -1):
            op = self.operators[i]
            if i < len(self.operators) - 1:
                nxt = self.operators[i + 1]
                op.emit = nxt.process_record
                op.emit_watermark = nxt.process_watermark
            op.open()
        head = self.operators[0]
        check = self.master.injector.record_checker(self.name, self.attempt.number) if self.master.injector else None
        second = getattr(head, "process_record2", None)  # a two-input operator's second input
        if check is not None and not self.is_source:
            real = head.process_record

            def checked(ts, v):
                check()
                real(ts, v)

            head.process_record = checked
            if second is not None:
                real2 = second

                def checked2(ts, v):
                    check()
                    real2(ts, v)

                second = checked2
        self._record_check = check
        inputs = self.gate.channel_inputs if self.gate is not None else []
        self._processors = [second if number == 1 else head.process_record for number in inputs]

    def _emit_watermark_downstream(self, wm: int) -> None:
        for w in self.writers:
            w.broadcast(WATERMARK, wm)

    # ------------------------------------------------------------------------------------------
    # mail: checkpoint triggers (sources), notifications, lifecycle

    def _process_mail(self, first: TaskMail | None = None) -> None:
        msg = first
        while True:
            if msg is None:
                try:
                    msg = self.mail.get_nowait()
                except queue.Empty:
                    return
            match msg:
                case NotifyCheckpointComplete(checkpoint_id=cid):
                    if self.master.injector:
                        self.master.injector.check("notify", self.name, self.attempt.number, f"checkpoint {cid}")
                    for op in self.operators:
                        op.notify_checkpoint_complete(cid)
                case NotifyCheckpointAborted(checkpoint_id=cid):
                    if self._aligning is not None and self._aligning.checkpoint_id == cid:
                        self._release_alignment(cid)
                    for op in self.operators:
                        op.notify_checkpoint_aborted(cid)
                case TriggerCheckpoint(barrier=barrier):
                    self._source_trigger(barrier)
                case TriggerStopWithSavepoint(barrier=barrier, drain=drain):
                    self._suspended = True
                    if drain:  # fire every event-time timer before the savepoint
                        self.operators[0].emit_watermark(MAX_WATERMARK)
                    self._source_trigger(barrier)
                case ResumeSource():
                    self._suspended = False
                case FinishSource():
                    self._finish_requested = True
                case _:
                    raise TypeError(f"unknown task mail {msg!r}")
            msg = None

    def _wait_mail(self, timeout: float) -> None:
        try:
            msg = self.mail.get(timeout=timeout)
        except queue.Empty:
            return
        self._process_mail(msg)

    # ------------------------------------------------------------------------------------------
    # checkpoints

    def _source_trigger(self, barrier: CheckpointBarrier) -> None:
        for w in self.writers:
            w.broadcast(BARRIER, barrier)
        self._snapshot(barrier)

    def _snapshot(self, barrier: CheckpointBarrier) -> None:
        cid = barrier.checkpoint_id
        coordinator = self.master.coordinator
        if self.master.injector:
            self.master.injector.check("snapshot", self.name, self.attempt.number, f"checkpoint {cid}")
        try:
            states = {op.node.operator_id: op.snapshot(cid, barrier.timestamp, barrier.location)
                      for op in self.operators}
        except InjectedFailure:
            raise
        except OSError as e:
            coordinator.decline(cid, self.attempt.number, self.key, CheckpointFailureReason.CHECKPOINT_ASYNC_EXCEPTION,
                                e, self.name)
            return
        except Exception as e:  # noqa: BLE001 - user snapshot code: decline, do not fail the task
            log.warning("Could not complete snapshot %d for %s: %r", cid, self.name, e)
            coordinator.decline(cid, self.attempt.number, self.key, CheckpointFailureReason.CHECKPOINT_DECLINED, e,
                                self.name)
            return
        coordinator.acknowledge(cid, self.attempt.number, self.key, states)

    def _on_barrier(self, ch: int, barrier: CheckpointBarrier) -> None:
        cid = barrier.checkpoint_id
        if cid <= self._last_barrier:
            return  # a barrier of a checkpoint this task already completed or aborted
        current = self._aligning
        if current is None or cid > current.checkpoint_id:
            if current is not None:
                # a newer barrier overtook an unfinished alignment: that checkpoint cannot complete here
                self.master.coordinator.decline(current.checkpoint_id, self.attempt.number, self.key,
                                                CheckpointFailureReason.CHECKPOINT_DECLINED_SUBSUMED, None, self.name)
                self._unblock()
            self._aligning = barrier
            self._seen = set()
        elif cid < current.checkpoint_id:
            return
        self._seen.add(ch)
        if self.mode_aligned:
            self._blocked.add(ch)
        self._maybe_complete_alignment()

    def _maybe_complete_alignment(self) -> None:
        b = self._aligning
        if b is None or not self._seen >= self._open:
            return
        self._aligning = None
        self._seen = set()
        self._last_barrier = b.checkpoint_id
        for w in self.writers:
            w.broadcast(BARRIER, b)
        self._snapshot(b)
        self._unblock()

    def _release_alignment(self, cid: int) -> None:
        self._aligning = None
        self._seen = set()
        self._last_barrier = max(self._last_barrier, cid)
        self._unblock()

    def _unblock(self) -> None:
        if not self._blocked:
            return
        held = []
        for ch in sorted(self._blocked):
            held.extend(self._buffered.pop(ch, ()))
        self._blocked = set()
        # held-back items are older than anything still waiting in the replay queue
        self._replay.extendleft(reversed(held))

    # ------------------------------------------------------------------------------------------
    # input tasks

    def _run_input(self) -> None:
        q = self.gate.q
        replay = self._replay
        mail = self.mail
        cancelled = self.cancelled
        timer_ops = self._timer_ops
        clock = self.master.clock
        while self._open:
            if cancelled.is_set():
                raise TaskCancelled()
            if not mail.empty():
                self._process_mail()
            if timer_ops:
                self._fire_processing_timers(clock.now_ms())
            if replay:
                item = replay.popleft()
            else:
                try:
                    item = q.get_nowait()
                except queue.Empty:
                    self._idle()
                    try:
                        item = q.get(timeout=self._poll_timeout())
                    except queue.Empty:
                        continue
            ch, kind, payload = item
            if ch in self._blocked:
                self._buffered.setdefault(ch, []).append(item)
                continue
            if kind == DATA:
                process = self._processors[ch]
                for ts, v in payload:
                    process(ts, v)
            elif kind == WAKE:
                continue
            elif kind == BARRIER:
                self._on_barrier(ch, payload)
            elif kind == WATERMARK:
                self._on_watermark(ch, payload)
            elif kind == EOS:
                self._on_eos(ch)

    def _poll_timeout(self) -> float:
        if not self._timer_ops:
            return POLL_S
        now = self.master.clock.now_ms()
        nxt = min((t for t in (op.next_processing_timer() for op in self._timer_ops) if t is not None),
                  default=None)
        if nxt is None:
            return POLL_S
        return max(0.001, min(POLL_S, (nxt - now) / 1000))

    def _fire_processing_timers(self, now: int) -> None:
        for op in self._timer_ops:
            nxt = op.next_processing_timer()
            if nxt is not None and nxt <= now:
                op.on_processing_time(now)

    def _idle(self) -> None:
        for op in self.operators:
            op.on_idle()
        for w in self.writers:
            w.flush()

    def _on_watermark(self, ch: int, wm: int) -> None:
        wms = self._wms
        if wm <= wms[ch]:
            return
        wms[ch] = wm
        self._advance_watermark()

    def _advance_watermark(self) -> None:
        if not self._open:
            return
        new = min(self._wms[c] for c in self._open)
        if new > self._wm:
            self._wm = new
            self.operators[0].process_watermark(new)

    def _on_eos(self, ch: int) -> None:
        self._open.discard(ch)
        self._advance_watermark()
        if self._aligning is not None:
            self._maybe_complete_alignment()

    # ------------------------------------------------------------------------------------------
    # source tasks

    def _run_source(self) -> None:
        head = self.operators[0]
        it = head.start(SourceContext(self))
        emit = head.emit
        emit_wm = head.emit_watermark
        check = self._record_check
        cancelled = self.cancelled
        mail = self.mail
        exhausted = False
        batch = self.master.source_batch
        while not self._finish_requested:
            if cancelled.is_set():
                raise TaskCancelled()
            if not mail.empty():
                self._process_mail()
                continue
            if exhausted or self._suspended:
                self._idle()
                self._wait_mail(POLL_S)
                continue
            idle = False
            for _ in range(batch):
                try:
                    item = next(it)
                except StopIteration:
                    exhausted = True
                    break
                t = type(item)
                if t is Timestamped:
                    if check is not None:
                        check()
                    emit(item.timestamp, item.value)
                elif t is Watermark:
                    emit_wm(item.timestamp)
                elif item is IDLE:
                    idle = True
                    break
                else:
                    if check is not None:
                        check()
                    emit(None, item)
            if exhausted:
                emit_wm(MAX_WATERMARK)
                self._idle()
                log.info("Source %s reached the end of its input.", self.name)
                self.master.post(SourceExhausted(self.attempt.number, self.key))
            elif idle:
                self._idle()
                self._wait_mail(0.002)

    def _end_of_input(self) -> None:
        for op in self.operators:
            op.finish()
        for w in self.writers:
            w.broadcast(EOS, None)


class SourceContext:
    """What a source's ``run(ctx)`` gets: where it runs."""

    def __init__(self, task: Task):
        self._task = task

    def get_index_of_this_subtask(self) -> int:
        return self._task.subtask

    def get_number_of_parallel_subtasks(self) -> int:
        return self._task.chain.parallelism

    @property
    def index_of_this_subtask(self) -> int:
        return self._task.subtask

    @property
    def number_of_parallel_subtasks(self) -> int:
        return self._task.chain.parallelism

    def current_processing_time(self) -> int:
        return self._task.master.clock.now_ms()
