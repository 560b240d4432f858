import java.io.ByteArrayOutputStream;
import java.io.File;
import java.io.OutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.atomic.AtomicLong;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.core.execution.JobClient;
import org.apache.flink.runtime.checkpoint.CheckpointException;
import org.apache.flink.runtime.checkpoint.CheckpointFailureReason;
import org.apache.flink.runtime.util.EnvironmentInformation;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.source.legacy.RichSourceFunction;
import org.apache.flink.streaming.api.graph.StreamGraph;
import org.apache.flink.streaming.api.graph.StreamGraphHasherV2;
import org.apache.flink.streaming.api.graph.StreamNode;
import org.apache.flink.streaming.api.watermark.Watermark;
import org.apache.flink.table.api.Schema;
import org.apache.flink.table.api.bridge.java.StreamStatementSet;
import org.apache.flink.table.api.bridge.java.StreamTableEnvironment;
import org.apache.flink.util.ExceptionUtils;
import org.apache.flink.types.Row;

/**
 * The oracle of SQL query changes (tests/flink/sql_changes.py, which holds the statement sets):
 * runs a list of phases in one JVM, each a Flink SQL statement set over SqlJob's input tables,
 * and writes DIR/PHASE/dump.json (+ plan.json, savepoint/) for each.
 *
 * Args: --spec FILE (JSON, below), --backend, --out, --timeout (the whole JVM's).
 * <pre>
 * {"phases": [{"name": "old",                    the phase's directory under --out
 *    "mode": "savepoint" | "finish" | "plan",
 *    "uids": true | false,                       table.exec.uid.generation ALWAYS, or the default
 *                                                that gives SQL operators no uid
 *    "sinks": [{"table": "agg_out", "columns": "k STRING, cnt BIGINT", "insert": "INSERT INTO agg_out ..."}],
 *    "rows": [from, to],                         ev rows i in [from, to)
 *    "watermark": 17999 | null,                  emitted by the ev source after its rows
 *    "dims": 1,                                  copies of SqlJob.DIMS the dims source emits
 *    "restore": "/abs/savepoint" | null}]}
 * </pre>
 * Tables exactly as SqlJob's: ev (id, k, v, name from SqlJob's formulas, rowtime = the record
 * timestamp i * 250 ms as TIMESTAMP_LTZ(3) with SOURCE_WATERMARK(), proctime AS PROCTIME()) from
 * the source with uid "events-source", dims (k, label) from "dims-source", both at parallelism 1;
 * SQL operators at parallelism 2, max parallelism 128, local time zone UTC; each sink is a print
 * table whose print-identifier is its table name.
 *
 * Modes: "plan" compiles the set's plan only (plan.json; no job runs). "savepoint": the job runs
 * until its sources have emitted every row (and the watermark after them), then stops with a
 * CANONICAL savepoint (barriers follow the records, so the savepoint holds all of them; no
 * timing involved). "finish": the sources finish, the end of input fires every window, the job
 * runs to FINISHED; with "restore" it starts from that savepoint with unclaimed state refused,
 * and a job that Flink fails (e.g. state it cannot map) is reported in dump.json ("failure"),
 * not an error of this JVM. The planner's node-id counter is reset before compiling the plan
 * and before attaching the set, so plan.json's node ids are those of the job that runs.
 *
 * A phase's dump.json: phase, mode, flink_version, uids, restore, plan ("plan.json"), and for a
 * job that ran: job_id, snapshot_path (the savepoint taken, relative to the phase dir, or the
 * restored one, absolute), operators (every stream node in id order: name, uid, operator_id,
 * parallelism, max_parallelism), changelog (sink table -> the raw lines the print sink wrote, in
 * the order they were printed, e.g. "+I[k0, 1, 5, 5]", "-U[k0, 1, 5, 5]"), failure (null or the
 * failure's cause chain), timing. DIR/dump.json lists the phases and their wall times.
 */
public class SqlChangeJob {
    static final int MAX_PARALLELISM = 128;
    static final int P = 2;
    /** The sources' uids and the names they count under. */
    static final Map<String, String> SOURCE_UIDS = Map.of("events-source", "events", "dims-source", "dims");

    /** Rows emitted per source of the phase running, and whether each source has finished emitting. */
    private static final Map<String, AtomicLong> COUNTS = new ConcurrentHashMap<>();
    /** The sources (counter names) in the running phase's job: a table no statement reads has none. */
    private static volatile List<String> sources = new ArrayList<>();
    private static volatile String phase = "";

    public static void main(String[] args) {
        Driver.main(args, "SQLCHANGE", SqlChangeJob::progress, SqlChangeJob::execute);
    }

    static String progress() {
        return "; phase " + phase + ", emitted " + new java.util.TreeMap<>(COUNTS);
    }

    private static void execute(Driver.Params p, int timeoutS) throws Exception {
        long t0 = System.currentTimeMillis();
        long deadline = Driver.deadline(t0, timeoutS);
        String specText = new String(Files.readAllBytes(new File(p.get("spec", "spec.json")).toPath()),
                StandardCharsets.UTF_8);
        @SuppressWarnings("unchecked")
        Map<String, Object> spec = (Map<String, Object>) RestoreJsonReader.parse(specText);
        @SuppressWarnings("unchecked")
        List<Map<String, Object>> phases = (List<Map<String, Object>>) spec.get("phases");
        Changelog.install();
        p.out().mkdirs();
        List<Object> names = new ArrayList<>();
        Map<String, Object> timing = new LinkedHashMap<>();
        for (Map<String, Object> ph : phases) {
            long start = System.currentTimeMillis();
            names.add(ph.get("name"));
            runPhase(ph, p, deadline);
            timing.put((String) ph.get("name"), System.currentTimeMillis() - start);
        }
        Map<String, Object> dump = new LinkedHashMap<>();
        dump.put("flink_version", EnvironmentInformation.getVersion());
        dump.put("job", "SqlChangeJob");
        dump.put("phases", names);
        dump.put("timing", timing);
        Driver.writeDump(p, dump);
        System.out.println("SQLCHANGE OK phases=" + names);
    }

    // ------------------------------------------------------------------ one phase

    @SuppressWarnings("unchecked")
    private static void runPhase(Map<String, Object> ph, Driver.Params base, long deadline) throws Exception {
        long t0 = System.currentTimeMillis();
        String name = (String) ph.get("name");
        String mode = (String) ph.get("mode");
        String restore = (String) ph.get("restore");
        phase = name;
        COUNTS.clear();
        Driver.Params p = new Driver.Params();
        p.raw.putAll(base.raw);
        p.raw.remove("restore");
        p.raw.put("out", new File(base.out(), name).getPath());
        if (restore != null) {
            p.raw.put("restore", restore);
        }
        Object uidsFlag = ph.get("uids");
        if (!(uidsFlag instanceof Boolean)) {
            throw new IllegalArgumentException("phase " + name + ": \"uids\" must be true or false, not " + uidsFlag);
        }
        boolean uids = (Boolean) uidsFlag;
        boolean finish = mode.equals("finish");
        if (!finish && !mode.equals("savepoint") && !mode.equals("plan")) {
            throw new IllegalArgumentException("phase " + name + ": mode must be savepoint, finish or plan, not "
                    + mode);
        }
        if (restore != null && !finish) {
            throw new IllegalArgumentException("phase " + name + ": a restore runs to the end of input (mode finish)");
        }
        StreamExecutionEnvironment env = Driver.environment(p, MAX_PARALLELISM, P);
        StreamTableEnvironment tenv = StreamTableEnvironment.create(env);
        tenv.getConfig().set("table.local-time-zone", "UTC");
        if (uids) {
            tenv.getConfig().set("table.exec.uid.generation", "ALWAYS");
        }
        List<Object> rows = (List<Object>) ph.get("rows");
        Object watermark = ph.get("watermark");
        addTables(env, tenv, (Long) rows.get(0), (Long) rows.get(1),
                watermark == null ? Long.MIN_VALUE : (Long) watermark,
                ((Long) ph.get("dims")).intValue(), finish);
        StreamStatementSet set = tenv.createStatementSet();
        for (Map<String, Object> sink : (List<Map<String, Object>>) ph.get("sinks")) {
            tenv.executeSql("CREATE TABLE " + sink.get("table") + " (" + sink.get("columns") + ") WITH ('connector' = "
                    + "'print', 'print-identifier' = '" + sink.get("table") + "')");
            set.addInsertSql((String) sink.get("insert"));
        }
        // The planner numbers exec nodes from a JVM-wide counter; SQL uids and operator names carry
        // those numbers. Restarting it before each translation makes plan.json's node ids those of
        // the job that runs, whatever phases ran before in this JVM.
        resetNodeIds(tenv);
        Files.write(new File(p.out(), "plan.json").toPath(),
                set.compilePlan().asJsonString().getBytes(StandardCharsets.UTF_8));
        Map<String, Object> dump = new LinkedHashMap<>();
        dump.put("phase", name);
        dump.put("mode", mode);
        dump.put("flink_version", EnvironmentInformation.getVersion());
        dump.put("uids", uids);
        dump.put("restore", restore);
        dump.put("plan", "plan.json");
        Map<String, Object> timing = new LinkedHashMap<>();
        if (!mode.equals("plan")) {
            resetNodeIds(tenv);
            set.attachAsDataStream();
            StreamGraph graph = env.getStreamGraph();
            dump.put("operators", describeGraph(graph));
            List<String> inGraph = new ArrayList<>();
            for (StreamNode node : graph.getStreamNodes()) {
                if (node.getTransformationUID() != null && SOURCE_UIDS.containsKey(node.getTransformationUID())) {
                    inGraph.add(SOURCE_UIDS.get(node.getTransformationUID()));
                }
            }
            sources = inGraph;
            Changelog.start();
            String failure = null;
            String snapshotPath = null;
            JobClient client = null;
            try {
                client = env.executeAsync(graph);
                if (finish) {
                    Driver.awaitFinished(client, deadline, SqlChangeJob::pending);
                    snapshotPath = restore == null ? null : Driver.restoredPath(p);
                } else {
                    Driver.await(client, deadline, SqlChangeJob::pending);
                    timing.put("records_processed_ms", System.currentTimeMillis() - t0);
                    snapshotPath = stopWithSavepoint(client, p, deadline);
                    Driver.requireMetadata(snapshotPath);
                }
            } catch (Exception e) {
                if (restore == null) {
                    throw e;
                }
                failure = causes(e);
            }
            if (failure == null && pending() != null) {
                throw new IllegalStateException("phase " + name + " ended, but " + pending());
            }
            dump.put("job_id", client == null ? null : client.getJobID().toString());
            dump.put("snapshot_path", snapshotPath == null ? null : relative(p.out(), snapshotPath));
            dump.put("changelog", Changelog.stop());
            dump.put("failure", failure);
        }
        timing.put("phase_ms", System.currentTimeMillis() - t0);
        dump.put("timing", timing);
        Driver.writeDump(p, dump);
    }

    /** null once every source of the phase has emitted all it has (rows and the watermark after them). */
    static String pending() {
        for (String source : sources) {
            if (!COUNTS.containsKey(source + ".done")) {
                return "the " + source + " source to emit everything" + progress();
            }
        }
        return null;
    }

    /** Stop-with-savepoint once every task runs (a savepoint cannot start before); returns its path. */
    private static String stopWithSavepoint(JobClient client, Driver.Params p, long deadline) throws Exception {
        while (true) {
            try {
                return Driver.stopWithSavepoint(client, p, deadline);
            } catch (ExecutionException e) {
                CheckpointFailureReason notRunning = CheckpointFailureReason.NOT_ALL_REQUIRED_TASKS_RUNNING;
                boolean retry = ExceptionUtils.findThrowable(e, CheckpointException.class)
                        .map(c -> c.getCheckpointFailureReason() == notRunning).orElse(false);
                if (!retry || System.currentTimeMillis() > deadline) {
                    throw e;
                }
                Thread.sleep(20);
            }
        }
    }

    /** {@code path} relative to {@code dir} when inside it, else absolute. */
    private static String relative(File dir, String path) {
        java.nio.file.Path abs = new File(path).getAbsoluteFile().toPath().normalize();
        return abs.startsWith(dir.toPath()) ? dir.toPath().relativize(abs).toString() : abs.toString();
    }

    private static String causes(Throwable t) {
        StringBuilder sb = new StringBuilder();
        for (Throwable c = t; c != null; c = c.getCause() == c ? null : c.getCause()) {
            sb.append(sb.length() == 0 ? "" : "\ncaused by: ").append(c);
        }
        return sb.toString();
    }

    /** ev and dims as SqlJob declares them, from sources emitting rows [from, to) and dims copies of SqlJob.DIMS. */
    private static void addTables(StreamExecutionEnvironment env, StreamTableEnvironment tenv, long from, long to,
            long watermark, int dimCopies, boolean finish) {
        List<Object[]> events = new ArrayList<>();
        for (long i = from; i < to; i++) {
            events.add(new Object[] {i * SqlJob.STEP_MS, Row.of(i, SqlJob.key(i), SqlJob.value(i), SqlJob.name(i))});
        }
        TypeInformation<Row> eventType = Types.ROW_NAMED(new String[] {"id", "k", "v", "name"},
                Types.LONG, Types.STRING, Types.LONG, Types.STRING);
        DataStream<Row> ev = env.addSource(new PhaseSource(events, watermark, finish, SOURCE_UIDS.get("events-source")),
                "events-source", eventType).uid("events-source").setParallelism(1);
        List<Object[]> dims = new ArrayList<>();
        for (int c = 0; c < dimCopies; c++) {
            for (String[] d : SqlJob.DIMS) {
                dims.add(new Object[] {0L, Row.of(d[0], d[1])});
            }
        }
        TypeInformation<Row> dimType = Types.ROW_NAMED(new String[] {"k", "label"}, Types.STRING, Types.STRING);
        DataStream<Row> dm = env.addSource(new PhaseSource(dims, Long.MIN_VALUE, finish, SOURCE_UIDS.get("dims-source")),
                "dims-source", dimType).uid("dims-source").setParallelism(1);
        tenv.createTemporaryView("ev", ev, Schema.newBuilder()
                .columnByMetadata("rowtime", "TIMESTAMP_LTZ(3)")
                .columnByExpression("proctime", "PROCTIME()")
                .watermark("rowtime", "SOURCE_WATERMARK()")
                .build());
        tenv.createTemporaryView("dims", dm);
    }

    /** ExecNodeContext.resetIdCounter() of the planner (loaded by the planner loader's own class loader). */
    private static void resetNodeIds(StreamTableEnvironment tenv) throws Exception {
        Object planner = ((org.apache.flink.table.api.internal.TableEnvironmentImpl) tenv).getPlanner();
        Class<?> context = Class.forName("org.apache.flink.table.planner.plan.nodes.exec.ExecNodeContext", true,
                planner.getClass().getClassLoader());
        context.getMethod("resetIdCounter").invoke(null);
    }

    /** Every stream node in id order: name, uid, operator id (Flink's hash), parallelism, max parallelism. */
    private static List<Object> describeGraph(StreamGraph graph) {
        Map<Integer, byte[]> hashes = new StreamGraphHasherV2().traverseStreamGraphAndGenerateHashes(graph);
        List<StreamNode> nodes = new ArrayList<>(graph.getStreamNodes());
        nodes.sort((a, b) -> Integer.compare(a.getId(), b.getId()));
        List<Object> ops = new ArrayList<>();
        for (StreamNode node : nodes) {
            Map<String, Object> o = new LinkedHashMap<>();
            o.put("name", node.getOperatorName());
            o.put("uid", node.getTransformationUID());
            o.put("operator_id", Driver.hex(hashes.get(node.getId())));
            o.put("parallelism", node.getParallelism());
            o.put("max_parallelism", maxParallelism(node) > 0 ? maxParallelism(node) : MAX_PARALLELISM);
            ops.add(o);
        }
        return ops;
    }

    /** The max parallelism set on a stream node (-1 when the environment's applies). */
    private static int maxParallelism(StreamNode node) {
        return node.getMaxParallelism();
    }

    // ------------------------------------------------------------------ source

    /**
     * Emits (timestamp, row) pairs in order, then an optional watermark, then marks itself done;
     * then idles until stopped, or, with finish, ends (the end of input sends the final watermark).
     */
    public static class PhaseSource extends RichSourceFunction<Row> {
        private final List<Object[]> rows;
        private final long watermark;
        private final boolean finish;
        private final String counter;
        private volatile boolean running = true;

        PhaseSource(List<Object[]> rows, long watermark, boolean finish, String counter) {
            this.rows = rows;
            this.watermark = watermark;
            this.finish = finish;
            this.counter = counter;
        }

        @Override
        public void run(SourceContext<Row> ctx) throws Exception {
            AtomicLong emitted = COUNTS.computeIfAbsent(counter, k -> new AtomicLong());
            for (Object[] r : rows) {
                synchronized (ctx.getCheckpointLock()) {
                    ctx.collectWithTimestamp((Row) r[1], (Long) r[0]);
                    emitted.incrementAndGet();
                }
            }
            synchronized (ctx.getCheckpointLock()) {
                if (watermark != Long.MIN_VALUE) {
                    ctx.emitWatermark(new Watermark(watermark));
                }
                COUNTS.put(counter + ".done", new AtomicLong(1));
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

    // ------------------------------------------------------------------ print sink capture

    /**
     * Captures what the print sinks write to System.out ("agg_out> +I[k0, 1]" or, at parallelism
     * above 1, "agg_out:2> -U[k0, 1]") as raw lines per sink, in the order printed, for the phase
     * running; other lines pass through. (PrintCapture materialises a single job's output; the
     * phases need the raw changelog of each job, which Python materialises across phases.)
     */
    static final class Changelog {
        private static final Pattern LINE = Pattern.compile("^([A-Za-z_][A-Za-z0-9_-]*)(?::\\d+)?> ([+-][IUD]\\[.*\\])$");
        private static Map<String, List<String>> lines;
        private static boolean installed;

        static synchronized void install() {
            if (installed) {
                return;
            }
            installed = true;
            PrintStream original = System.out;
            OutputStream sink = new OutputStream() {
                private final ByteArrayOutputStream line = new ByteArrayOutputStream();

                @Override
                public synchronized void write(int b) {
                    if (b == '\n') {
                        String text = new String(line.toByteArray(), StandardCharsets.UTF_8);
                        line.reset();
                        if (!accept(text)) {
                            original.println(text);
                        }
                    } else {
                        line.write(b);
                    }
                }
            };
            System.setOut(new PrintStream(sink, true));
        }

        static synchronized void start() {
            lines = new LinkedHashMap<>();
        }

        static synchronized Map<String, List<String>> stop() {
            Map<String, List<String>> out = lines;
            lines = null;
            return out;
        }

        private static synchronized boolean accept(String text) {
            Matcher m = LINE.matcher(text.endsWith("\r") ? text.substring(0, text.length() - 1) : text);
            if (!m.matches()) {
                return false;
            }
            if (lines == null) {
                throw new IllegalStateException("print sink output outside a phase's job: " + text);
            }
            lines.computeIfAbsent(m.group(1), k -> new ArrayList<>()).add(m.group(2));
            return true;
        }
    }
}
