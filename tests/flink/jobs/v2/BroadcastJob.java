import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.TreeMap;

import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.state.MapStateDescriptor;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.runtime.state.FunctionInitializationContext;
import org.apache.flink.runtime.state.FunctionSnapshotContext;
import org.apache.flink.streaming.api.checkpoint.CheckpointedFunction;
import org.apache.flink.streaming.api.datastream.BroadcastStream;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.co.KeyedBroadcastProcessFunction;
import org.apache.flink.streaming.api.functions.sink.v2.DiscardingSink;
import org.apache.flink.util.Collector;

/**
 * The broadcast state pattern (the runtime's tests/runtime/broadcast_jobs.py shape): the source
 * (uid src, list state "offsets") emits v = 0..n-1; keyed by "k-" + (v % KEYS) (String) and
 * connected to the same stream broadcast with the MapStateDescriptor "rules" (String -> Long),
 * a KeyedBroadcastProcessFunction (uid rules-totals) sums the values per key in ValueState
 * "total" (Long) and puts "rule-" + (v % 7) -> v into the broadcast state for every broadcast
 * element. The dump lists the keyed and broadcast state every subtask held at the savepoint.
 *
 * Args: --backend hashmap|rocksdb --snapshot savepoint --out DIR [--records N]
 */
public class BroadcastJob implements Oracle.JobDef {
    static final int P = 2;
    static final int KEYS = 20;
    static final MapStateDescriptor<String, Long> RULES = new MapStateDescriptor<>("rules", Types.STRING, Types.LONG);

    public static void main(String[] args) {
        Oracle.run(new BroadcastJob(), args);
    }

    static int records(Driver.Params p) {
        return p.getInt("records", 300);
    }

    @Override
    public int maxParallelism() {
        return 128;
    }

    @Override
    public LinkedHashMap<String, Integer> operators(Driver.Params p) {
        LinkedHashMap<String, Integer> m = new LinkedHashMap<>();
        m.put("src", 1);
        m.put("rules-totals", P);
        return m;
    }

    @Override
    public Map<String, Long> expectedCounts(Driver.Params p) {
        long n = records(p);
        Map<String, Long> m = new LinkedHashMap<>();
        m.put("src", n);
        m.put("elements", n);
        m.put("broadcast", n * P);
        return m;
    }

    @Override
    public void build(StreamExecutionEnvironment env, Driver.Params p) {
        DataStream<Long> src = env.addSource(new OperatorStateJob.Source(records(p))).uid("src").name("src")
                .setParallelism(1);
        BroadcastStream<Long> rules = src.broadcast(RULES);
        src.keyBy(v -> "k-" + (v % KEYS), Types.STRING)
                .connect(rules)
                .process(new Totals()).uid("rules-totals").name("rules-totals").setParallelism(P)
                .sinkTo(new DiscardingSink<>()).uid("sink").name("sink").setParallelism(P);
    }

    public static class Totals extends KeyedBroadcastProcessFunction<String, Long, Long, Long>
            implements CheckpointedFunction {
        private transient ValueState<Long> total;
        private transient Map<String, Long> totalMirror;
        private transient TreeMap<String, Long> rulesMirror;

        @Override
        public void open(OpenContext ctx) {
            total = getRuntimeContext().getState(new ValueStateDescriptor<>("total", Types.LONG));
        }

        @Override
        public void processElement(Long v, ReadOnlyContext ctx, Collector<Long> out) throws Exception {
            Long t = total.value();
            long next = (t == null ? 0 : t) + v;
            total.update(next);
            totalMirror.put(ctx.getCurrentKey(), next);
            Oracle.count("elements");
        }

        @Override
        public void processBroadcastElement(Long v, Context ctx, Collector<Long> out) throws Exception {
            ctx.getBroadcastState(RULES).put("rule-" + (v % 7), v);
            rulesMirror.put("rule-" + (v % 7), v);
            Oracle.count("broadcast");
        }

        @Override
        public void initializeState(FunctionInitializationContext ctx) {
            totalMirror = new HashMap<>();
            rulesMirror = new TreeMap<>();
        }

        @Override
        public void snapshotState(FunctionSnapshotContext ctx) {
            Oracle.record("rules-totals", getRuntimeContext().getTaskInfo().getIndexOfThisSubtask(),
                    ctx.getCheckpointId(), new Oracle.OpSnapshot().keyed("total", "VALUE", totalMirror)
                            .broadcast("rules", rulesMirror));
        }
    }
}
