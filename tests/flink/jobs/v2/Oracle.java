import java.io.File;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.Comparator;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentSkipListSet;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.BooleanSupplier;

import org.apache.flink.core.execution.JobClient;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.graph.StreamGraph;
import org.apache.flink.streaming.api.graph.StreamGraphHasherV2;

/**
 * Driver for the oracle jobs whose functions mirror their state (Flink 2.x API flavour).
 *
 * Stateful functions record a "mirror" of exactly what they put into Flink state. In
 * snapshotState(ctx) they hand a copy to {@link #record}, keyed by (uid, subtask, checkpoint
 * id). After the savepoint / checkpoint completed, main writes the mirror of that checkpoint id
 * to dump.json and exits the JVM.
 *
 * The command line, watchdog, environment, waits, savepoint and dump.json head are
 * {@link Driver}'s; {@link InternalStateOracle} shares them and {@link #progress}.
 */
public final class Oracle {
    private Oracle() {}

    // ------------------------------------------------------------------ mirrors

    /** Everything one subtask of one operator held in state at one snapshot. */
    public static final class OpSnapshot {
        /** list state name -> {mode, values}. */
        public final Map<String, Object[]> lists = new LinkedHashMap<>();
        /** broadcast state name -> entries (sorted map). */
        public final Map<String, Map<Object, Object>> broadcast = new LinkedHashMap<>();
        /** keyed state name -> {kind, map key -> value}. */
        public final Map<String, Object[]> keyed = new LinkedHashMap<>();
        /** timers: {kind, key, timestamp, namespace}. */
        public final List<Object[]> timers = new ArrayList<>();

        public OpSnapshot list(String name, String mode, Collection<?> values) {
            lists.put(name, new Object[] {mode, new ArrayList<Object>(values)});
            return this;
        }

        public OpSnapshot broadcast(String name, Map<?, ?> entries) {
            Map<Object, Object> copy = new java.util.TreeMap<>(VALUE_ORDER);
            copy.putAll(entries);
            broadcast.put(name, copy);
            return this;
        }

        public OpSnapshot keyed(String name, String kind, Map<?, ?> entries) {
            keyed.put(name, new Object[] {kind, new HashMap<Object, Object>(entries)});
            return this;
        }

        /**
         * Keyed state with extra attributes written into its dump entry between "kind" and
         * "entries", e.g. "type" (a human description of the Java type) and "opaque" (true when
         * the values are not dumped, e.g. Kryo: every value is then null).
         */
        public OpSnapshot keyed(String name, String kind, Map<?, ?> entries, Map<String, Object> attrs) {
            keyed.put(name, new Object[] {kind, new HashMap<Object, Object>(entries), new LinkedHashMap<String, Object>(attrs)});
            return this;
        }

        public OpSnapshot timer(String kind, Object key, long ts, Object namespace) {
            timers.add(new Object[] {kind, key, ts, namespace});
            return this;
        }
    }

    private static final Map<String, OpSnapshot> SNAPSHOTS = new ConcurrentHashMap<>();
    private static final Map<String, AtomicLong> COUNTERS = new ConcurrentHashMap<>();
    /** Highest checkpoint id the source has snapshotted so far. */
    public static final AtomicLong SOURCE_SNAPSHOT_MAX = new AtomicLong(-1);
    /** Checkpoint ids the source was notified as complete. */
    public static final ConcurrentSkipListSet<Long> COMPLETED = new ConcurrentSkipListSet<>();

    public static void record(String uid, int subtask, long checkpointId, OpSnapshot snap) {
        SNAPSHOTS.put(uid + "|" + subtask + "|" + checkpointId, snap);
    }

    /** Pseudo checkpoint id under which verify mode ({@code --restore}) records what was restored. */
    public static final long RESTORED = -1;
    private static volatile boolean restoring;

    /**
     * Verify mode: the job was started from {@code --restore <snapshot>}. Sources emit no data
     * (KeyedStateJob emits probe records) and then finish, so the job runs to FINISHED; the
     * final watermark fires every event-time timer. Functions record what they restored (plus
     * what probes and fired timers revealed) in close() via {@link #recordRestored}.
     */
    public static boolean restoring() {
        return restoring;
    }

    public static void recordRestored(String uid, int subtask, OpSnapshot snap) {
        if (restoring) {
            record(uid, subtask, RESTORED, snap);
        }
    }

    public static void count(String what) {
        COUNTERS.computeIfAbsent(what, k -> new AtomicLong()).incrementAndGet();
    }

    public static void count(String what, long n) {
        COUNTERS.computeIfAbsent(what, k -> new AtomicLong()).addAndGet(n);
    }

    public static long counter(String what) {
        AtomicLong a = COUNTERS.get(what);
        return a == null ? 0 : a.get();
    }

    public static void sourceSnapshot(long checkpointId) {
        SOURCE_SNAPSHOT_MAX.accumulateAndGet(checkpointId, Math::max);
    }

    // ------------------------------------------------------------------ job definition

    public interface JobDef {
        int maxParallelism();

        void build(StreamExecutionEnvironment env, Driver.Params p);

        /** counter name -> value it must reach before the snapshot is taken. */
        Map<String, Long> expectedCounts(Driver.Params p);

        /** stateful operators in dump order: uid -> parallelism. */
        LinkedHashMap<String, Integer> operators(Driver.Params p);
    }

    // ------------------------------------------------------------------ driver

    public static void run(JobDef def, String[] args) {
        Driver.main(args, "ORACLE", Oracle::progress, (p, timeoutS) -> {
            restoring = p.raw.containsKey("restore");
            execute(def, p, timeoutS);
        });
    }

    private static void execute(JobDef def, Driver.Params p, int timeoutS) throws Exception {
        long t0 = System.currentTimeMillis();
        File out = p.out();
        StreamExecutionEnvironment env = Driver.environment(p, def.maxParallelism(), 1);
        def.build(env, p);
        StreamGraph graph = env.getStreamGraph();
        JobClient client = env.executeAsync(graph);
        long deadline = Driver.deadline(t0, timeoutS);

        Map<String, Long> expected = def.expectedCounts(p);
        waitFor(client, deadline, "all records processed " + expected, () -> {
            for (Map.Entry<String, Long> e : expected.entrySet()) {
                if (counter(e.getKey()) < e.getValue()) {
                    return false;
                }
            }
            return true;
        });
        for (Map.Entry<String, Long> e : expected.entrySet()) {
            if (counter(e.getKey()) != e.getValue()) {
                throw new IllegalStateException("counter " + e.getKey() + " = " + counter(e.getKey())
                        + ", expected " + e.getValue());
            }
        }
        long tProcessed = System.currentTimeMillis();

        long checkpointId;
        String snapshotPath;
        String kind = p.snapshot();
        if (restoring) {
            // Verify mode: the sources finish by themselves; wait for the job to finish.
            Driver.awaitFinished(client, deadline, () -> "counters=" + COUNTERS);
            checkpointId = RESTORED;
            kind = "restored";
            snapshotPath = Driver.restoredPath(p);
        } else if (p.snapshot().equals("savepoint")) {
            snapshotPath = Driver.stopWithSavepoint(client, p, deadline);
            checkpointId = SOURCE_SNAPSHOT_MAX.get();
        } else {
            long before = SOURCE_SNAPSHOT_MAX.get();
            waitFor(client, deadline, "a checkpoint after id " + before + " to complete",
                    () -> COMPLETED.higher(before) != null);
            checkpointId = COMPLETED.higher(before);
            client.cancel().get(Driver.remaining(deadline), TimeUnit.MILLISECONDS);
            waitFor(null, deadline, "job cancellation", () -> {
                try {
                    return client.getJobStatus().get(5, TimeUnit.SECONDS).isGloballyTerminalState();
                } catch (Exception e) {
                    return true; // job gone from the cluster
                }
            });
            snapshotPath = new File(out, "checkpoints/" + client.getJobID() + "/chk-" + checkpointId).getPath();
        }
        Driver.requireMetadata(snapshotPath);
        long tSnap = System.currentTimeMillis();

        Map<String, Object> dump = Driver.dumpHead(def, kind, checkpointId, p, snapshotPath, client);
        List<Object> ops = new ArrayList<>();
        for (Map.Entry<String, Integer> op : def.operators(p).entrySet()) {
            ops.add(operatorDump(op.getKey(), op.getValue(), def.maxParallelism(), checkpointId));
        }
        dump.put("operators", ops);
        if (restoring) {
            dump.put("notes", Arrays.asList(
                    "verify mode: state as restored by Flink from snapshot_path; no new snapshot was taken",
                    "UNION list state: every subtask restores the union of all subtasks' entries",
                    "keyed state: only keys the job probes (k-0..k-999) are visible; event-time timers are listed"
                            + " because the final watermark fired them; processing-time timers cannot be observed"));
        }
        Map<String, Object> timing = new LinkedHashMap<>();
        timing.put("records_processed_ms", tProcessed - t0);
        timing.put("snapshot_done_ms", tSnap - t0);
        dump.put("timing", timing);
        Driver.writeDump(p, dump);
        System.out.println("ORACLE OK checkpoint_id=" + checkpointId + " snapshot_path=" + snapshotPath);
    }

    /** The counters and checkpoint ids so far, for messages ("" when the job counts nothing). */
    static String progress() {
        return COUNTERS.isEmpty() && SOURCE_SNAPSHOT_MAX.get() < 0 ? ""
                : "; counters=" + COUNTERS + " sourceSnapshotMax=" + SOURCE_SNAPSHOT_MAX + " completed=" + COMPLETED;
    }

    private static void waitFor(JobClient client, long deadline, String what, BooleanSupplier cond) throws Exception {
        Driver.await(client, deadline, () -> cond.getAsBoolean() ? null : what);
    }

    private static Map<String, Object> operatorDump(String uid, int parallelism, int maxParallelism, long cp) {
        List<OpSnapshot> subs = new ArrayList<>();
        for (int s = 0; s < parallelism; s++) {
            OpSnapshot snap = SNAPSHOTS.get(uid + "|" + s + "|" + cp);
            if (snap == null) {
                throw new IllegalStateException("no mirror for " + uid + " subtask " + s + " checkpoint " + cp);
            }
            subs.add(snap);
        }
        Map<String, Object> o = new LinkedHashMap<>();
        o.put("uid", uid);
        o.put("operator_id", Driver.hex(StreamGraphHasherV2.generateUserSpecifiedHash(uid)));
        o.put("parallelism", parallelism);
        o.put("max_parallelism", maxParallelism);

        List<Object> lists = new ArrayList<>();
        for (String name : subs.get(0).lists.keySet()) {
            for (int s = 0; s < parallelism; s++) {
                Object[] e = subs.get(s).lists.get(name);
                Map<String, Object> m = new LinkedHashMap<>();
                m.put("state", name);
                m.put("mode", e[0]);
                m.put("subtask", s);
                m.put("values", e[1]);
                lists.add(m);
            }
        }
        o.put("list_state", lists);

        List<Object> bc = new ArrayList<>();
        for (Map.Entry<String, Map<Object, Object>> e : subs.get(0).broadcast.entrySet()) {
            for (int s = 1; s < parallelism; s++) {
                if (!entriesEqual(e.getValue(), subs.get(s).broadcast.get(e.getKey()))) {
                    throw new IllegalStateException("broadcast state " + e.getKey() + " differs between subtasks");
                }
            }
            Map<String, Object> m = new LinkedHashMap<>();
            m.put("state", e.getKey());
            m.put("entries", entries(e.getValue()));
            bc.add(m);
        }
        o.put("broadcast_state", bc);

        List<Object> keyed = new ArrayList<>();
        for (String name : subs.get(0).keyed.keySet()) {
            String kind = (String) subs.get(0).keyed.get(name)[0];
            Map<Object, Object> merged = new java.util.TreeMap<>(VALUE_ORDER);
            for (OpSnapshot snap : subs) {
                @SuppressWarnings("unchecked")
                Map<Object, Object> part = (Map<Object, Object>) snap.keyed.get(name)[1];
                for (Map.Entry<Object, Object> e : part.entrySet()) {
                    if (merged.put(e.getKey(), e.getValue()) != null) {
                        throw new IllegalStateException("key " + e.getKey() + " of " + name + " on two subtasks");
                    }
                }
            }
            Map<String, Object> m = new LinkedHashMap<>();
            m.put("state", name);
            m.put("kind", kind);
            Object[] first = subs.get(0).keyed.get(name);
            if (first.length > 2) {
                @SuppressWarnings("unchecked")
                Map<String, Object> attrs = (Map<String, Object>) first[2];
                m.putAll(attrs);
            }
            m.put("entries", entries(merged));
            keyed.add(m);
        }
        o.put("keyed_state", keyed);

        List<Object[]> timers = new ArrayList<>();
        for (OpSnapshot snap : subs) {
            timers.addAll(snap.timers);
        }
        timers.sort((a, b) -> VALUE_ORDER.compare(Arrays.asList(a), Arrays.asList(b)));
        List<Object> tl = new ArrayList<>();
        for (Object[] t : timers) {
            Map<String, Object> m = new LinkedHashMap<>();
            m.put("kind", t[0]);
            m.put("key", t[1]);
            m.put("timestamp", t[2]);
            m.put("namespace", t[3]);
            tl.add(m);
        }
        o.put("timers", tl);
        return o;
    }

    private static boolean entriesEqual(Map<Object, Object> a, Map<Object, Object> b) {
        return b != null && Json.write(entries(a)).equals(Json.write(entries(b)));
    }

    private static List<Object> entries(Map<Object, Object> m) {
        List<Object> l = new ArrayList<>();
        for (Map.Entry<Object, Object> e : m.entrySet()) {
            l.add(Arrays.asList(e.getKey(), e.getValue()));
        }
        return l;
    }

    /** Total order over the values used as keys: numbers, strings, booleans, lists. */
    public static final Comparator<Object> VALUE_ORDER = new Comparator<Object>() {
        @Override
        public int compare(Object a, Object b) {
            if (a == b) {
                return 0;
            }
            if (a == null || b == null) {
                return a == null ? -1 : 1;
            }
            if (a instanceof Number && b instanceof Number) {
                return Double.compare(((Number) a).doubleValue(), ((Number) b).doubleValue()) != 0
                        ? Double.compare(((Number) a).doubleValue(), ((Number) b).doubleValue())
                        : Long.compare(((Number) a).longValue(), ((Number) b).longValue());
            }
            if (a instanceof List && b instanceof List) {
                List<?> x = (List<?>) a;
                List<?> y = (List<?>) b;
                for (int i = 0; i < Math.min(x.size(), y.size()); i++) {
                    int c = compare(x.get(i), y.get(i));
                    if (c != 0) {
                        return c;
                    }
                }
                return Integer.compare(x.size(), y.size());
            }
            if (a instanceof String && b instanceof String) {
                return ((String) a).compareTo((String) b);
            }
            if (a instanceof Boolean && b instanceof Boolean) {
                return Boolean.compare((Boolean) a, (Boolean) b);
            }
            if (a.getClass() != b.getClass()) {
                return a.getClass().getName().compareTo(b.getClass().getName());
            }
            return String.valueOf(a).compareTo(String.valueOf(b));
        }
    };
}
