"""Barrier alignment in a task, driven item by item: exactly-once aligns, at-least-once counts."""

from __future__ import annotations

import threading
from types import SimpleNamespace

from fstate.runtime import ManualClock
from fstate.runtime.events import BARRIER, DATA, EOS, CheckpointBarrier
from fstate.runtime.task import InputGate, Task
from fstate.savepoint.metadata import SubtaskState


class _RecordingOp:
    def __init__(self):
        self.node = SimpleNamespace(id=0, operator_id=b"\x01" * 16)
        self.seen: list = []
        self.snapshots: list = []

    def initialize_state(self, restore, restored_checkpoint_id):
        pass

    def open(self):
        pass

    def process_record(self, ts, value):
        self.seen.append(value)

    def process_watermark(self, wm):
        pass

    def on_idle(self):
        pass

    def snapshot(self, checkpoint_id, timestamp, location):
        self.snapshots.append((checkpoint_id, list(self.seen)))
        return SubtaskState()

    def notify_checkpoint_complete(self, checkpoint_id):
        pass

    def notify_checkpoint_aborted(self, checkpoint_id):
        pass

    def finish(self):
        pass

    def close(self):
        pass


def _drive(aligned: bool, items: list) -> tuple[_RecordingOp, list]:
    acks = []
    coordinator = SimpleNamespace(acknowledge=lambda cid, att, key, states: acks.append(cid),
                                  decline=lambda cid, att, key, reason, cause, name: acks.append((cid, reason)))
    master = SimpleNamespace(aligned=aligned, injector=None, coordinator=coordinator, clock=ManualClock(0),
                             post=lambda ev: None, source_batch=64)
    attempt = SimpleNamespace(number=0, cancelled=threading.Event())
    chain = SimpleNamespace(id=0, name="op", parallelism=1, is_source=False)
    gate = InputGate(2, 64)
    for item in items:
        gate.q.put(item)
    op = _RecordingOp()
    Task(master, attempt, chain, 0, [op], gate, [], {}, None)._run()
    return op, acks


def test_exactly_once_aligns_barriers_at_least_once_does_not():
    b1 = CheckpointBarrier(1, 0, "/nowhere")
    b2 = CheckpointBarrier(2, 0, "/nowhere")
    items = [(0, BARRIER, b1), (0, DATA, [(None, "x1")]), (1, DATA, [(None, "y1")]), (1, BARRIER, b1),
             (0, DATA, [(None, "x2")]), (0, BARRIER, b2), (1, BARRIER, b2), (0, EOS, None), (1, EOS, None)]
    op, acks = _drive(True, items)
    # x1 came after the barrier on channel 0: held back until the barrier came on channel 1 too
    assert op.snapshots == [(1, ["y1"]), (2, ["y1", "x1", "x2"])]
    assert op.seen == ["y1", "x1", "x2"] and acks == [1, 2]

    op, acks = _drive(False, items)
    # at-least-once: nothing waits; the snapshot includes x1, which a restore replays again
    assert op.snapshots == [(1, ["x1", "y1"]), (2, ["x1", "y1", "x2"])]
    assert acks == [1, 2]


def test_a_finished_channel_does_not_block_alignment():
    b1 = CheckpointBarrier(1, 0, "/nowhere")
    op, acks = _drive(True, [(1, EOS, None), (0, DATA, [(None, "a")]), (0, BARRIER, b1), (0, DATA, [(None, "b")]),
                             (0, EOS, None)])
    assert op.snapshots == [(1, ["a"])] and op.seen == ["a", "b"] and acks == [1]
