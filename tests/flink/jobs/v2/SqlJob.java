import java.io.File;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.time.LocalDateTime;
import java.time.ZoneOffset;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.source.legacy.RichSourceFunction;
import org.apache.flink.streaming.api.graph.StreamNode;
import org.apache.flink.streaming.api.watermark.Watermark;
import org.apache.flink.table.api.Schema;
import org.apache.flink.table.api.bridge.java.StreamStatementSet;
import org.apache.flink.table.api.bridge.java.StreamTableEnvironment;
import org.apache.flink.types.Row;

/**
 * Flink SQL oracle: a GROUP BY (COUNT, SUM, MAX, COUNT DISTINCT), deduplication keep-first and
 * keep-last on processing time, a regular INNER JOIN and a TUMBLE window TVF aggregation over two
 * DataStream sources of known rows, written to print sinks.
 *
 * Table ev (source "events-source", p 1): rows i = 0..n-1 (--records, default 120) with
 * id = i, k = "k" + i % 6, v = (i * 37) % 101 - 20, name = "n" + (i * i) % 7 and event time
 * i * 250 ms (rowtime, TIMESTAMP_LTZ(3) from the stream record timestamp, SOURCE_WATERMARK()),
 * then the watermark 17999 (so 5 s windows ending at or before 18000 fired; later ones are
 * open), then idles. Also proctime AS PROCTIME().
 * Table dims (source "dims-source", p 1): (k0, L0) .. (k7, L7), (k1, L1b), (k2, L2) again; no watermark.
 *
 * SQL operators run at parallelism 2 (max parallelism 128). The print sinks' output is
 * captured from System.out and materialised (changelog applied); the job waits until it equals
 * the results derived from the input (fails on a timeout with the difference), then takes the
 * savepoint. plan.json in the output dir is the COMPILE PLAN of the same statement set.
 *
 * Args: --uids true|false (table.exec.uid.generation ALWAYS, or the default PLAN_ONLY which
 * gives SQL operators no uid), --ttl DURATION (table.exec.state.ttl), --records N, --backend.
 *
 * Restore mode (--restore SAVEPOINT, with the args the savepoint was taken with, so that the
 * job graph and its operator ids are the same): the events source emits the second batch
 * i = n..2n-1 (same formulas: the same keys again, event times continuing after the first
 * batch, no watermark of its own), the dims source the same dims again, and both finish; the end
 * of input fires every window. dump.json then holds "output" (the sinks after the restore,
 * materialised), "retracted" (rows printed before the savepoint that the restored job retracted:
 * the restored accumulators and kept rows) and "expected_output" / "expected_retracted", what
 * both must be when the savepoint holds the first batch's state unchanged (the job cannot know
 * about a modified savepoint, so it only reports; the test compares). Keep-first deduplication
 * then prints nothing (every key was seen), keep-last retracts the first batch's last row per
 * key, the join pairs the new rows with the restored ones on both sides, the windows still
 * open at the savepoint fire with their restored accumulators.
 */
public class SqlJob implements InternalStateOracle.Job {
    static final int MAX_PARALLELISM = 128;
    static final int P = 2;
    static final int KEYS = 6;
    static final long STEP_MS = 250;
    static final long WINDOW_MS = 5000;
    static final long WATERMARK = 17999;
    static final String[][] DIMS = {
        {"k0", "L0"}, {"k1", "L1"}, {"k2", "L2"}, {"k3", "L3"}, {"k4", "L4"}, {"k5", "L5"}, {"k6", "L6"},
        {"k7", "L7"}, {"k1", "L1b"}, {"k2", "L2"}};

    /** Top-N (AppendOnlyTopN): the two largest v per k with their row number. */
    static final String TOP_N = "(SELECT k, id, v, ROW_NUMBER() OVER (PARTITION BY k ORDER BY v DESC) AS rn "
            + "FROM ev) WHERE rn <= 2";
    static final int TOP = 2;

    public static void main(String[] args) {
        InternalStateOracle.run(new SqlJob(), args);
    }

    static int records(Driver.Params p) {
        return p.getInt("records", 120);
    }

    static String key(long i) {
        return "k" + (i % KEYS);
    }

    static long value(long i) {
        return (i * 37) % 101 - 20;
    }

    static String name(long i) {
        return "n" + ((i * i) % 7);
    }

    static boolean joined(long i) {
        return i % 4 == 0;
    }

    @Override
    public int maxParallelism() {
        return MAX_PARALLELISM;
    }

    @Override
    public int parallelism() {
        return P;
    }

    // ------------------------------------------------------------------ job

    @Override
    public void build(StreamExecutionEnvironment env, Driver.Params p) throws Exception {
        boolean restore = InternalStateOracle.restoring(p);
        PrintCapture.install(restore);
        StreamTableEnvironment tenv = StreamTableEnvironment.create(env);
        tenv.getConfig().set("table.local-time-zone", "UTC");
        if (Boolean.parseBoolean(p.get("uids", "false"))) {
            tenv.getConfig().set("table.exec.uid.generation", "ALWAYS");
        }
        if (p.raw.containsKey("ttl")) {
            tenv.getConfig().set("table.exec.state.ttl", p.get("ttl", null));
        }
        int n = records(p);
        List<Object[]> events = new ArrayList<>();
        for (long i = restore ? n : 0; i < (restore ? 2L * n : n); i++) {
            events.add(new Object[] {i * STEP_MS, Row.of(i, key(i), value(i), name(i))});
        }
        TypeInformation<Row> eventType = Types.ROW_NAMED(new String[] {"id", "k", "v", "name"},
                Types.LONG, Types.STRING, Types.LONG, Types.STRING);
        DataStream<Row> ev = env.addSource(new RowSource(events, restore ? Long.MIN_VALUE : WATERMARK, restore, "events"), "events-source", eventType)
                .setParallelism(1);
        List<Object[]> dims = new ArrayList<>();
        for (String[] d : DIMS) {
            dims.add(new Object[] {0L, Row.of(d[0], d[1])});
        }
        TypeInformation<Row> dimType = Types.ROW_NAMED(new String[] {"k", "label"}, Types.STRING, Types.STRING);
        DataStream<Row> dm = env.addSource(new RowSource(dims, Long.MIN_VALUE, restore, "dims"), "dims-source", dimType)
                .setParallelism(1);

        tenv.createTemporaryView("ev", ev, Schema.newBuilder()
                .columnByMetadata("rowtime", "TIMESTAMP_LTZ(3)")
                .columnByExpression("proctime", "PROCTIME()")
                .watermark("rowtime", "SOURCE_WATERMARK()")
                .build());
        tenv.createTemporaryView("dims", dm);

        sink(tenv, "agg_out", "k STRING, cnt BIGINT, total BIGINT, mx BIGINT, names BIGINT", "agg");
        sink(tenv, "first_out", "id BIGINT, k STRING, v BIGINT", "first");
        sink(tenv, "last_out", "id BIGINT, k STRING, v BIGINT", "last");
        sink(tenv, "join_out", "id BIGINT, k STRING, v BIGINT, label STRING", "join");
        sink(tenv, "window_out", "k STRING, ws TIMESTAMP(3), we TIMESTAMP(3), cnt BIGINT, total BIGINT, mx BIGINT",
                "window");
        sink(tenv, "rank_out", "k STRING, id BIGINT, v BIGINT, rn BIGINT", "rank");
        sink(tenv, "listagg_out", "k STRING, ranked STRING", "listagg");
        StreamStatementSet set = tenv.createStatementSet();
        set.addInsertSql("INSERT INTO agg_out SELECT k, COUNT(*), SUM(v), MAX(v), COUNT(DISTINCT name) FROM ev GROUP BY k");
        set.addInsertSql("INSERT INTO first_out SELECT id, k, v FROM (SELECT id, k, v, ROW_NUMBER() OVER "
                + "(PARTITION BY k ORDER BY proctime ASC) AS rn FROM ev) WHERE rn = 1");
        set.addInsertSql("INSERT INTO last_out SELECT id, k, v FROM (SELECT id, k, v, ROW_NUMBER() OVER "
                + "(PARTITION BY k ORDER BY proctime DESC) AS rn FROM ev) WHERE rn = 1");
        set.addInsertSql("INSERT INTO join_out SELECT e.id, e.k, e.v, d.label FROM "
                + "(SELECT id, k, v FROM ev WHERE MOD(id, 4) = 0) AS e JOIN dims AS d ON e.k = d.k");
        set.addInsertSql("INSERT INTO window_out SELECT k, window_start, window_end, COUNT(*), SUM(v), MAX(v) "
                + "FROM TABLE(TUMBLE(TABLE ev, DESCRIPTOR(rowtime), INTERVAL '5' SECOND)) "
                + "GROUP BY k, window_start, window_end");
        set.addInsertSql("INSERT INTO rank_out SELECT * FROM " + TOP_N);
        // LISTAGG over the Top-N's updating output: ListAggWithRetractAggFunction, two ListViews
        set.addInsertSql("INSERT INTO listagg_out SELECT k, LISTAGG(CAST(id AS STRING) || ':' || CAST(rn AS STRING)) "
                + "FROM " + TOP_N + " GROUP BY k");
        // The planner numbers exec nodes from a JVM-wide counter, and SQL uids (and the "[id]" in
        // operator names) carry those numbers. Restarting it before each translation makes the
        // plan's node ids those of the job that runs (checked in describe()).
        resetNodeIds(tenv);
        Files.write(new File(p.out(), "plan.json").toPath(),
                set.compilePlan().asJsonString().getBytes(StandardCharsets.UTF_8));
        resetNodeIds(tenv);
        set.attachAsDataStream();
    }

    /** ExecNodeContext.resetIdCounter() of the planner (loaded by the planner loader's own class loader). */
    static void resetNodeIds(StreamTableEnvironment tenv) throws Exception {
        Object planner = ((org.apache.flink.table.api.internal.TableEnvironmentImpl) tenv).getPlanner();
        Class<?> context = Class.forName("org.apache.flink.table.planner.plan.nodes.exec.ExecNodeContext", true,
                planner.getClass().getClassLoader());
        context.getMethod("resetIdCounter").invoke(null);
    }

    private static void sink(StreamTableEnvironment tenv, String table, String columns, String id) {
        tenv.executeSql("CREATE TABLE " + table + " (" + columns + ") WITH ('connector' = 'print', "
                + "'print-identifier' = '" + id + "')");
    }

    // ------------------------------------------------------------------ expected results

    /** Group aggregate: k -> [count, sum, max, distinct names -> occurrences]. */
    static TreeMap<String, Object[]> groups(int n) {
        TreeMap<String, Object[]> m = new TreeMap<>();
        for (long i = 0; i < n; i++) {
            Object[] acc = m.computeIfAbsent(key(i), k -> new Object[] {0L, 0L, Long.MIN_VALUE, new TreeMap<String, Long>()});
            acc[0] = (Long) acc[0] + 1;
            acc[1] = (Long) acc[1] + value(i);
            acc[2] = Math.max((Long) acc[2], value(i));
            @SuppressWarnings("unchecked")
            TreeMap<String, Long> names = (TreeMap<String, Long>) acc[3];
            names.merge(name(i), 1L, Long::sum);
        }
        return m;
    }

    /** Deduplication: k -> the first (or last) row [id, k, v] in arrival (= processing-time) order. */
    static TreeMap<String, List<Object>> dedup(int n, boolean first) {
        TreeMap<String, List<Object>> m = new TreeMap<>();
        for (long i = 0; i < n; i++) {
            if (!first || !m.containsKey(key(i))) {
                m.put(key(i), Arrays.asList((Object) i, key(i), value(i)));
            }
        }
        return m;
    }

    /** Join state of one side: join key -> stored row -> how many times it arrived. */
    static TreeMap<String, TreeMap<String, Object[]>> joinSide(int n, boolean left) {
        TreeMap<String, TreeMap<String, Object[]>> m = new TreeMap<>();
        if (left) {
            for (long i = 0; i < n; i++) {
                if (joined(i)) {
                    addRow(m, key(i), Arrays.asList((Object) i, key(i), value(i)));
                }
            }
        } else {
            for (String[] d : DIMS) {
                addRow(m, d[0], Arrays.asList((Object) d[0], d[1]));
            }
        }
        return m;
    }

    private static void addRow(TreeMap<String, TreeMap<String, Object[]>> m, String k, List<Object> row) {
        Object[] e = m.computeIfAbsent(k, x -> new TreeMap<>()).computeIfAbsent(Json.write(row), x -> new Object[] {row, 0L});
        e[1] = (Long) e[1] + 1;
    }

    /** Window aggregate: [k, window start ms, window end ms] -> [count, sum, max]. */
    static TreeMap<List<Object>, long[]> windows(int n) {
        TreeMap<List<Object>, long[]> m = new TreeMap<>(Oracle.VALUE_ORDER);
        for (long i = 0; i < n; i++) {
            long start = (i * STEP_MS) - (i * STEP_MS) % WINDOW_MS;
            long[] acc = m.computeIfAbsent(Arrays.asList((Object) key(i), start, start + WINDOW_MS),
                    x -> new long[] {0, 0, Long.MIN_VALUE});
            acc[0]++;
            acc[1] += value(i);
            acc[2] = Math.max(acc[2], value(i));
        }
        return m;
    }

    static boolean fired(long windowEnd) {
        return windowEnd - 1 <= WATERMARK;
    }

    static String ts(long ms) {
        return LocalDateTime.ofEpochSecond(Math.floorDiv(ms, 1000), (int) Math.floorMod(ms, 1000) * 1_000_000,
                ZoneOffset.UTC).toString();
    }

    /** What the print sinks must show (materialised), as Row.toString field lists. */
    static Map<String, List<String>> expectedOutput(int n) {
        Map<String, List<String>> out = new LinkedHashMap<>();
        List<String> agg = new ArrayList<>();
        for (Map.Entry<String, Object[]> e : groups(n).entrySet()) {
            agg.add(aggRow(e.getKey(), e.getValue()));
        }
        out.put("agg", sorted(agg));
        for (String which : new String[] {"first", "last"}) {
            List<String> rows = new ArrayList<>();
            for (List<Object> r : dedup(n, which.equals("first")).values()) {
                rows.add(dedupRow(r));
            }
            out.put(which, sorted(rows));
        }
        List<String> join = new ArrayList<>();
        for (long i = 0; i < n; i++) {
            for (String[] d : DIMS) {
                if (joined(i) && d[0].equals(key(i))) {
                    join.add(joinRow(i, d[1]));
                }
            }
        }
        out.put("join", sorted(join));
        List<String> win = new ArrayList<>();
        for (Map.Entry<List<Object>, long[]> e : windows(n).entrySet()) {
            if (fired((Long) e.getKey().get(2))) {
                win.add(windowRow(e.getKey(), e.getValue()));
            }
        }
        out.put("window", sorted(win));
        SqlJobState.TopN top = SqlJobState.TopN.replay(0, n);
        out.put("rank", sorted(top.rank.rows));
        out.put("listagg", sorted(top.listagg.rows));
        return out;
    }

    /**
     * Restore mode, for a savepoint holding the first batch's state unchanged: [what the sinks
     * show after the second batch (materialised), which rows printed before the savepoint they
     * retract], each by sink identifier.
     */
    static List<Map<String, List<String>>> expectedAfterRestore(int n) {
        TreeMap<String, Object[]> before = groups(n);
        java.util.Set<String> again = new java.util.TreeSet<>();
        for (long i = n; i < 2L * n; i++) {
            again.add(key(i));
        }
        Map<String, List<String>> out = new LinkedHashMap<>();
        Map<String, List<String>> retracted = new LinkedHashMap<>();
        List<String> agg = new ArrayList<>();
        List<String> aggRetracted = new ArrayList<>();
        for (Map.Entry<String, Object[]> e : groups(2 * n).entrySet()) {
            if (again.contains(e.getKey())) {
                agg.add(aggRow(e.getKey(), e.getValue()));
                if (before.containsKey(e.getKey())) {
                    aggRetracted.add(aggRow(e.getKey(), before.get(e.getKey())));
                }
            }
        }
        out.put("agg", sorted(agg));
        retracted.put("agg", sorted(aggRetracted));
        // keep-first prints a key's first row only if the restored state has not seen the key
        List<String> first = new ArrayList<>();
        for (List<Object> r : dedup(2 * n, true).values()) {
            if ((Long) r.get(0) >= n) {
                first.add(dedupRow(r));
            }
        }
        out.put("first", sorted(first));
        retracted.put("first", new ArrayList<>());
        List<String> last = new ArrayList<>();
        List<String> lastRetracted = new ArrayList<>();
        TreeMap<String, List<Object>> lastBefore = dedup(n, false);
        for (List<Object> r : dedup(2 * n, false).values()) {
            if ((Long) r.get(0) >= n) {
                last.add(dedupRow(r));
                if (lastBefore.containsKey((String) r.get(1))) {
                    lastRetracted.add(dedupRow(lastBefore.get((String) r.get(1))));
                }
            }
        }
        out.put("last", sorted(last));
        retracted.put("last", sorted(lastRetracted));
        // restored left rows (i < n) meet the dims sent again; new left rows meet both dims copies
        List<String> join = new ArrayList<>();
        for (long i = 0; i < 2L * n; i++) {
            for (String[] d : DIMS) {
                if (joined(i) && d[0].equals(key(i))) {
                    join.add(joinRow(i, d[1]));
                    if (i >= n) {
                        join.add(joinRow(i, d[1]));
                    }
                }
            }
        }
        out.put("join", sorted(join));
        retracted.put("join", new ArrayList<>());
        // the end of input fires every window still open at the savepoint and every new one
        List<String> win = new ArrayList<>();
        for (Map.Entry<List<Object>, long[]> e : windows(2 * n).entrySet()) {
            if (!fired((Long) e.getKey().get(2))) {
                win.add(windowRow(e.getKey(), e.getValue()));
            }
        }
        out.put("window", sorted(win));
        retracted.put("window", new ArrayList<>());
        // the Top-N and the LISTAGG over it continue from the restored buffers and accumulators
        SqlJobState.TopN top = SqlJobState.TopN.replay(0, n);
        top.restart();
        top.run(n, 2L * n);
        out.put("rank", sorted(top.rank.rows));
        retracted.put("rank", sorted(top.rank.retracted));
        out.put("listagg", sorted(top.listagg.rows));
        retracted.put("listagg", sorted(top.listagg.retracted));
        return Arrays.asList(out, retracted);
    }

    private static String aggRow(String k, Object[] acc) {
        return "[" + k + ", " + acc[0] + ", " + acc[1] + ", " + acc[2] + ", " + ((Map<?, ?>) acc[3]).size() + "]";
    }

    private static String dedupRow(List<Object> r) {
        return "[" + r.get(0) + ", " + r.get(1) + ", " + r.get(2) + "]";
    }

    private static String joinRow(long i, String label) {
        return "[" + i + ", " + key(i) + ", " + value(i) + ", " + label + "]";
    }

    private static String windowRow(List<Object> window, long[] acc) {
        return "[" + window.get(0) + ", " + ts((Long) window.get(1)) + ", " + ts((Long) window.get(2)) + ", "
                + acc[0] + ", " + acc[1] + ", " + acc[2] + "]";
    }

    private static List<String> sorted(List<String> l) {
        List<String> c = new ArrayList<>(l);
        c.sort(null);
        return c;
    }

    // ------------------------------------------------------------------ driver hooks

    @Override
    public boolean restorable() {
        return true;
    }

    @Override
    public String pending(Driver.Params p) {
        int n = records(p);
        if (Oracle.counter("events") < n || Oracle.counter("dims") < DIMS.length) {
            return "sources emitted events=" + Oracle.counter("events") + "/" + n + " dims="
                    + Oracle.counter("dims") + "/" + DIMS.length;
        }
        if (InternalStateOracle.restoring(p)) {
            return null; // the state restored may have been changed: the output is reported, not checked
        }
        Map<String, List<String>> expected = expectedOutput(n);
        Map<String, List<String>> actual = PrintCapture.materialised();
        for (Map.Entry<String, List<String>> e : expected.entrySet()) {
            List<String> got = actual.getOrDefault(e.getKey(), new ArrayList<>());
            if (!got.equals(e.getValue())) {
                return "sink " + e.getKey() + " shows " + got + " but the input gives " + e.getValue();
            }
        }
        return null;
    }

    @Override
    public Map<String, Object> describe(StreamNode node, Driver.Params p) {
        return SqlJobState.describe(node.getOperatorName(), String.valueOf(node.getOperatorDescription()), records(p));
    }

    @Override
    public void finish(Map<String, Object> dump, Driver.Params p) {
        Map<String, Object> output = new LinkedHashMap<>();
        for (Map.Entry<String, List<String>> e : PrintCapture.materialised().entrySet()) {
            output.put(e.getKey(), e.getValue());
        }
        dump.put("output", output);
        if (InternalStateOracle.restoring(p)) {
            List<Map<String, List<String>>> expected = expectedAfterRestore(records(p));
            for (String sink : expected.get(0).keySet()) {
                output.putIfAbsent(sink, new ArrayList<String>());
            }
            Map<String, Object> retracted = new LinkedHashMap<>();
            for (String sink : expected.get(1).keySet()) {
                retracted.put(sink, PrintCapture.retracted().getOrDefault(sink, new ArrayList<>()));
            }
            for (Map.Entry<String, List<String>> e : PrintCapture.retracted().entrySet()) {
                retracted.putIfAbsent(e.getKey(), e.getValue());
            }
            dump.put("retracted", retracted);
            dump.put("expected_output", expected.get(0));
            dump.put("expected_retracted", expected.get(1));
        }
        dump.put("plan", "plan.json");
    }

    // ------------------------------------------------------------------ source

    /**
     * Emits (timestamp, row) pairs in order, then an optional watermark, then idles until stopped
     * (or, with finish, ends: the end of input then sends the final watermark).
     */
    public static class RowSource extends RichSourceFunction<Row> {
        private final List<Object[]> rows;
        private final long watermark;
        private final boolean finish;
        private final String counter;
        private volatile boolean running = true;

        RowSource(List<Object[]> rows, long watermark, boolean finish, String counter) {
            this.rows = rows;
            this.watermark = watermark;
            this.finish = finish;
            this.counter = counter;
        }

        @Override
        public void run(SourceContext<Row> ctx) throws Exception {
            for (Object[] r : rows) {
                synchronized (ctx.getCheckpointLock()) {
                    ctx.collectWithTimestamp((Row) r[1], (Long) r[0]);
                    Oracle.count(counter);
                }
            }
            if (watermark != Long.MIN_VALUE) {
                synchronized (ctx.getCheckpointLock()) {
                    ctx.emitWatermark(new Watermark(watermark));
                }
            }
            while (running && !finish) {
                Thread.sleep(20);
            }
        }

        @Override
        public void cancel() {
            running = false;
        }
    }
}
