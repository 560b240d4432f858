// GENERATED from ../v2/InternalStateOracle.java by ../make_v1.py -- edit v2 and re-run make_v1.py.
import java.io.File;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

import org.apache.flink.api.common.JobStatus;
import org.apache.flink.core.execution.JobClient;
import org.apache.flink.core.execution.SavepointFormatType;
import org.apache.flink.runtime.util.EnvironmentInformation;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.graph.StreamGraph;
import org.apache.flink.streaming.api.graph.StreamGraphHasherV2;
import org.apache.flink.streaming.api.graph.StreamNode;

/**
 * Driver for oracle jobs whose state Flink keeps inside its own operators (SQL, CEP), so no
 * user function can mirror it. The job derives the expected state from its known input, and
 * tells the driver when every record has been processed (for SQL: when the sinks' output equals
 * the derived results). The driver then takes a CANONICAL stop-with-savepoint into
 * DIR/savepoint/ and writes dump.json with every operator of the stream graph (name, uid,
 * operator id, parallelism, max parallelism) plus the job's expected state.
 *
 * Only savepoints are supported (--snapshot savepoint); --backend hashmap|rocksdb as in Oracle.
 *
 * Restore mode (--restore SAVEPOINT, jobs whose {@link Job#restorable()} is true): the same job
 * starts from the savepoint (no unclaimed state allowed), its sources emit a second known batch
 * and finish, so the job runs to FINISHED; the driver waits for that (no timing involved), then
 * writes dump.json (kind "restored", snapshot_path = the restored savepoint) with the job's
 * output after the restore. No new savepoint is taken.
 */
public final class InternalStateOracle {
    private InternalStateOracle() {}

    public interface Job {
        int maxParallelism();

        int parallelism();

        /** Adds the job to env (may write files such as plan.json into p.out()). */
        void build(StreamExecutionEnvironment env, Oracle.Params p) throws Exception;

        /** null once every record has been processed and the output checked, else what is missing. */
        String pending(Oracle.Params p);

        /**
         * Classifies a stream node: returns its dump entry extras (e.g. "kind", "expected",
         * "state_names") or null for a node without state worth describing.
         */
        Map<String, Object> describe(StreamNode node, Oracle.Params p);

        /** Adds job-level entries (e.g. "output") to the dump. */
        void finish(Map<String, Object> dump, Oracle.Params p);

        /**
         * Whether the job supports restore mode: started with --restore, its sources emit their
         * second batch and finish, and pending() tells when they have.
         */
        default boolean restorable() {
            return false;
        }
    }

    /** Restore mode: the job was started with --restore SAVEPOINT. */
    public static boolean restoring(Oracle.Params p) {
        return p.raw.containsKey("restore");
    }

    public static void run(Job job, String[] args) {
        Oracle.Params p = new Oracle.Params();
        for (int i = 0; i < args.length; i++) {
            if (!args[i].startsWith("--")) {
                throw new IllegalArgumentException("expected --key value pairs, got " + Arrays.toString(args));
            }
            boolean flag = i + 1 >= args.length || args[i + 1].startsWith("--");
            p.raw.put(args[i].substring(2), flag ? "true" : args[++i]);
        }
        int timeoutS = p.getInt("timeout", 100);
        startWatchdog(timeoutS);
        int rc = 0;
        try {
            execute(job, p, timeoutS);
        } catch (Throwable t) {
            System.err.println("ORACLE FAILED: " + t);
            t.printStackTrace();
            rc = 1;
        }
        System.out.flush();
        System.err.flush();
        Runtime.getRuntime().halt(rc);
    }

    private static void startWatchdog(int timeoutS) {
        Thread t = new Thread(() -> {
            try {
                Thread.sleep(timeoutS * 1000L);
            } catch (InterruptedException e) {
                return;
            }
            System.err.println("ORACLE WATCHDOG: job did not complete within " + timeoutS + " s");
            for (Map.Entry<Thread, StackTraceElement[]> e : Thread.getAllStackTraces().entrySet()) {
                System.err.println("Thread " + e.getKey().getName() + " (" + e.getKey().getState() + ")");
                for (StackTraceElement s : e.getValue()) {
                    System.err.println("    at " + s);
                }
            }
            System.err.flush();
            Runtime.getRuntime().halt(3);
        }, "oracle-watchdog");
        t.setDaemon(true);
        t.start();
    }

    private static void execute(Job job, Oracle.Params p, int timeoutS) throws Exception {
        long t0 = System.currentTimeMillis();
        if (!p.snapshot().equals("savepoint")) {
            throw new IllegalArgumentException("only --snapshot savepoint is supported by this job");
        }
        boolean restore = restoring(p);
        if (restore && !job.restorable()) {
            throw new IllegalArgumentException("--restore is not supported by " + job.getClass().getSimpleName());
        }
        File out = p.out();
        out.mkdirs();
        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment(Oracle.config(p));
        env.setMaxParallelism(job.maxParallelism());
        env.setParallelism(job.parallelism());
        job.build(env, p);
        StreamGraph graph = env.getStreamGraph();
        List<Object> operators = describeGraph(job, graph, p);
        JobClient client = env.executeAsync(graph);
        long deadline = t0 + Math.max(timeoutS * 800L, (timeoutS - 15) * 1000L);

        Map<String, Object> timing = new LinkedHashMap<>();
        String snapshotPath = restore ? awaitRestoredRun(job, p, client, deadline)
                : awaitSavepoint(job, p, client, deadline, timing, t0);
        timing.put(restore ? "job_finished_ms" : "snapshot_done_ms", System.currentTimeMillis() - t0);

        Map<String, Object> dump = new LinkedHashMap<>();
        dump.put("flink_version", EnvironmentInformation.getVersion());
        dump.put("job", job.getClass().getSimpleName());
        dump.put("kind", restore ? "restored" : "savepoint");
        dump.put("backend", p.backend());
        java.nio.file.Path snap = new File(snapshotPath).getAbsoluteFile().toPath().normalize();
        dump.put("snapshot_path", snap.startsWith(out.toPath()) ? out.toPath().relativize(snap).toString() : snap.toString());
        dump.put("job_id", client.getJobID().toString());
        Map<String, String> args = new LinkedHashMap<>(p.raw);
        args.remove("out");
        args.remove("timeout");
        dump.put("args", args);
        dump.put("operators", operators);
        job.finish(dump, p);
        dump.put("timing", timing);
        Files.write(new File(out, "dump.json").toPath(), Json.write(dump).getBytes(StandardCharsets.UTF_8));
        System.out.println("ORACLE OK snapshot_path=" + snapshotPath);
    }

    /** Waits until the job has processed every record, then stops it with a savepoint; returns its path. */
    private static String awaitSavepoint(Job job, Oracle.Params p, JobClient client, long deadline,
            Map<String, Object> timing, long t0) throws Exception {
        long lastStatusCheck = 0;
        String missing;
        while ((missing = job.pending(p)) != null) {
            long now = System.currentTimeMillis();
            if (now > deadline) {
                throw new IllegalStateException("timed out waiting for the job's records and output: " + missing);
            }
            if (now - lastStatusCheck > 500) {
                lastStatusCheck = now;
                JobStatus st;
                try {
                    st = client.getJobStatus().get(10, TimeUnit.SECONDS);
                } catch (Exception e) {
                    st = null;
                }
                if (st == null || st.isGloballyTerminalState()) {
                    Throwable cause = null;
                    try {
                        client.getJobExecutionResult().get(10, TimeUnit.SECONDS);
                    } catch (Exception e) {
                        cause = e;
                    }
                    throw new IllegalStateException("job " + (st == null ? "terminated" : "reached " + st)
                            + " while waiting for: " + missing, cause);
                }
            }
            Thread.sleep(20);
        }
        timing.put("records_processed_ms", System.currentTimeMillis() - t0);
        String target = new File(p.out(), "savepoint").toURI().toString();
        SavepointFormatType format = SavepointFormatType.valueOf(
                p.get("savepoint-format", "canonical").toUpperCase(java.util.Locale.ROOT));
        String path = client.stopWithSavepoint(false, target, format)
                .get(Math.max(1, deadline - System.currentTimeMillis()), TimeUnit.MILLISECONDS);
        client.getJobExecutionResult().get(Math.max(1, deadline - System.currentTimeMillis()), TimeUnit.MILLISECONDS);
        String snapshotPath = localPath(path);
        if (!new File(snapshotPath, "_metadata").isFile()) {
            throw new IllegalStateException("no _metadata at " + snapshotPath);
        }
        return snapshotPath;
    }

    /**
     * Restore mode: the sources finish after their second batch, so the job ends by itself; waits
     * for that (a failed restore fails here with Flink's cause) and returns the restored path.
     */
    private static String awaitRestoredRun(Job job, Oracle.Params p, JobClient client, long deadline) throws Exception {
        try {
            long remaining = Math.max(1, deadline - System.currentTimeMillis());
            client.getJobExecutionResult().get(remaining, TimeUnit.MILLISECONDS);
        } catch (java.util.concurrent.TimeoutException e) {
            throw new IllegalStateException("the restored job did not finish: " + job.pending(p), e);
        }
        String missing = job.pending(p);
        if (missing != null) {
            throw new IllegalStateException("the restored job finished, but " + missing);
        }
        return new File(localPath(p.get("restore", null))).getAbsolutePath();
    }

    private static String localPath(String uri) {
        return uri.startsWith("file:") ? new File(java.net.URI.create(uri)).getPath() : uri;
    }

    /** StreamNode.getMaxParallelism() is not public in Flink 1.x. */
    private static int maxParallelism(StreamNode node) {
        try {
            java.lang.reflect.Method m = StreamNode.class.getDeclaredMethod("getMaxParallelism");
            m.setAccessible(true);
            return (Integer) m.invoke(node);
        } catch (ReflectiveOperationException e) {
            throw new IllegalStateException(e);
        }
    }

    /** Every stream node in id order: name, uid, operator id (Flink's hash), parallelism, extras. */
    private static List<Object> describeGraph(Job job, StreamGraph graph, Oracle.Params p) {
        Map<Integer, byte[]> hashes = new StreamGraphHasherV2().traverseStreamGraphAndGenerateHashes(graph);
        List<StreamNode> nodes = new ArrayList<>(graph.getStreamNodes());
        nodes.sort((a, b) -> Integer.compare(a.getId(), b.getId()));
        List<Object> ops = new ArrayList<>();
        for (StreamNode node : nodes) {
            Map<String, Object> o = new LinkedHashMap<>();
            o.put("name", node.getOperatorName());
            o.put("uid", node.getTransformationUID());
            o.put("operator_id", Oracle.hex(hashes.get(node.getId())));
            o.put("parallelism", node.getParallelism());
            o.put("max_parallelism", maxParallelism(node) > 0 ? maxParallelism(node) : job.maxParallelism());
            Map<String, Object> extras = job.describe(node, p);
            o.put("kind", extras == null ? null : extras.remove("kind"));
            if (extras != null) {
                o.putAll(extras);
            }
            ops.add(o);
        }
        return ops;
    }
}
