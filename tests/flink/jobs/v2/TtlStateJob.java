import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import org.apache.flink.api.common.state.ListState;
import org.apache.flink.api.common.state.ListStateDescriptor;
import org.apache.flink.api.common.state.MapState;
import org.apache.flink.api.common.state.MapStateDescriptor;
import org.apache.flink.api.common.state.StateTtlConfig;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.java.tuple.Tuple2;
import org.apache.flink.runtime.state.FunctionInitializationContext;
import org.apache.flink.runtime.state.FunctionSnapshotContext;
import org.apache.flink.streaming.api.checkpoint.CheckpointedFunction;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.KeyedProcessFunction;
import org.apache.flink.streaming.api.functions.sink.v2.DiscardingSink;
import org.apache.flink.streaming.api.functions.source.legacy.RichSourceFunction;
import org.apache.flink.util.Collector;

/**
 * TTL state oracle: a KeyedProcessFunction (uid ttl, parallelism 2) with a TTL ValueState&lt;Long&gt;
 * "last", a TTL MapState&lt;String, Long&gt; "counts" and a TTL ListState&lt;String&gt; "events", all
 * with StateTtlConfig.newBuilder(1 day) (OnCreateAndWrite, NeverReturnExpired): nothing expires
 * while the job runs. The source (uid src) emits i = 0..n-1 to key k-(i % 10), then idles; the
 * savepoint is taken once every record was processed. Record i sets last = i, counts[b-(i % 3)] += 1
 * and appends "e-i" to events; the dump lists the user values (what a restore must see).
 *
 * Args: --backend hashmap|rocksdb --snapshot savepoint|checkpoint --out DIR [--records N]
 */
public class TtlStateJob implements Oracle.JobDef {
    static final int MAX_PARALLELISM = 128;
    static final int P = 2;
    static final int KEYS = 10;
    static final Duration TTL = Duration.ofDays(1);

    public static void main(String[] args) {
        Oracle.run(new TtlStateJob(), args);
    }

    static int records(Driver.Params p) {
        return p.getInt("records", 100);
    }

    @Override
    public int maxParallelism() {
        return MAX_PARALLELISM;
    }

    @Override
    public LinkedHashMap<String, Integer> operators(Driver.Params p) {
        LinkedHashMap<String, Integer> m = new LinkedHashMap<>();
        m.put("src", 1);
        m.put("ttl", P);
        return m;
    }

    @Override
    public Map<String, Long> expectedCounts(Driver.Params p) {
        Map<String, Long> m = new LinkedHashMap<>();
        m.put("src", (long) records(p));
        m.put("ttl", (long) records(p));
        return m;
    }

    @Override
    public void build(StreamExecutionEnvironment env, Driver.Params p) {
        env.addSource(new Src(records(p)), Types.LONG).uid("src").name("src").setParallelism(1)
                .map(i -> Tuple2.of("k-" + (i % KEYS), i), Types.TUPLE(Types.STRING, Types.LONG)).uid("to-keyed")
                .keyBy(t -> t.f0, Types.STRING)
                .process(new TtlFn(), Types.STRING).uid("ttl").name("ttl").setParallelism(P)
                .sinkTo(new DiscardingSink<>()).uid("sink").name("sink").setParallelism(P);
    }

    public static class Src extends RichSourceFunction<Long> implements CheckpointedFunction {
        private final int n;
        private volatile boolean running = true;
        private long emitted;
        private transient ListState<Long> offsets;

        Src(int n) {
            this.n = n;
        }

        @Override
        public void run(SourceContext<Long> ctx) throws Exception {
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
        }

        @Override
        public void snapshotState(FunctionSnapshotContext ctx) throws Exception {
            offsets.update(Arrays.asList(emitted));
            Oracle.record("src", 0, ctx.getCheckpointId(),
                    new Oracle.OpSnapshot().list("offsets", "SPLIT_DISTRIBUTE", Arrays.asList(emitted)));
            Oracle.sourceSnapshot(ctx.getCheckpointId());
        }
    }

    public static class TtlFn extends KeyedProcessFunction<String, Tuple2<String, Long>, String>
            implements CheckpointedFunction {
        private transient ValueState<Long> last;
        private transient MapState<String, Long> counts;
        private transient ListState<String> events;
        /** key -> mirrors of what the states hold. */
        private final Map<String, Long> lastMirror = new HashMap<>();
        private final Map<String, Map<String, Long>> countsMirror = new HashMap<>();
        private final Map<String, List<String>> eventsMirror = new HashMap<>();

        @Override
        public void initializeState(FunctionInitializationContext ctx) throws Exception {
            StateTtlConfig ttl = StateTtlConfig.newBuilder(TTL).build();
            ValueStateDescriptor<Long> l = new ValueStateDescriptor<>("last", Types.LONG);
            l.enableTimeToLive(ttl);
            MapStateDescriptor<String, Long> c = new MapStateDescriptor<>("counts", Types.STRING, Types.LONG);
            c.enableTimeToLive(ttl);
            ListStateDescriptor<String> e = new ListStateDescriptor<>("events", Types.STRING);
            e.enableTimeToLive(ttl);
            last = ctx.getKeyedStateStore().getState(l);
            counts = ctx.getKeyedStateStore().getMapState(c);
            events = ctx.getKeyedStateStore().getListState(e);
        }

        @Override
        public void processElement(Tuple2<String, Long> t, Context ctx, Collector<String> out) throws Exception {
            String bucket = "b-" + (t.f1 % 3);
            last.update(t.f1);
            Long c = counts.get(bucket);
            counts.put(bucket, c == null ? 1L : c + 1);
            events.add("e-" + t.f1);
            lastMirror.put(t.f0, t.f1);
            countsMirror.computeIfAbsent(t.f0, k -> new HashMap<>()).merge(bucket, 1L, Long::sum);
            eventsMirror.computeIfAbsent(t.f0, k -> new ArrayList<>()).add("e-" + t.f1);
            Oracle.count("ttl");
        }

        @Override
        public void snapshotState(FunctionSnapshotContext ctx) {
            Oracle.OpSnapshot snap = new Oracle.OpSnapshot();
            snap.keyed("last", "VALUE", lastMirror);
            Map<Object, Object> cm = new HashMap<>();
            for (Map.Entry<String, Map<String, Long>> en : countsMirror.entrySet()) {
                List<Object> entries = new ArrayList<>();
                new java.util.TreeMap<>(en.getValue()).forEach((mk, mv) -> entries.add(Arrays.asList(mk, mv)));
                cm.put(en.getKey(), entries);
            }
            snap.keyed("counts", "MAP", cm);
            Map<Object, Object> em = new HashMap<>();
            for (Map.Entry<String, List<String>> en : eventsMirror.entrySet()) {
                em.put(en.getKey(), new ArrayList<>(en.getValue()));
            }
            snap.keyed("events", "LIST", em);
            Oracle.record("ttl", getRuntimeContext().getTaskInfo().getIndexOfThisSubtask(), ctx.getCheckpointId(), snap);
        }
    }
}
