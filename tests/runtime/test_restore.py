"""Stop with a savepoint, restore at another parallelism (keyed and operator state), and
restore errors."""

from __future__ import annotations

import threading
from collections import Counter

import pytest

from fstate.readers import tables
from fstate.runtime import (CheckpointedFunction, CollectSink, JobExecutionException, JobStatus, KeyedProcessFunction,
                            ListStateDescriptor, MapFunction, MapStateDescriptor, RestoreError, StateMigrationError,
                            Types, ValueStateDescriptor, read_committed)
from fstate.savepoint.loader import Savepoint
from tests.runtime.jobs import all_states_job, counting_job, make_env, wait_for, wait_until_running


@pytest.mark.parametrize("before,after", [(2, 3), (3, 1)])
def test_stop_with_savepoint_and_rescale(tmp_path, before, after):
    n = 3000
    out = tmp_path / "out"
    env = make_env(tmp_path, parallelism=before, interval=30)
    # the source subtasks stop after n/2 numbers in all: the savepoint is taken mid-way at any speed
    counting_job(env, out, n, rate=1000, idle_at_end=True, pause_after=n // (2 * before))
    client = env.execute_async("phase 1")
    wait_for(lambda: len(read_committed(str(out))) > 0)  # a checkpoint committed some output
    sp = client.stop_with_savepoint(str(tmp_path / "sp"))
    res1 = client.get_job_execution_result()
    assert res1.status == JobStatus.FINISHED and res1.savepoint_path == sp
    first = read_committed(str(out))
    assert 0 < len(first) < n, "stop the job mid-way"
    op = Savepoint.open(sp).operator("count")
    assert op.parallelism == before

    env2 = make_env(tmp_path, parallelism=after, interval=30)
    env2.restore_from(sp)
    counting_job(env2, out, n)
    res2 = env2.execute("phase 2")
    assert res2.status == JobStatus.FINISHED and res2.restored_from == sp
    lines = read_committed(str(out))
    values = Counter(int(line.split(",")[1]) for line in lines)
    assert values == Counter(range(n)), "every number exactly once"
    final = {}
    for line in lines:
        k, _, c = line.split(",")
        final[k] = max(final.get(k, 0), int(c))
    assert final == Counter(f"k-{i % 13}" for i in range(n)), "counts continued across the rescale"


def test_restore_errors(tmp_path):
    CollectSink.clear("all-states")
    env = make_env(tmp_path, parallelism=1, interval=10_000)
    all_states_job(env, n=10, keys=2)
    client = env.execute_async()
    wait_for(lambda: len(CollectSink.results("all-states")) == 10)
    sp = client.stop_with_savepoint()

    # an operator with state the new job does not have
    env2 = make_env(tmp_path)
    env2.restore_from(sp)
    env2.from_collection([1]).uid("src").add_sink(CollectSink("x")).uid("sink")
    with pytest.raises(JobExecutionException, match="Cannot map checkpoint/savepoint state for operator") as e:
        env2.execute()
    assert isinstance(e.value.__cause__, RestoreError)

    # allowed explicitly: runs
    env3 = make_env(tmp_path)
    env3.restore_from(sp, allow_non_restored_state=True)
    env3.from_collection([1]).uid("src").add_sink(CollectSink("x")).uid("sink")
    assert env3.execute().status == JobStatus.FINISHED

    # a state declared with an incompatible type: no restart loop, a clear error
    class Wrong(KeyedProcessFunction):
        def open(self, ctx):
            ctx.get_state(ValueStateDescriptor("total", Types.STRING))

        def process_element(self, value, ctx):
            return None

    env4 = make_env(tmp_path)
    env4.restore_from(sp, allow_non_restored_state=True)
    (env4.from_collection(["k-0"]).uid("src").map(lambda k: (k, 0)).uid("to-keyed")
     .key_by(lambda t: t[0]).process(Wrong()).uid("keyed"))
    with pytest.raises(JobExecutionException, match="incompatible") as e:
        env4.execute()
    assert isinstance(e.value.__cause__, StateMigrationError)


RESTORED: dict = {}


_RESTORED_LOCK = threading.Lock()


class Parts(MapFunction, CheckpointedFunction):
    """List state (split on rescale), union state (to all) and broadcast state (copied)."""

    def initialize_state(self, context):
        store = context.get_operator_state_store()
        self.parts = store.get_list_state(ListStateDescriptor("parts", Types.STRING))
        self.marks = store.get_union_list_state(ListStateDescriptor("marks", Types.LONG))
        self.rules = store.get_broadcast_state(MapStateDescriptor("rules", Types.STRING, Types.LONG))
        rc = self.get_runtime_context()
        i = rc.get_index_of_this_subtask()
        if context.is_restored():
            with _RESTORED_LOCK:
                RESTORED[i] = (self.parts.get(), sorted(self.marks.get()), dict(self.rules.items()))
        else:
            self.parts.update([f"p{i}-{j}" for j in range(i + 2)])
            self.marks.update([100 + i])
            self.rules.put_all({"a": 1, "b": 2})

    def snapshot_state(self, context):
        pass

    def map(self, value):
        return value


@pytest.mark.parametrize("before,after", [(3, 2), (2, 5)])
def test_operator_state_redistribution(tmp_path, before, after):
    env = make_env(tmp_path, parallelism=before)
    env.from_collection([], idle_at_end=True).uid("src").map(Parts()).uid("parts").add_sink(
        CollectSink("x")).uid("sink")
    client = env.execute_async()
    wait_until_running(client)
    sp = client.stop_with_savepoint()
    all_parts = [f"p{i}-{j}" for i in range(before) for j in range(i + 2)]
    assert sorted(v for _, _, v in tables.list_state_table(Savepoint.open(sp).operator("parts"), "parts").rows()) == \
        sorted(all_parts)

    RESTORED.clear()
    env2 = make_env(tmp_path, parallelism=after)
    env2.restore_from(sp)
    env2.from_collection([]).uid("src").map(Parts()).uid("parts").add_sink(CollectSink("x")).uid("sink")
    env2.execute()
    assert sorted(RESTORED) == list(range(after))
    got = [RESTORED[i][0] for i in range(after)]
    assert sorted(x for g in got for x in g) == sorted(all_parts), "each element exactly once"
    assert max(map(len, got)) - min(map(len, got)) <= 1, "evenly split"
    assert [x for g in got for x in g] == all_parts, "contiguous, in subtask order"
    for i in range(after):
        assert RESTORED[i][1] == [100 + j for j in range(before)], "union: everything everywhere"
        assert RESTORED[i][2] == {"a": 1, "b": 2}, "broadcast: a copy everywhere"
