import java.io.File;
import java.io.Serializable;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.flink.api.common.functions.AggregateFunction;
import org.apache.flink.api.common.functions.ReduceFunction;
import org.apache.flink.api.common.state.AggregatingState;
import org.apache.flink.api.common.state.AggregatingStateDescriptor;
import org.apache.flink.api.common.state.BroadcastState;
import org.apache.flink.api.common.state.ListState;
import org.apache.flink.api.common.state.ListStateDescriptor;
import org.apache.flink.api.common.state.MapState;
import org.apache.flink.api.common.state.MapStateDescriptor;
import org.apache.flink.api.common.state.OperatorStateStore;
import org.apache.flink.api.common.state.ReducingState;
import org.apache.flink.api.common.state.ReducingStateDescriptor;
import org.apache.flink.api.common.state.StateDescriptor;
import org.apache.flink.api.common.state.StateTtlConfig;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.java.functions.KeySelector;
import org.apache.flink.api.java.typeutils.MapTypeInfo;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.core.execution.JobClient;
import org.apache.flink.runtime.state.FunctionInitializationContext;
import org.apache.flink.runtime.state.FunctionSnapshotContext;
import org.apache.flink.runtime.state.KeyGroupRangeAssignment;
import org.apache.flink.runtime.util.EnvironmentInformation;
import org.apache.flink.streaming.api.TimeDomain;
import org.apache.flink.streaming.api.checkpoint.CheckpointedFunction;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.datastream.KeyedStream;
import org.apache.flink.streaming.api.datastream.SingleOutputStreamOperator;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.ProcessFunction;
import org.apache.flink.streaming.api.functions.co.KeyedBroadcastProcessFunction;
import org.apache.flink.streaming.api.functions.sink.v2.DiscardingSink;
import org.apache.flink.streaming.api.functions.source.legacy.RichSourceFunction;
import org.apache.flink.streaming.api.graph.StreamGraphHasherV2;
import org.apache.flink.util.Collector;

/**
 * Restore oracle: starts a job from a savepoint (typically one fstate wrote) and dumps exactly
 * what Flink restored, in the dump.json schema of the other oracle jobs.
 *
 * Args: --config FILE --out DIR [--backend hashmap|rocksdb] [--timeout SECONDS]
 *
 * The config (JSON) names the savepoint and describes every operator to restore:
 * <pre>
 * {"savepoint": "/abs/savepoint-dir", "max_parallelism": 128,
 *  "ignore_unclaimed_state": false,          (optional; default false: every operator must be listed)
 *  "processing_timer_wait_ms": 500,          (optional; grace for restored processing-time timers)
 *  "operators": [
 *    {"uid": "keyed", "kind": "keyed", "parallelism": 2, "key_type": "STRING", "timers": true,
 *     "max_parallelism": 128,                (optional per-operator override)
 *     "states": [{"name": "total", "kind": "VALUE", "type": "LONG"}, ...]},
 *                (a keyed state may add "ttl_ms": N: declared with StateTtlConfig.newBuilder(N ms); a key
 *                 whose value expired then reads as null, without a warning)
 *    {"uid": "src", "kind": "operator", "parallelism": 1,
 *     "states": [{"name": "offsets", "mode": "SPLIT_DISTRIBUTE", "type": "LONG"},
 *                {"name": "rules", "mode": "BROADCAST", "key_type": "STRING", "type": "STRING"}]}]}
 * </pre>
 * A state with "kind" (VALUE, LIST, MAP, REDUCING, AGGREGATING) is keyed state (keyed operators
 * only); a state with "mode" (SPLIT_DISTRIBUTE, UNION, BROADCAST) is operator state (allowed in
 * both operator kinds). Type strings: see {@link RestoreTypes}. LIST state: "type" is the element
 * type; MAP state: MAP&lt;K, V&gt;; VALUE/REDUCING/AGGREGATING: the value (accumulator) type.
 *
 * Job graph: an idle source (emits nothing) feeds every operator; keyed operators are
 * keyBy(idle).connect(trigger.broadcast()).process(KeyedDump) so that the single trigger element
 * makes each subtask enumerate its keyed state with applyToKeyedState. Operator state is read in
 * initializeState. Once every keyed subtask has dumped (plus a grace period for processing-time
 * timers due in the past, which fire right after restore), the idle source finishes; its final
 * watermark (Long.MAX_VALUE) fires every restored event-time timer, and the job finishes.
 *
 * A failed restore (unclaimed state, incompatible serializers, ...) makes the job fail; main
 * prints the stack trace plus "RESTORE CAUSE:" lines (the cause chain) to stderr and exits 1.
 */
public class RestoreJob {
    static final String IDLE_UID = "__fstate-restore-idle-source";
    static final String TRIGGER_UID = "__fstate-restore-trigger";

    // ------------------------------------------------------------------ config

    static final class StateConf implements Serializable {
        String name;
        /** keyed state kind (VALUE, LIST, MAP, REDUCING, AGGREGATING) or null. */
        String kind;
        /** operator state mode (SPLIT_DISTRIBUTE, UNION, BROADCAST) or null. */
        String mode;
        String type;
        String keyType;
        /** keyed state with TTL (default StateTtlConfig of this many ms), or null. */
        Long ttlMs;

        boolean keyed() {
            return kind != null;
        }
    }

    static final class OpConf implements Serializable {
        String uid;
        String kind;
        int parallelism;
        Integer maxParallelism;
        String keyType;
        boolean timers;
        List<StateConf> states = new ArrayList<>();
    }

    static final class Conf {
        String savepoint;
        int maxParallelism;
        boolean ignoreUnclaimed;
        long procTimerWaitMs;
        List<OpConf> operators = new ArrayList<>();
    }

    private static String str(Map<String, Object> m, String k, String def, String where) {
        Object v = m.get(k);
        if (v == null) {
            if (def == null) {
                throw new IllegalArgumentException(where + ": missing \"" + k + "\"");
            }
            return def;
        }
        if (!(v instanceof String)) {
            throw new IllegalArgumentException(where + ": \"" + k + "\" must be a string, got " + v);
        }
        return (String) v;
    }

    private static long num(Map<String, Object> m, String k, Long def, String where) {
        Object v = m.get(k);
        if (v == null) {
            if (def == null) {
                throw new IllegalArgumentException(where + ": missing \"" + k + "\"");
            }
            return def;
        }
        if (!(v instanceof Long)) {
            throw new IllegalArgumentException(where + ": \"" + k + "\" must be an integer, got " + v);
        }
        return (Long) v;
    }

    @SuppressWarnings("unchecked")
    static Conf parseConf(String text) {
        Object root = RestoreJsonReader.parse(text);
        if (!(root instanceof Map)) {
            throw new IllegalArgumentException("config must be a JSON object");
        }
        Map<String, Object> m = (Map<String, Object>) root;
        Conf c = new Conf();
        c.savepoint = str(m, "savepoint", null, "config");
        c.maxParallelism = (int) num(m, "max_parallelism", 128L, "config");
        c.ignoreUnclaimed = Boolean.TRUE.equals(m.get("ignore_unclaimed_state"));
        c.procTimerWaitMs = num(m, "processing_timer_wait_ms", 500L, "config");
        Object ops = m.get("operators");
        if (!(ops instanceof List) || ((List<Object>) ops).isEmpty()) {
            throw new IllegalArgumentException("config: \"operators\" must be a non-empty list");
        }
        java.util.Set<String> uids = new java.util.HashSet<>();
        for (Object o : (List<Object>) ops) {
            Map<String, Object> om = (Map<String, Object>) o;
            OpConf op = new OpConf();
            op.uid = str(om, "uid", null, "operator");
            String where = "operator " + op.uid;
            if (!uids.add(op.uid)) {
                throw new IllegalArgumentException(where + " listed twice");
            }
            op.kind = str(om, "kind", "operator", where).toLowerCase(Locale.ROOT);
            op.parallelism = (int) num(om, "parallelism", 1L, where);
            op.maxParallelism = om.containsKey("max_parallelism") ? (int) num(om, "max_parallelism", null, where) : null;
            op.timers = Boolean.TRUE.equals(om.get("timers"));
            if (op.kind.equals("keyed")) {
                op.keyType = str(om, "key_type", null, where);
                RestoreTypes.parse(op.keyType);
            } else if (!op.kind.equals("operator")) {
                throw new IllegalArgumentException(where + ": kind must be keyed or operator, not " + op.kind);
            } else if (op.timers) {
                throw new IllegalArgumentException(where + ": timers need a keyed operator");
            }
            Object states = om.getOrDefault("states", new ArrayList<>());
            for (Object so : (List<Object>) states) {
                Map<String, Object> sm = (Map<String, Object>) so;
                StateConf st = new StateConf();
                st.name = str(sm, "name", null, where + " state");
                String sw = where + " state " + st.name;
                st.type = str(sm, "type", null, sw);
                RestoreTypes.parse(st.type);
                if (sm.containsKey("kind") == sm.containsKey("mode")) {
                    throw new IllegalArgumentException(sw + ": give exactly one of \"kind\" (keyed state) or \"mode\" (operator state)");
                }
                if (sm.containsKey("kind")) {
                    st.kind = str(sm, "kind", null, sw).toUpperCase(Locale.ROOT);
                    if (!Arrays.asList("VALUE", "LIST", "MAP", "REDUCING", "AGGREGATING").contains(st.kind)) {
                        throw new IllegalArgumentException(sw + ": unknown keyed state kind " + st.kind);
                    }
                    if (!op.kind.equals("keyed")) {
                        throw new IllegalArgumentException(sw + ": keyed state needs an operator of kind keyed");
                    }
                    if (sm.containsKey("ttl_ms")) {
                        st.ttlMs = num(sm, "ttl_ms", null, sw);
                    }
                    if (st.kind.equals("MAP") && !(RestoreTypes.parse(st.type) instanceof MapTypeInfo)) {
                        throw new IllegalArgumentException(sw + ": MAP state type must be MAP<K, V>, not " + st.type);
                    }
                } else {
                    st.mode = str(sm, "mode", null, sw).toUpperCase(Locale.ROOT);
                    if (!Arrays.asList("SPLIT_DISTRIBUTE", "UNION", "BROADCAST").contains(st.mode)) {
                        throw new IllegalArgumentException(sw + ": unknown operator state mode " + st.mode);
                    }
                    if (st.mode.equals("BROADCAST")) {
                        st.keyType = str(sm, "key_type", null, sw);
                        RestoreTypes.parse(st.keyType);
                    }
                }
                op.states.add(st);
            }
            c.operators.add(op);
        }
        return c;
    }

    // ------------------------------------------------------------------ what the subtasks saw

    /** Everything one subtask restored. Written by its task thread, read by main after the job finished. */
    static final class Sub {
        volatile boolean restored;
        /** state name -> values (operator list state, SPLIT_DISTRIBUTE and UNION). */
        final Map<String, List<Object>> lists = new ConcurrentHashMap<>();
        /** state name -> sorted [k, v] entries. */
        final Map<String, List<Object>> broadcast = new ConcurrentHashMap<>();
        /** keyed state name -> [key, value] entries. */
        final Map<String, List<Object>> keyed = new ConcurrentHashMap<>();
        /** {kind, key, timestamp}. */
        final List<Object[]> timers = Collections.synchronizedList(new ArrayList<>());
        volatile boolean dumped;
    }

    static final Map<String, Sub> SUBS = new ConcurrentHashMap<>();
    static final AtomicInteger KEYED_DUMPS = new AtomicInteger();
    static final List<String> WARNINGS = Collections.synchronizedList(new ArrayList<>());
    /** Set by main: number of keyed subtasks that must dump before the idle source may finish. */
    static volatile int expectedKeyedDumps;
    static volatile long procTimerWaitMs;
    static volatile long sourceDeadline = Long.MAX_VALUE;

    static Sub sub(String uid, int subtask) {
        return SUBS.computeIfAbsent(uid + "|" + subtask, k -> new Sub());
    }

    // ------------------------------------------------------------------ state access

    @SuppressWarnings({"unchecked", "rawtypes"})
    static void readOperatorState(OpConf op, FunctionInitializationContext ctx, Sub sub) throws Exception {
        sub.restored = ctx.isRestored();
        OperatorStateStore store = ctx.getOperatorStateStore();
        for (StateConf st : op.states) {
            if (st.keyed()) {
                continue;
            }
            TypeInformation ti = RestoreTypes.parse(st.type);
            switch (st.mode) {
                case "SPLIT_DISTRIBUTE":
                case "UNION": {
                    ListStateDescriptor d = new ListStateDescriptor(st.name, ti);
                    ListState<Object> ls = st.mode.equals("UNION") ? store.getUnionListState(d) : store.getListState(d);
                    List<Object> values = new ArrayList<>();
                    for (Object v : ls.get()) {
                        values.add(RestoreTypes.enc(v));
                    }
                    sub.lists.put(st.name, values);
                    break;
                }
                case "BROADCAST": {
                    MapStateDescriptor d = new MapStateDescriptor(st.name, RestoreTypes.parse(st.keyType), ti);
                    BroadcastState<Object, Object> bs = store.getBroadcastState(d);
                    sub.broadcast.put(st.name, RestoreTypes.entries(bs.entries()));
                    break;
                }
                default:
                    throw new IllegalStateException(st.mode);
            }
        }
    }

    /** Keeps the newer value; only needed to build a ReducingStateDescriptor (the dump never adds). */
    public static final class KeepLatest implements ReduceFunction<Object> {
        @Override
        public Object reduce(Object a, Object b) {
            return b;
        }
    }

    /** Accumulator in, accumulator out: get() of the AggregatingState returns the stored accumulator. */
    public static final class AccumulatorAsResult implements AggregateFunction<Object, Object, Object> {
        @Override
        public Object createAccumulator() {
            return null;
        }

        @Override
        public Object add(Object value, Object acc) {
            return value;
        }

        @Override
        public Object getResult(Object acc) {
            return acc;
        }

        @Override
        public Object merge(Object a, Object b) {
            return b;
        }
    }

    static StateDescriptor<?, ?> keyedDescriptor(StateConf st) {
        StateDescriptor<?, ?> d = plainKeyedDescriptor(st);
        if (st.ttlMs != null) {
            d.enableTimeToLive(StateTtlConfig.newBuilder(java.time.Duration.ofMillis(st.ttlMs)).build());
        }
        return d;
    }

    @SuppressWarnings({"unchecked", "rawtypes"})
    static StateDescriptor<?, ?> plainKeyedDescriptor(StateConf st) {
        TypeInformation ti = RestoreTypes.parse(st.type);
        switch (st.kind) {
            case "VALUE":
                return new ValueStateDescriptor(st.name, ti);
            case "LIST":
                return new ListStateDescriptor(st.name, ti);
            case "MAP": {
                MapTypeInfo mti = (MapTypeInfo) ti;
                return new MapStateDescriptor(st.name, mti.getKeyTypeInfo(), mti.getValueTypeInfo());
            }
            case "REDUCING":
                return new ReducingStateDescriptor(st.name, new KeepLatest(), ti);
            case "AGGREGATING":
                return new AggregatingStateDescriptor(st.name, new AccumulatorAsResult(), ti);
            default:
                throw new IllegalStateException(st.kind);
        }
    }

    /** The encoded value of the current key's state, or null when it has none. */
    @SuppressWarnings({"unchecked", "rawtypes"})
    static Object readKeyed(String kind, Object state) throws Exception {
        switch (kind) {
            case "VALUE":
                return RestoreTypes.enc(((ValueState) state).value());
            case "LIST": {
                Iterable<Object> it = (Iterable<Object>) ((ListState) state).get();
                if (it == null) {
                    return null;
                }
                List<Object> l = new ArrayList<>();
                for (Object o : it) {
                    l.add(RestoreTypes.enc(o));
                }
                return l;
            }
            case "MAP": {
                Iterable<Map.Entry<Object, Object>> it = ((MapState) state).entries();
                if (it == null) {
                    return null;
                }
                List<Object> l = RestoreTypes.entries(it);
                return l;
            }
            case "REDUCING":
                return RestoreTypes.enc(((ReducingState) state).get());
            case "AGGREGATING":
                return RestoreTypes.enc(((AggregatingState) state).get());
            default:
                throw new IllegalStateException(kind);
        }
    }

    // ------------------------------------------------------------------ functions

    /** Emits nothing; finishes once every keyed subtask dumped (plus a grace period). */
    public static class IdleSource extends RichSourceFunction<Long> {
        private volatile boolean running = true;

        @Override
        public void run(SourceContext<Long> ctx) throws Exception {
            while (running && KEYED_DUMPS.get() < expectedKeyedDumps && System.currentTimeMillis() < sourceDeadline) {
                Thread.sleep(10);
            }
            long until = System.currentTimeMillis() + procTimerWaitMs;
            while (running && System.currentTimeMillis() < until) {
                Thread.sleep(10);
            }
            // Returning emits the final watermark (Long.MAX_VALUE): every event-time timer fires.
        }

        @Override
        public void cancel() {
            running = false;
        }
    }

    /** One element, broadcast to every keyed subtask: "dump your keyed state now". */
    public static class TriggerSource extends RichSourceFunction<Long> {
        @Override
        public void run(SourceContext<Long> ctx) {
            synchronized (ctx.getCheckpointLock()) {
                ctx.collect(0L);
            }
        }

        @Override
        public void cancel() {}
    }

    /** Never called: the idle source emits nothing. */
    public static class NoKey implements KeySelector<Long, Object> {
        @Override
        public Object getKey(Long value) {
            throw new IllegalStateException("the idle source emitted an element");
        }
    }

    public static class OperatorDump extends ProcessFunction<Long, Long> implements CheckpointedFunction {
        private final OpConf op;

        OperatorDump(OpConf op) {
            this.op = op;
        }

        @Override
        public void initializeState(FunctionInitializationContext ctx) throws Exception {
            readOperatorState(op, ctx, sub(op.uid, getRuntimeContext().getTaskInfo().getIndexOfThisSubtask()));
        }

        @Override
        public void snapshotState(FunctionSnapshotContext ctx) {}

        @Override
        public void processElement(Long v, Context ctx, Collector<Long> out) {}
    }

    public static class KeyedDump extends KeyedBroadcastProcessFunction<Object, Long, Long, Long>
            implements CheckpointedFunction {
        private final OpConf op;
        private transient Sub sub;

        KeyedDump(OpConf op) {
            this.op = op;
        }

        @Override
        public void initializeState(FunctionInitializationContext ctx) throws Exception {
            sub = sub(op.uid, getRuntimeContext().getTaskInfo().getIndexOfThisSubtask());
            readOperatorState(op, ctx, sub);
        }

        @Override
        public void snapshotState(FunctionSnapshotContext ctx) {}

        @Override
        public void processElement(Long v, ReadOnlyContext ctx, Collector<Long> out) {}

        @Override
        public void processBroadcastElement(Long v, Context ctx, Collector<Long> out) throws Exception {
            if (sub.dumped) {
                return;
            }
            int subtask = getRuntimeContext().getTaskInfo().getIndexOfThisSubtask();
            int parallelism = getRuntimeContext().getTaskInfo().getNumberOfParallelSubtasks();
            int maxP = getRuntimeContext().getTaskInfo().getMaxNumberOfParallelSubtasks();
            for (StateConf st : op.states) {
                if (!st.keyed()) {
                    continue;
                }
                List<Object> entries = new ArrayList<>();
                int[] misplaced = {0};
                int[] empty = {0};
                ctx.applyToKeyedState(keyedDescriptor(st), (key, state) -> {
                    Object value = readKeyed(st.kind, state);
                    if (value == null) {
                        empty[0]++;
                    }
                    if (KeyGroupRangeAssignment.assignKeyToParallelOperator(key, maxP, parallelism) != subtask) {
                        misplaced[0]++;
                    }
                    entries.add(RestoreTypes.pair(RestoreTypes.enc(key), value));
                });
                if (misplaced[0] > 0) {
                    WARNINGS.add(op.uid + "/" + st.name + " subtask " + subtask + ": " + misplaced[0]
                            + " keys do not hash to this subtask (key group written wrongly?)");
                }
                if (empty[0] > 0 && st.ttlMs == null) {
                    WARNINGS.add(op.uid + "/" + st.name + " subtask " + subtask + ": " + empty[0]
                            + " keys are listed but reading their state gives null (stored under a different key group?)");
                }
                sub.keyed.put(st.name, entries);
            }
            sub.dumped = true;
            KEYED_DUMPS.incrementAndGet();
        }

        @Override
        public void onTimer(long timestamp, OnTimerContext ctx, Collector<Long> out) {
            if (op.timers) {
                String kind = ctx.timeDomain() == TimeDomain.EVENT_TIME ? "event" : "processing";
                sub.timers.add(new Object[] {kind, RestoreTypes.enc(ctx.getCurrentKey()), timestamp});
            }
        }
    }

    // ------------------------------------------------------------------ driver

    public static void main(String[] args) {
        Driver.main(args, "RESTORE", () -> "; keyed dumps " + KEYED_DUMPS.get() + "/" + expectedKeyedDumps,
                RestoreJob::execute, RestoreJob::printCauses);
    }

    /** After the stack trace, the cause chain, so that the tail of stderr shows Flink's reason. */
    private static void printCauses(Throwable t) {
        java.util.Set<Throwable> seen = new java.util.HashSet<>();
        for (Throwable c = t; c != null && seen.add(c); c = c.getCause()) {
            System.err.println("RESTORE CAUSE: " + c.getClass().getName() + ": " + c.getMessage());
        }
    }

    static Configuration flinkConfig(Conf c, String backend) {
        Map<String, String> m = new HashMap<>();
        m.put("state.backend.type", backend);
        m.put("execution.state-recovery.path", c.savepoint);
        m.put("execution.state-recovery.ignore-unclaimed-state", String.valueOf(c.ignoreUnclaimed));
        m.put("restart-strategy.type", "none");
        m.put("rest.bind-port", "0");
        m.put("rest.port", "0");
        return Configuration.fromMap(m);
    }

    @SuppressWarnings({"unchecked", "rawtypes"})
    static void build(StreamExecutionEnvironment env, Conf c) {
        DataStream<Long> idle = env.addSource(new IdleSource(), Types.LONG).uid(IDLE_UID).name(IDLE_UID).setParallelism(1);
        DataStream<Long> trigger = env.addSource(new TriggerSource(), Types.LONG).uid(TRIGGER_UID).name(TRIGGER_UID)
                .setParallelism(1);
        for (OpConf op : c.operators) {
            SingleOutputStreamOperator<Long> s;
            if (op.kind.equals("keyed")) {
                KeyedStream<Long, Object> keyed = idle.keyBy((KeySelector) new NoKey(),
                        (TypeInformation) RestoreTypes.parse(op.keyType));
                s = keyed.connect(trigger.broadcast(new MapStateDescriptor<?, ?>[0])).process(new KeyedDump(op), Types.LONG);
            } else {
                s = idle.process(new OperatorDump(op), Types.LONG);
            }
            s.uid(op.uid).name(op.uid).setParallelism(op.parallelism);
            if (op.maxParallelism != null) {
                s.setMaxParallelism(op.maxParallelism);
            }
            s.sinkTo(new DiscardingSink<>()).uid("__fstate-restore-sink-" + op.uid).name("sink-" + op.uid)
                    .setParallelism(op.parallelism);
        }
    }

    private static void execute(Driver.Params p, int timeoutS) throws Exception {
        long t0 = System.currentTimeMillis();
        String configPath = p.get("config", null);
        if (configPath == null || !p.raw.containsKey("out")) {
            throw new IllegalArgumentException("usage: RestoreJob --config FILE --out DIR [--backend hashmap|rocksdb]");
        }
        p.out().mkdirs();
        String backend = p.backend();
        Conf c = parseConf(new String(Files.readAllBytes(new File(configPath).toPath()), StandardCharsets.UTF_8));

        int keyedSubtasks = 0;
        boolean anyTimers = false;
        for (OpConf op : c.operators) {
            if (op.kind.equals("keyed")) {
                keyedSubtasks += op.parallelism;
                anyTimers |= op.timers;
            }
        }
        expectedKeyedDumps = keyedSubtasks;
        procTimerWaitMs = anyTimers ? c.procTimerWaitMs : 0;
        long deadline = Driver.deadline(t0, timeoutS);
        sourceDeadline = deadline;

        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment(flinkConfig(c, backend));
        env.setMaxParallelism(c.maxParallelism);
        env.setParallelism(1);
        build(env, c);
        JobClient client = env.executeAsync("fstate-restore");
        Driver.awaitFinished(client, deadline, () -> "keyed dumps " + KEYED_DUMPS.get() + "/" + expectedKeyedDumps);
        long tDone = System.currentTimeMillis();

        Map<String, Object> dump = new LinkedHashMap<>();
        dump.put("flink_version", EnvironmentInformation.getVersion());
        dump.put("job", "RestoreJob");
        dump.put("kind", "restore");
        dump.put("backend", backend);
        dump.put("snapshot_path", new File(Driver.localPath(c.savepoint)).getAbsolutePath());
        dump.put("job_id", client.getJobID().toString());
        List<Object> ops = new ArrayList<>();
        boolean allRestored = true;
        for (OpConf op : c.operators) {
            Map<String, Object> o = operatorDump(op, c);
            allRestored &= (Boolean) o.get("restored");
            ops.add(o);
        }
        dump.put("restored", allRestored);
        dump.put("operators", ops);
        dump.put("warnings", new ArrayList<>(WARNINGS));
        Map<String, Object> timing = new LinkedHashMap<>();
        timing.put("job_ms", tDone - t0);
        dump.put("timing", timing);
        Driver.writeDump(p, dump);
        System.out.println("RESTORE OK operators=" + c.operators.size() + " warnings=" + WARNINGS.size());
    }

    private static Map<String, Object> operatorDump(OpConf op, Conf c) {
        List<Sub> subs = new ArrayList<>();
        for (int s = 0; s < op.parallelism; s++) {
            Sub sub = SUBS.get(op.uid + "|" + s);
            if (sub == null) {
                throw new IllegalStateException("operator " + op.uid + " subtask " + s + " recorded nothing");
            }
            if (op.kind.equals("keyed") && !sub.dumped) {
                throw new IllegalStateException("keyed operator " + op.uid + " subtask " + s + " never dumped its state");
            }
            subs.add(sub);
        }
        Map<String, Object> o = new LinkedHashMap<>();
        o.put("uid", op.uid);
        o.put("operator_id", Driver.hex(StreamGraphHasherV2.generateUserSpecifiedHash(op.uid)));
        o.put("kind", op.kind);
        o.put("parallelism", op.parallelism);
        o.put("max_parallelism", op.maxParallelism != null ? op.maxParallelism : c.maxParallelism);
        boolean restored = true;
        for (Sub s : subs) {
            restored &= s.restored;
        }
        o.put("restored", restored);

        List<Object> lists = new ArrayList<>();
        List<Object> bc = new ArrayList<>();
        List<Object> keyed = new ArrayList<>();
        for (StateConf st : op.states) {
            if (st.keyed()) {
                List<Object> merged = new ArrayList<>();
                for (Sub s : subs) {
                    merged.addAll(s.keyed.get(st.name));
                }
                merged.sort(RestoreTypes.BY_FIRST);
                for (int i = 1; i < merged.size(); i++) {
                    Object a = ((List<?>) merged.get(i - 1)).get(0);
                    Object b = ((List<?>) merged.get(i)).get(0);
                    if (RestoreTypes.ORDER.compare(a, b) == 0) {
                        WARNINGS.add(op.uid + "/" + st.name + ": key " + Json.write(a).trim() + " restored more than once");
                    }
                }
                Map<String, Object> m = new LinkedHashMap<>();
                m.put("state", st.name);
                m.put("kind", st.kind);
                m.put("entries", merged);
                keyed.add(m);
            } else if (st.mode.equals("BROADCAST")) {
                List<Object> first = subs.get(0).broadcast.get(st.name);
                for (int s = 1; s < subs.size(); s++) {
                    if (!Json.write(first).equals(Json.write(subs.get(s).broadcast.get(st.name)))) {
                        WARNINGS.add(op.uid + "/" + st.name + ": broadcast state of subtask " + s + " differs from subtask 0");
                    }
                }
                Map<String, Object> m = new LinkedHashMap<>();
                m.put("state", st.name);
                m.put("entries", first);
                bc.add(m);
            } else {
                for (int s = 0; s < subs.size(); s++) {
                    Map<String, Object> m = new LinkedHashMap<>();
                    m.put("state", st.name);
                    m.put("mode", st.mode);
                    m.put("subtask", s);
                    m.put("values", subs.get(s).lists.get(st.name));
                    lists.add(m);
                }
            }
        }
        o.put("list_state", lists);
        o.put("broadcast_state", bc);
        o.put("keyed_state", keyed);

        List<List<Object>> timers = new ArrayList<>();
        for (Sub s : subs) {
            synchronized (s.timers) {
                for (Object[] t : s.timers) {
                    timers.add(Arrays.asList(t));
                }
            }
        }
        timers.sort(RestoreTypes.ORDER::compare);
        List<Object> tl = new ArrayList<>();
        for (List<Object> t : timers) {
            Map<String, Object> m = new LinkedHashMap<>();
            m.put("kind", t.get(0));
            m.put("key", t.get(1));
            m.put("timestamp", t.get(2));
            m.put("namespace", null);
            tl.add(m);
        }
        o.put("timers", tl);
        return o;
    }
}
