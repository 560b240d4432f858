import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

import org.apache.flink.api.common.state.BroadcastState;
import org.apache.flink.api.common.state.CheckpointListener;
import org.apache.flink.api.common.state.ListState;
import org.apache.flink.api.common.state.ListStateDescriptor;
import org.apache.flink.api.common.state.MapStateDescriptor;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.java.tuple.Tuple2;
import org.apache.flink.runtime.state.FunctionInitializationContext;
import org.apache.flink.runtime.state.FunctionSnapshotContext;
import org.apache.flink.streaming.api.checkpoint.CheckpointedFunction;
import org.apache.flink.streaming.api.datastream.BroadcastStream;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.ProcessFunction;
import org.apache.flink.streaming.api.functions.co.BroadcastProcessFunction;
import org.apache.flink.streaming.api.functions.sink.v2.DiscardingSink;
import org.apache.flink.streaming.api.functions.source.legacy.RichSourceFunction;
import org.apache.flink.util.Collector;

/**
 * Operator (non-keyed) state oracle: list state of many value types, union list state, a
 * parallelism-1 operator, broadcast state, and one operator whose state is large enough
 * (> 20 KB per subtask) to be written to its own file beside _metadata.
 *
 * Args: --backend hashmap|rocksdb --snapshot savepoint|checkpoint --out DIR [--records N]
 *       [--restore SNAPSHOT_DIR]  (verify mode, see Oracle)
 */
public class OperatorStateJob implements Oracle.JobDef {
    static final int MAX_PARALLELISM = 128;
    static final int LISTS_P = 3;
    static final int BCAST_P = 2;
    static final int BIG_P = 2;
    static final int BIG_PER_RECORD = 80;

    public static void main(String[] args) {
        Oracle.run(new OperatorStateJob(), args);
    }

    static int records(Driver.Params p) {
        return p.getInt("records", 60);
    }

    @Override
    public int maxParallelism() {
        return MAX_PARALLELISM;
    }

    @Override
    public LinkedHashMap<String, Integer> operators(Driver.Params p) {
        LinkedHashMap<String, Integer> m = new LinkedHashMap<>();
        m.put("src", 1);
        m.put("lists", LISTS_P);
        m.put("single", 1);
        m.put("bcast", BCAST_P);
        m.put("big", BIG_P);
        return m;
    }

    @Override
    public Map<String, Long> expectedCounts(Driver.Params p) {
        if (Oracle.restoring()) {
            return new LinkedHashMap<>();
        }
        long n = records(p);
        Map<String, Long> m = new LinkedHashMap<>();
        m.put("src", n);
        m.put("lists", n);
        m.put("single", n);
        m.put("bcast-elements", n);
        m.put("bcast-broadcast", n * BCAST_P);
        m.put("big", n);
        return m;
    }

    @Override
    public void build(StreamExecutionEnvironment env, Driver.Params p) {
        DataStream<Long> src = env.addSource(new Source(records(p))).uid("src").name("src").setParallelism(1);

        src.partitionCustom((Long key, int n) -> (int) (key % n), (Long v) -> v)
                .process(new Lists()).uid("lists").name("lists").setParallelism(LISTS_P)
                .sinkTo(new DiscardingSink<>()).uid("sink-lists").name("sink-lists").setParallelism(LISTS_P);

        src.process(new Single()).uid("single").name("single").setParallelism(1)
                .sinkTo(new DiscardingSink<>()).uid("sink-single").name("sink-single").setParallelism(1);

        BroadcastStream<Long> rules = src.broadcast(Bcast.RULES, Bcast.LIMITS);
        src.partitionCustom((Long key, int n) -> (int) (key % n), (Long v) -> v)
                .connect(rules)
                .process(new Bcast()).uid("bcast").name("bcast").setParallelism(BCAST_P)
                .sinkTo(new DiscardingSink<>()).uid("sink-bcast").name("sink-bcast").setParallelism(BCAST_P);

        src.partitionCustom((Long key, int n) -> (int) (key % n), (Long v) -> v)
                .process(new Big()).uid("big").name("big").setParallelism(BIG_P)
                .sinkTo(new DiscardingSink<>()).uid("sink-big").name("sink-big").setParallelism(BIG_P);
    }

    static int subtask(org.apache.flink.api.common.functions.RuntimeContext rc) {
        return rc.getTaskInfo().getIndexOfThisSubtask();
    }

    // ------------------------------------------------------------------ src

    /** Emits 0..n-1 once, then idles until cancelled/stopped. ListState "offsets" = [emitted]. */
    public static class Source extends RichSourceFunction<Long> implements CheckpointedFunction, CheckpointListener {
        private final int n;
        private volatile boolean running = true;
        private long emitted;
        private transient ListState<Long> offsets;
        /** In verify mode: exactly what was restored (a subtask may restore several values or none). */
        private transient List<Long> restoredOffsets;

        Source(int n) {
            this.n = n;
        }

        @Override
        public void run(SourceContext<Long> ctx) throws Exception {
            if (Oracle.restoring()) {
                return; // verify mode: finish at once, so the whole job finishes
            }
            while (running && emitted < n) {
                synchronized (ctx.getCheckpointLock()) {
                    ctx.collect(emitted);
                    emitted++;
                    Oracle.count("src");
                }
            }
            while (running) {
                Thread.sleep(20);
            }
        }

        @Override
        public void cancel() {
            running = false;
        }

        @Override
        public void initializeState(FunctionInitializationContext ctx) throws Exception {
            offsets = ctx.getOperatorStateStore().getListState(new ListStateDescriptor<>("offsets", Types.LONG));
            List<Long> restored = new ArrayList<>();
            for (Long v : offsets.get()) {
                emitted = v;
                restored.add(v);
            }
            if (Oracle.restoring()) {
                restoredOffsets = restored;
            }
        }

        private Oracle.OpSnapshot mirror() {
            return new Oracle.OpSnapshot().list("offsets", "SPLIT_DISTRIBUTE", restoredOffsets != null
                    ? restoredOffsets : Arrays.asList(emitted));
        }

        @Override
        public void snapshotState(FunctionSnapshotContext ctx) throws Exception {
            offsets.update(Arrays.asList(emitted));
            Oracle.record("src", subtask(getRuntimeContext()), ctx.getCheckpointId(), mirror());
            Oracle.sourceSnapshot(ctx.getCheckpointId());
        }

        @Override
        public void close() {
            Oracle.recordRestored("src", subtask(getRuntimeContext()), mirror());
        }

        @Override
        public void notifyCheckpointComplete(long checkpointId) {
            Oracle.COMPLETED.add(checkpointId);
        }
    }

    // ------------------------------------------------------------------ lists

    /** One list state per value type plus a union list state and a never-written one. */
    public static class Lists extends ProcessFunction<Long, Long> implements CheckpointedFunction {
        static final String[] NAMES = {"longs", "ints", "strings", "doubles", "bools", "bytes", "tuples", "empty"};
        static final TypeInformation<?>[] TYPES = {Types.LONG, Types.INT, Types.STRING, Types.DOUBLE, Types.BOOLEAN,
                Types.PRIMITIVE_ARRAY(Types.BYTE), Types.TUPLE(Types.STRING, Types.LONG), Types.LONG};

        private transient Map<String, ListState<Object>> states;
        private transient ListState<Long> unionMarks;
        private transient Map<String, List<Object>> mirror;
        private transient List<Long> unionMirror;

        @SuppressWarnings({"unchecked", "rawtypes"})
        @Override
        public void initializeState(FunctionInitializationContext ctx) throws Exception {
            states = new LinkedHashMap<>();
            mirror = new LinkedHashMap<>();
            for (int i = 0; i < NAMES.length; i++) {
                ListState<Object> st = ctx.getOperatorStateStore()
                        .getListState(new ListStateDescriptor(NAMES[i], (TypeInformation) TYPES[i]));
                states.put(NAMES[i], st);
                List<Object> m = new ArrayList<>();
                for (Object o : st.get()) {
                    m.add(o);
                }
                mirror.put(NAMES[i], m);
            }
            unionMarks = ctx.getOperatorStateStore().getUnionListState(new ListStateDescriptor<>("union-marks", Types.LONG));
            unionMirror = new ArrayList<>();
            for (Long v : unionMarks.get()) {
                unionMirror.add(v);
            }
        }

        private void add(String state, Object value) throws Exception {
            states.get(state).add(value);
            mirror.get(state).add(value);
        }

        @Override
        public void processElement(Long v, Context ctx, Collector<Long> out) throws Exception {
            add("longs", v * 1_000_003L - 5);
            if (v == 0) {
                add("longs", Long.MIN_VALUE);
                add("longs", Long.MAX_VALUE);
            }
            add("ints", (int) (v * 37 - 500));
            if (v == 1) {
                add("ints", Integer.MIN_VALUE);
                add("ints", Integer.MAX_VALUE);
            }
            add("strings", stringFor(v));
            add("doubles", v * 1.5 - 7.25);
            if (v == 2) {
                add("doubles", -0.0);
                add("doubles", Double.MAX_VALUE);
                add("doubles", Double.MIN_VALUE);
                add("doubles", 1e-300);
            }
            add("bools", (v / 3) % 2 == 0);
            byte[] b = new byte[(int) (v % 5)];
            for (int i = 0; i < b.length; i++) {
                b[i] = (byte) (v * 31 + i * 100);
            }
            add("bytes", b);
            add("tuples", Tuple2.of(v % 4 == 3 ? "" : "t" + v + (v % 4 == 1 ? "-\u00fc" : ""), v * v - 100));
            if (v % 2 == 0) {
                unionMarks.add(1000 + v);
                unionMirror.add(1000 + v);
            }
            Oracle.count("lists");
            out.collect(v);
        }

        /** 7 shapes; 7 is coprime with the parallelism so every subtask sees every shape. */
        static String stringFor(long v) {
            switch ((int) (v % 7)) {
                case 0: return "p" + v + "-\u00e9\u00df\u4e2d";
                case 1: return "s" + v;
                case 2: return "emoji-" + v + "-\uD83D\uDE00";
                case 3: return "";
                case 4: return v == 4 ? "nul\u0000inside" : "tab\tquote\"backslash\\" + v;
                case 5: return "long-" + v + "-" + "x".repeat(200);
                default: return "\u0434\u0430-" + v + "-\u20ac";
            }
        }

        private Oracle.OpSnapshot snapshotMirror() {
            Oracle.OpSnapshot snap = new Oracle.OpSnapshot();
            for (Map.Entry<String, List<Object>> e : mirror.entrySet()) {
                snap.list(e.getKey(), "SPLIT_DISTRIBUTE", e.getValue());
            }
            snap.list("union-marks", "UNION", unionMirror);
            return snap;
        }

        @Override
        public void snapshotState(FunctionSnapshotContext ctx) throws Exception {
            Oracle.record("lists", subtask(getRuntimeContext()), ctx.getCheckpointId(), snapshotMirror());
        }

        @Override
        public void close() {
            Oracle.recordRestored("lists", subtask(getRuntimeContext()), snapshotMirror());
        }
    }

    // ------------------------------------------------------------------ single

    public static class Single extends ProcessFunction<Long, Long> implements CheckpointedFunction {
        private transient ListState<String> names;
        private transient List<String> mirror;

        @Override
        public void initializeState(FunctionInitializationContext ctx) throws Exception {
            names = ctx.getOperatorStateStore().getListState(new ListStateDescriptor<>("names", Types.STRING));
            mirror = new ArrayList<>();
            for (String s : names.get()) {
                mirror.add(s);
            }
        }

        @Override
        public void processElement(Long v, Context ctx, Collector<Long> out) throws Exception {
            if (v % 10 == 0) {
                String s = "name-" + v;
                names.add(s);
                mirror.add(s);
            }
            Oracle.count("single");
            out.collect(v);
        }

        @Override
        public void snapshotState(FunctionSnapshotContext ctx) throws Exception {
            Oracle.record("single", subtask(getRuntimeContext()), ctx.getCheckpointId(),
                    new Oracle.OpSnapshot().list("names", "SPLIT_DISTRIBUTE", mirror));
        }

        @Override
        public void close() {
            Oracle.recordRestored("single", subtask(getRuntimeContext()),
                    new Oracle.OpSnapshot().list("names", "SPLIT_DISTRIBUTE", mirror));
        }
    }

    // ------------------------------------------------------------------ bcast

    public static class Bcast extends BroadcastProcessFunction<Long, Long, Long> implements CheckpointedFunction {
        static final MapStateDescriptor<String, String> RULES = new MapStateDescriptor<>("rules", Types.STRING, Types.STRING);
        static final MapStateDescriptor<String, Long> LIMITS = new MapStateDescriptor<>("limits", Types.STRING, Types.LONG);

        private transient TreeMap<String, String> rulesMirror;
        private transient TreeMap<String, Long> limitsMirror;

        @Override
        public void processElement(Long v, ReadOnlyContext ctx, Collector<Long> out) throws Exception {
            Oracle.count("bcast-elements");
            out.collect(v);
        }

        @Override
        public void processBroadcastElement(Long v, Context ctx, Collector<Long> out) throws Exception {
            BroadcastState<String, String> rules = ctx.getBroadcastState(RULES);
            BroadcastState<String, Long> limits = ctx.getBroadcastState(LIMITS);
            String rk = "rule-" + (v % 7);
            String rv = v % 7 == 3 ? "" : (v % 7 == 5 ? "r\u00e8gle-" + v + "-\u4e2d\u6587-\uD83D\uDE80" : "r" + v);
            rules.put(rk, rv);
            rulesMirror.put(rk, rv);
            String lk = "limit-" + (v % 5);
            long lv = v % 5 == 4 ? -v : v * 1000;
            limits.put(lk, lv);
            limitsMirror.put(lk, lv);
            Oracle.count("bcast-broadcast");
        }

        @Override
        public void initializeState(FunctionInitializationContext ctx) throws Exception {
            // Broadcast state is created lazily via the contexts; on restore, copy it into the mirror.
            rulesMirror = new TreeMap<>();
            limitsMirror = new TreeMap<>();
            for (Map.Entry<String, String> e : ctx.getOperatorStateStore().getBroadcastState(RULES).entries()) {
                rulesMirror.put(e.getKey(), e.getValue());
            }
            for (Map.Entry<String, Long> e : ctx.getOperatorStateStore().getBroadcastState(LIMITS).entries()) {
                limitsMirror.put(e.getKey(), e.getValue());
            }
        }

        @Override
        public void snapshotState(FunctionSnapshotContext ctx) throws Exception {
            Oracle.record("bcast", subtask(getRuntimeContext()), ctx.getCheckpointId(),
                    new Oracle.OpSnapshot().broadcast("rules", rulesMirror).broadcast("limits", limitsMirror));
        }

        @Override
        public void close() {
            Oracle.recordRestored("bcast", subtask(getRuntimeContext()),
                    new Oracle.OpSnapshot().broadcast("rules", rulesMirror).broadcast("limits", limitsMirror));
        }
    }

    // ------------------------------------------------------------------ big

    /** ~2400 strings of 20 chars per subtask (~55 KB): written to its own state file. */
    public static class Big extends ProcessFunction<Long, Long> implements CheckpointedFunction {
        private transient ListState<String> blob;
        private transient List<String> mirror;

        @Override
        public void initializeState(FunctionInitializationContext ctx) throws Exception {
            blob = ctx.getOperatorStateStore().getListState(new ListStateDescriptor<>("blob", Types.STRING));
            mirror = new ArrayList<>();
            for (String s : blob.get()) {
                mirror.add(s);
            }
        }

        @Override
        public void processElement(Long v, Context ctx, Collector<Long> out) throws Exception {
            for (int i = 0; i < BIG_PER_RECORD; i++) {
                String s = String.format("blob-%05d-%09d", v, i * 7919L);
                blob.add(s);
                mirror.add(s);
            }
            Oracle.count("big");
            out.collect(v);
        }

        @Override
        public void snapshotState(FunctionSnapshotContext ctx) throws Exception {
            Oracle.record("big", subtask(getRuntimeContext()), ctx.getCheckpointId(),
                    new Oracle.OpSnapshot().list("blob", "SPLIT_DISTRIBUTE", mirror));
        }

        @Override
        public void close() {
            Oracle.recordRestored("big", subtask(getRuntimeContext()),
                    new Oracle.OpSnapshot().list("blob", "SPLIT_DISTRIBUTE", mirror));
        }
    }
}
