import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;

import org.apache.flink.api.common.functions.AggregateFunction;
import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.functions.ReduceFunction;
import org.apache.flink.api.common.state.AggregatingState;
import org.apache.flink.api.common.state.AggregatingStateDescriptor;
import org.apache.flink.api.common.state.CheckpointListener;
import org.apache.flink.api.common.state.ListState;
import org.apache.flink.api.common.state.ListStateDescriptor;
import org.apache.flink.api.common.state.MapState;
import org.apache.flink.api.common.state.MapStateDescriptor;
import org.apache.flink.api.common.state.ReducingState;
import org.apache.flink.api.common.state.ReducingStateDescriptor;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.java.tuple.Tuple2;
import org.apache.flink.runtime.state.FunctionInitializationContext;
import org.apache.flink.runtime.state.FunctionSnapshotContext;
import org.apache.flink.runtime.state.KeyGroupRangeAssignment;
import org.apache.flink.streaming.api.checkpoint.CheckpointedFunction;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.KeyedProcessFunction;
import org.apache.flink.streaming.api.functions.sink.v2.DiscardingSink;
import org.apache.flink.streaming.api.functions.source.legacy.RichSourceFunction;
import org.apache.flink.streaming.api.functions.windowing.ProcessWindowFunction;
import org.apache.flink.streaming.api.watermark.Watermark;
import org.apache.flink.streaming.api.windowing.assigners.TumblingEventTimeWindows;
import org.apache.flink.streaming.api.windowing.triggers.Trigger;
import org.apache.flink.streaming.api.windowing.triggers.TriggerResult;
import org.apache.flink.streaming.api.windowing.windows.TimeWindow;
import org.apache.flink.util.Collector;

/**
 * Keyed state oracle: a KeyedProcessFunction (uid keyed) with value/list/map/reducing/
 * aggregating state and event- and processing-time timers, and two tumbling event-time window
 * operators (uids window-reduce, window-agg) whose later windows are still open at snapshot time.
 *
 * The source emits records i = 0..n-1 with timestamp ts(i) = (i * 37) % 10000, then the
 * watermark 4999 (windows ending at or before 5000 fire and are purged), then idles.
 *
 * Verify mode (--restore SNAPSHOT_DIR): the source emits one probe record per key k-0..k-999
 * (value -1-idx) and finishes. The keyed function reads every state of a probed key without
 * changing it; the final watermark fires all event-time timers and all windows, which reveals
 * the restored timers and window contents.
 *
 * Args: --backend hashmap|rocksdb --snapshot savepoint|checkpoint --out DIR [--records N]
 *       [--keys K] [--pause-at M] [--restore SNAPSHOT_DIR]
 *
 * --keys K: records go to keys k-0..k-(K-1) (i % K; default 1000). --pause-at M (checkpoint mode):
 * the source emits M records with no barrier among them, waits until a checkpoint taken after them
 * completes, then emits the rest, again with no barrier among them. The kept checkpoint follows one
 * that holds exactly the first M records, and (RocksDB incremental) shares exactly that checkpoint's
 * SST files plus one newer generation, independent of timing.
 */
public class KeyedStateJob implements Oracle.JobDef {
    static final int MAX_PARALLELISM = 128;
    static final int P = 3;
    static final int KEYS = 1000;
    static final long WINDOW_KEYS = 50;
    static final long WINDOW_SIZE = 1000;
    static final long WATERMARK = 4999;
    static final long EVENT_TIMER_BASE = 1_000_000L;
    static final long DELETED_TIMER_BASE = 2_000_000L;
    static final long PROC_TIMER_BASE = 4_102_444_800_000L; // 2100-01-01

    /** uid -> [key, window start, window end] -> window contents, maintained by MirrorTrigger. */
    static final Map<String, Map<List<Object>, Object>> WINDOWS = new ConcurrentHashMap<>();

    public static void main(String[] args) {
        Oracle.run(new KeyedStateJob(), args);
    }

    static int records(Driver.Params p) {
        return p.getInt("records", 2000);
    }

    static int keys(Driver.Params p) {
        return p.getInt("keys", KEYS);
    }

    static long ts(long i) {
        return (i * 37) % 10000;
    }

    @Override
    public int maxParallelism() {
        return MAX_PARALLELISM;
    }

    @Override
    public LinkedHashMap<String, Integer> operators(Driver.Params p) {
        LinkedHashMap<String, Integer> m = new LinkedHashMap<>();
        m.put("src", 1);
        m.put("keyed", P);
        m.put("window-reduce", P);
        m.put("window-agg", P);
        return m;
    }

    @Override
    public Map<String, Long> expectedCounts(Driver.Params p) {
        if (Oracle.restoring()) {
            return new LinkedHashMap<>();
        }
        long n = records(p);
        Set<List<Long>> fired = new HashSet<>();
        for (long i = 0; i < n; i++) {
            long start = ts(i) - ts(i) % WINDOW_SIZE;
            if (start + WINDOW_SIZE - 1 <= WATERMARK) {
                fired.add(Arrays.asList(i % WINDOW_KEYS, start));
            }
        }
        Map<String, Long> m = new LinkedHashMap<>();
        m.put("src", n);
        m.put("keyed", n);
        m.put("window-reduce-elements", n);
        m.put("window-agg-elements", n);
        m.put("window-reduce-fired", (long) fired.size());
        m.put("window-agg-fired", (long) fired.size());
        return m;
    }

    @Override
    public void build(StreamExecutionEnvironment env, Driver.Params p) {
        final int keys = keys(p);
        int pauseAt = p.getInt("pause-at", -1);
        if (pauseAt >= 0 && !p.snapshot().equals("checkpoint")) {
            throw new IllegalArgumentException("--pause-at needs --snapshot checkpoint");
        }
        DataStream<Long> src = env.addSource(new TimedSource(records(p), keys, pauseAt)).uid("src").name("src")
                .setParallelism(1);

        // Probe records (verify mode) are negative: -1-idx probes key k-idx.
        src.map(i -> Tuple2.of("k-" + (i < 0 ? -1 - i : i % keys), i)).returns(Types.TUPLE(Types.STRING, Types.LONG))
                .uid("to-keyed").name("to-keyed").setParallelism(1)
                .keyBy(t -> t.f0, Types.STRING)
                .process(new KeyedFn(keys)).uid("keyed").name("keyed").setParallelism(P)
                .sinkTo(new DiscardingSink<>()).uid("sink-keyed").name("sink-keyed").setParallelism(P);

        DataStream<Tuple2<Long, Long>> w = src
                .flatMap((Long i, Collector<Tuple2<Long, Long>> out) -> {
                    if (i >= 0) {
                        out.collect(Tuple2.of(i % WINDOW_KEYS, i));
                    }
                })
                .returns(Types.TUPLE(Types.LONG, Types.LONG)).uid("to-window").name("to-window").setParallelism(1);

        w.keyBy(t -> t.f0, Types.LONG)
                .window(TumblingEventTimeWindows.of(Duration.ofMillis(WINDOW_SIZE)))
                .trigger(new MirrorTrigger("window-reduce", false))
                .reduce(new SumReduce(), new Fired<Tuple2<Long, Long>>("window-reduce"))
                .uid("window-reduce").name("window-reduce").setParallelism(P)
                .sinkTo(new DiscardingSink<>()).uid("sink-window-reduce").name("sink-window-reduce").setParallelism(P);

        w.keyBy(t -> t.f0, Types.LONG)
                .window(TumblingEventTimeWindows.of(Duration.ofMillis(WINDOW_SIZE)))
                .trigger(new MirrorTrigger("window-agg", true))
                .aggregate(new WindowAvg(), new Fired<Tuple2<Long, Long>>("window-agg"))
                .uid("window-agg").name("window-agg").setParallelism(P)
                .sinkTo(new DiscardingSink<>()).uid("sink-window-agg").name("sink-window-agg").setParallelism(P);
    }

    // ------------------------------------------------------------------ src

    public static class TimedSource extends RichSourceFunction<Long> implements CheckpointedFunction, CheckpointListener {
        private final int n;
        private final int keys;
        private final int pauseAt;
        private volatile boolean running = true;
        private long emitted;
        private transient ListState<Long> offsets;
        private transient List<Long> restored;

        TimedSource(int n, int keys, int pauseAt) {
            this.n = n;
            this.keys = keys;
            this.pauseAt = pauseAt;
        }

        @Override
        public void run(SourceContext<Long> ctx) throws Exception {
            if (Oracle.restoring()) {
                for (long idx = 0; idx < keys; idx++) {
                    synchronized (ctx.getCheckpointLock()) {
                        ctx.collectWithTimestamp(-1 - idx, 0);
                    }
                }
                return; // finishing emits the final watermark: every event-time timer fires
            }
            if (pauseAt >= 0) {
                // Deterministic shape for incremental checkpoints: each half is emitted while the
                // source holds the checkpoint lock, so no barrier can fall inside a half. Every
                // checkpoint therefore holds none, the first or both halves, and each half reaches
                // RocksDB in a single flush per column family: the checkpoint of the pause owns one
                // SST generation, the kept one adds exactly one more (two level-0 files never
                // trigger a compaction), whatever the machine's speed or the number of checkpoints.
                emitAtomically(ctx, Math.min(pauseAt, n));
                // A checkpoint completed after the first half holds exactly the first half. The
                // coordinator notified every task of its completion before it triggered the next
                // checkpoint (one sender, ordered messages; a task runs that mail before the next
                // barrier), so every RocksDB backend reuses the first half's uploaded SSTs.
                long mark = Oracle.SOURCE_SNAPSHOT_MAX.get();
                while (running && Oracle.COMPLETED.higher(mark) == null) {
                    Thread.sleep(20);
                }
                emitAtomically(ctx, n);
            }
            while (running && emitted < n) {
                synchronized (ctx.getCheckpointLock()) {
                    ctx.collectWithTimestamp(emitted, ts(emitted));
                    emitted++;
                    Oracle.count("src");
                }
            }
            if (pauseAt < 0) {
                synchronized (ctx.getCheckpointLock()) {
                    ctx.emitWatermark(new Watermark(WATERMARK));
                }
            }
            while (running) {
                Thread.sleep(20);
            }
        }

        /** Emits records up to (excluding) {@code end} with no checkpoint barrier in between. */
        private void emitAtomically(SourceContext<Long> ctx, long end) {
            synchronized (ctx.getCheckpointLock()) {
                while (running && emitted < end) {
                    ctx.collectWithTimestamp(emitted, ts(emitted));
                    emitted++;
                    Oracle.count("src");
                }
                if (emitted == n) {
                    // with the last record, so no checkpoint holds the records without the watermark
                    ctx.emitWatermark(new Watermark(WATERMARK));
                }
            }
        }

        @Override
        public void cancel() {
            running = false;
        }

        @Override
        public void initializeState(FunctionInitializationContext ctx) throws Exception {
            offsets = ctx.getOperatorStateStore().getListState(new ListStateDescriptor<>("offsets", Types.LONG));
            restored = new ArrayList<>();
            for (Long v : offsets.get()) {
                emitted = v;
                restored.add(v);
            }
        }

        @Override
        public void snapshotState(FunctionSnapshotContext ctx) throws Exception {
            offsets.update(Arrays.asList(emitted));
            Oracle.record("src", getRuntimeContext().getTaskInfo().getIndexOfThisSubtask(), ctx.getCheckpointId(),
                    new Oracle.OpSnapshot().list("offsets", "SPLIT_DISTRIBUTE", Arrays.asList(emitted)));
            Oracle.sourceSnapshot(ctx.getCheckpointId());
        }

        @Override
        public void close() {
            Oracle.recordRestored("src", getRuntimeContext().getTaskInfo().getIndexOfThisSubtask(),
                    new Oracle.OpSnapshot().list("offsets", "SPLIT_DISTRIBUTE", restored));
        }

        @Override
        public void notifyCheckpointComplete(long checkpointId) {
            Oracle.COMPLETED.add(checkpointId);
        }
    }

    // ------------------------------------------------------------------ keyed

    /** Average as accumulator (sum, count); the result is a copy of the accumulator, so probes can see it. */
    public static class AvgAgg implements AggregateFunction<Long, Tuple2<Long, Long>, Tuple2<Long, Long>> {
        @Override
        public Tuple2<Long, Long> createAccumulator() {
            return Tuple2.of(0L, 0L);
        }

        @Override
        public Tuple2<Long, Long> add(Long v, Tuple2<Long, Long> acc) {
            return Tuple2.of(acc.f0 + v, acc.f1 + 1);
        }

        @Override
        public Tuple2<Long, Long> getResult(Tuple2<Long, Long> acc) {
            return Tuple2.of(acc.f0, acc.f1);
        }

        @Override
        public Tuple2<Long, Long> merge(Tuple2<Long, Long> a, Tuple2<Long, Long> b) {
            return Tuple2.of(a.f0 + b.f0, a.f1 + b.f1);
        }
    }

    public static class KeyedFn extends KeyedProcessFunction<String, Tuple2<String, Long>, String>
            implements CheckpointedFunction {
        private final int keys;
        private transient ValueState<Long> total;
        private transient ListState<String> events;
        private transient MapState<String, Long> counts;
        private transient ReducingState<Long> sum;
        private transient AggregatingState<Long, Tuple2<Long, Long>> avg;

        private transient Map<String, Long> mTotal;
        private transient Map<String, List<String>> mEvents;
        private transient Map<String, TreeMap<String, Long>> mCounts;
        private transient Map<String, Long> mSum;
        private transient Map<String, Tuple2<Long, Long>> mAvg;
        /** {kind, key, timestamp}. */
        private transient Set<List<Object>> mTimers;

        KeyedFn(int keys) {
            this.keys = keys;
        }

        @Override
        public void initializeState(FunctionInitializationContext ctx) {
            // Keyed state cannot be enumerated here, so mirrors only describe state written by this run.
            mTotal = new HashMap<>();
            mEvents = new HashMap<>();
            mCounts = new HashMap<>();
            mSum = new HashMap<>();
            mAvg = new HashMap<>();
            mTimers = new HashSet<>();
        }

        @Override
        public void open(OpenContext openContext) {
            total = getRuntimeContext().getState(new ValueStateDescriptor<>("total", Types.LONG));
            events = getRuntimeContext().getListState(new ListStateDescriptor<>("events", Types.STRING));
            counts = getRuntimeContext().getMapState(new MapStateDescriptor<>("counts", Types.STRING, Types.LONG));
            sum = getRuntimeContext().getReducingState(
                    new ReducingStateDescriptor<>("sum", (ReduceFunction<Long>) (a, b) -> a + b, Types.LONG));
            avg = getRuntimeContext().getAggregatingState(
                    new AggregatingStateDescriptor<>("avg", new AvgAgg(), Types.TUPLE(Types.LONG, Types.LONG)));
        }

        @Override
        public void processElement(Tuple2<String, Long> t, Context ctx, Collector<String> out) throws Exception {
            String k = t.f0;
            long v = t.f1;
            if (v < 0) {
                probe(k);
                return;
            }
            int idx = (int) (v % keys);
            boolean second = v >= keys;

            // VALUE: running total; cleared again for idx % 100 == 99 on the second record.
            Long old = total.value();
            long nt = (old == null ? 0 : old) + v;
            total.update(nt);
            mTotal.put(k, nt);
            if (idx % 100 == 99 && second) {
                total.clear();
                mTotal.remove(k);
            }

            // LIST: not for idx % 4 == 3.
            if (idx % 4 != 3) {
                String ev = v % 5 == 0 ? "\u00e9-" + v + "-\u4e2d" : (v % 11 == 0 ? "" : "e" + v);
                events.add(ev);
                mEvents.computeIfAbsent(k, x -> new ArrayList<>()).add(ev);
            }

            // MAP: per-bucket counters, plus an extra non-ASCII entry now and then.
            String bucket = "b" + (v % 4);
            Long c = counts.get(bucket);
            counts.put(bucket, (c == null ? 0 : c) + 1);
            TreeMap<String, Long> mc = mCounts.computeIfAbsent(k, x -> new TreeMap<>());
            mc.put(bucket, (c == null ? 0 : c) + 1);
            if (v % 7 == 0) {
                counts.put("\u00fc-" + v, -v);
                mc.put("\u00fc-" + v, -v);
            }

            // REDUCING (sum): not for idx % 3 == 1.
            if (idx % 3 != 1) {
                sum.add(v);
                mSum.merge(k, v, Long::sum);
            }

            // AGGREGATING (avg; accumulator (sum, count)): only even idx.
            if (idx % 2 == 0) {
                avg.add(v);
                Tuple2<Long, Long> acc = mAvg.getOrDefault(k, Tuple2.of(0L, 0L));
                mAvg.put(k, Tuple2.of(acc.f0 + v, acc.f1 + 1));
            }

            // Timers (none of them can fire before the snapshot).
            if (idx % 10 == 0) {
                ctx.timerService().registerEventTimeTimer(EVENT_TIMER_BASE + idx);
                mTimers.add(Arrays.asList("event", k, EVENT_TIMER_BASE + idx));
            }
            if (idx % 25 == 0) {
                ctx.timerService().registerProcessingTimeTimer(PROC_TIMER_BASE + idx);
                mTimers.add(Arrays.asList("processing", k, PROC_TIMER_BASE + idx));
            }
            if (idx % 10 == 5) {
                if (!second) {
                    ctx.timerService().registerEventTimeTimer(DELETED_TIMER_BASE + idx);
                    mTimers.add(Arrays.asList("event", k, DELETED_TIMER_BASE + idx));
                } else {
                    ctx.timerService().deleteEventTimeTimer(DELETED_TIMER_BASE + idx);
                    mTimers.remove(Arrays.asList("event", k, DELETED_TIMER_BASE + idx));
                }
            }
            Oracle.count("keyed");
            out.collect(k);
        }

        /** Verify mode: read every state of key k (without changing it) into the mirrors. */
        private void probe(String k) throws Exception {
            Long tv = total.value();
            if (tv != null) {
                mTotal.put(k, tv);
            }
            Iterable<String> evs = events.get();
            if (evs != null) {
                List<String> l = new ArrayList<>();
                evs.forEach(l::add);
                if (!l.isEmpty()) {
                    mEvents.put(k, l);
                }
            }
            TreeMap<String, Long> cm = new TreeMap<>();
            Iterable<Map.Entry<String, Long>> entries = counts.entries();
            if (entries != null) {
                for (Map.Entry<String, Long> e : entries) {
                    cm.put(e.getKey(), e.getValue());
                }
            }
            if (!cm.isEmpty()) {
                mCounts.put(k, cm);
            }
            Long sv = sum.get();
            if (sv != null) {
                mSum.put(k, sv);
            }
            Tuple2<Long, Long> av = avg.get();
            if (av != null) {
                mAvg.put(k, av);
            }
        }

        @Override
        public void onTimer(long timestamp, OnTimerContext ctx, Collector<String> out) {
            if (!Oracle.restoring()) {
                throw new IllegalStateException("oracle timer fired unexpectedly: " + ctx.getCurrentKey() + " @" + timestamp);
            }
            String kind = ctx.timeDomain() == org.apache.flink.streaming.api.TimeDomain.EVENT_TIME ? "event" : "processing";
            mTimers.add(Arrays.asList(kind, ctx.getCurrentKey(), timestamp));
        }

        @Override
        public void close() {
            Oracle.recordRestored("keyed", getRuntimeContext().getTaskInfo().getIndexOfThisSubtask(), mirrorSnapshot());
        }

        @Override
        public void snapshotState(FunctionSnapshotContext ctx) {
            Oracle.record("keyed", getRuntimeContext().getTaskInfo().getIndexOfThisSubtask(), ctx.getCheckpointId(),
                    mirrorSnapshot());
        }

        private Oracle.OpSnapshot mirrorSnapshot() {
            Oracle.OpSnapshot snap = new Oracle.OpSnapshot();
            snap.keyed("total", "VALUE", mTotal);
            Map<String, Object> ev = new HashMap<>();
            mEvents.forEach((k, l) -> ev.put(k, new ArrayList<>(l)));
            snap.keyed("events", "LIST", ev);
            Map<String, Object> cm = new HashMap<>();
            mCounts.forEach((k, m) -> {
                List<Object> entries = new ArrayList<>();
                m.forEach((mk, mv) -> entries.add(Arrays.asList(mk, mv)));
                cm.put(k, entries);
            });
            snap.keyed("counts", "MAP", cm);
            snap.keyed("sum", "REDUCING", mSum);
            snap.keyed("avg", "AGGREGATING", mAvg);
            for (List<Object> t : mTimers) {
                snap.timer((String) t.get(0), t.get(1), (Long) t.get(2), null);
            }
            return snap;
        }
    }

    // ------------------------------------------------------------------ windows

    /** Average of f1 as accumulator (sum, count); the result is a copy of the accumulator. */
    public static class WindowAvg implements AggregateFunction<Tuple2<Long, Long>, Tuple2<Long, Long>, Tuple2<Long, Long>> {
        @Override
        public Tuple2<Long, Long> createAccumulator() {
            return Tuple2.of(0L, 0L);
        }

        @Override
        public Tuple2<Long, Long> add(Tuple2<Long, Long> e, Tuple2<Long, Long> acc) {
            return Tuple2.of(acc.f0 + e.f1, acc.f1 + 1);
        }

        @Override
        public Tuple2<Long, Long> getResult(Tuple2<Long, Long> acc) {
            return Tuple2.of(acc.f0, acc.f1);
        }

        @Override
        public Tuple2<Long, Long> merge(Tuple2<Long, Long> a, Tuple2<Long, Long> b) {
            return Tuple2.of(a.f0 + b.f0, a.f1 + b.f1);
        }
    }

    public static class SumReduce implements ReduceFunction<Tuple2<Long, Long>> {
        @Override
        public Tuple2<Long, Long> reduce(Tuple2<Long, Long> a, Tuple2<Long, Long> b) {
            return Tuple2.of(a.f0, a.f1 + b.f1);
        }
    }

    /** EventTimeTrigger behaviour plus a mirror of the window contents (the trigger sees the element and window). */
    public static class MirrorTrigger extends Trigger<Tuple2<Long, Long>, TimeWindow> {
        private final String uid;
        private final boolean aggregate;

        MirrorTrigger(String uid, boolean aggregate) {
            this.uid = uid;
            this.aggregate = aggregate;
        }

        @Override
        @SuppressWarnings("unchecked")
        public TriggerResult onElement(Tuple2<Long, Long> e, long timestamp, TimeWindow window, TriggerContext ctx) {
            Map<List<Object>, Object> m = WINDOWS.computeIfAbsent(uid, x -> new ConcurrentHashMap<>());
            List<Object> key = Arrays.asList(e.f0, window.getStart(), window.getEnd());
            Tuple2<Long, Long> cur = (Tuple2<Long, Long>) m.get(key);
            if (aggregate) {
                Tuple2<Long, Long> acc = cur == null ? Tuple2.of(0L, 0L) : cur;
                m.put(key, Tuple2.of(acc.f0 + e.f1, acc.f1 + 1));
            } else {
                m.put(key, cur == null ? Tuple2.of(e.f0, e.f1) : Tuple2.of(cur.f0, cur.f1 + e.f1));
            }
            Oracle.count(uid + "-elements");
            if (window.maxTimestamp() <= ctx.getCurrentWatermark()) {
                throw new IllegalStateException("late element in oracle job: " + e + " " + window);
            }
            ctx.registerEventTimeTimer(window.maxTimestamp());
            return TriggerResult.CONTINUE;
        }

        @Override
        public TriggerResult onEventTime(long time, TimeWindow window, TriggerContext ctx) {
            return time == window.maxTimestamp() ? TriggerResult.FIRE : TriggerResult.CONTINUE;
        }

        @Override
        public TriggerResult onProcessingTime(long time, TimeWindow window, TriggerContext ctx) {
            return TriggerResult.CONTINUE;
        }

        @Override
        public void clear(TimeWindow window, TriggerContext ctx) {
            ctx.deleteEventTimeTimer(window.maxTimestamp());
        }
    }

    /** Records fired windows (purged right after firing) and snapshots this subtask's share of the mirror. */
    public static class Fired<T> extends ProcessWindowFunction<T, String, Long, TimeWindow> implements CheckpointedFunction {
        private final String uid;
        private transient Map<Object, Object> restoredContents;
        private transient List<List<Object>> restoredTimers;

        Fired(String uid) {
            this.uid = uid;
        }

        @Override
        public void close() {
            if (Oracle.restoring()) {
                Oracle.OpSnapshot snap = new Oracle.OpSnapshot();
                snap.keyed("window-contents", uid.equals("window-agg") ? "AGGREGATING" : "REDUCING", restoredContents);
                for (List<Object> wk : restoredTimers) {
                    snap.timer("event", wk.get(0), (Long) wk.get(2) - 1, Arrays.asList(wk.get(1), wk.get(2)));
                }
                Oracle.recordRestored(uid, getRuntimeContext().getTaskInfo().getIndexOfThisSubtask(), snap);
            }
        }

        @Override
        public void process(Long key, Context ctx, Iterable<T> elements, Collector<String> out) {
            TimeWindow w = ctx.window();
            if (Oracle.restoring()) {
                // Verify mode: the final watermark fires every restored window via its timer.
                List<Object> wk = Arrays.asList(key, w.getStart(), w.getEnd());
                restoredContents.put(wk, elements.iterator().next());
                restoredTimers.add(wk);
                out.collect(uid + ":" + key + "@" + w);
                return;
            }
            WINDOWS.computeIfAbsent(uid, x -> new ConcurrentHashMap<>()).remove(Arrays.asList(key, w.getStart(), w.getEnd()));
            Oracle.count(uid + "-fired");
            out.collect(uid + ":" + key + "@" + w);
        }

        @Override
        public void initializeState(FunctionInitializationContext ctx) {
            restoredContents = new HashMap<>();
            restoredTimers = new ArrayList<>();
        }

        @Override
        public void snapshotState(FunctionSnapshotContext ctx) {
            int subtask = getRuntimeContext().getTaskInfo().getIndexOfThisSubtask();
            int parallelism = getRuntimeContext().getTaskInfo().getNumberOfParallelSubtasks();
            int maxP = getRuntimeContext().getTaskInfo().getMaxNumberOfParallelSubtasks();
            Map<Object, Object> mine = new HashMap<>();
            Oracle.OpSnapshot snap = new Oracle.OpSnapshot();
            for (Map.Entry<List<Object>, Object> e : WINDOWS.getOrDefault(uid, new HashMap<>()).entrySet()) {
                Long key = (Long) e.getKey().get(0);
                if (KeyGroupRangeAssignment.assignKeyToParallelOperator(key, maxP, parallelism) == subtask) {
                    mine.put(e.getKey(), e.getValue());
                    long end = (Long) e.getKey().get(2);
                    snap.timer("event", key, end - 1, Arrays.asList(e.getKey().get(1), end));
                }
            }
            snap.keyed("window-contents", uid.equals("window-agg") ? "AGGREGATING" : "REDUCING", mine);
            Oracle.record(uid, subtask, ctx.getCheckpointId(), snap);
        }
    }
}
