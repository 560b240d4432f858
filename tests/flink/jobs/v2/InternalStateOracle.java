import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import org.apache.flink.core.execution.JobClient;
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
 *
 * The command line, watchdog, waits, savepoint and dump.json head are {@link Driver}'s; the
 * progress in its messages is {@link Oracle}'s (what the jobs count with Oracle.count).
 */
public final class InternalStateOracle {
    private InternalStateOracle() {}

    public interface Job {
        int maxParallelism();

        int parallelism();

        /** Adds the job to env (may write files such as plan.json into p.out()). */
        void build(StreamExecutionEnvironment env, Driver.Params p) throws Exception;

        /** null once every record has been processed and the output checked, else what is missing. */
        String pending(Driver.Params p);

        /**
         * Classifies a stream node: returns its dump entry extras (e.g. "kind", "expected",
         * "state_names") or null for a node without state worth describing.
         */
        Map<String, Object> describe(StreamNode node, Driver.Params p);

        /** Adds job-level entries (e.g. "output") to the dump. */
        void finish(Map<String, Object> dump, Driver.Params p);

        /**
         * Whether the job supports restore mode: started with --restore, its sources emit their
         * second batch and finish, and pending() tells when they have.
         */
        default boolean restorable() {
            return false;
        }
    }

    /** Restore mode: the job was started with --restore SAVEPOINT. */
    public static boolean restoring(Driver.Params p) {
        return p.raw.containsKey("restore");
    }

    public static void run(Job job, String[] args) {
        Driver.main(args, "ORACLE", Oracle::progress, (p, timeoutS) -> execute(job, p, timeoutS));
    }

    private static void execute(Job job, Driver.Params p, int timeoutS) throws Exception {
        long t0 = System.currentTimeMillis();
        if (!p.snapshot().equals("savepoint")) {
            throw new IllegalArgumentException("only --snapshot savepoint is supported by this job");
        }
        boolean restore = restoring(p);
        if (restore && !job.restorable()) {
            throw new IllegalArgumentException("--restore is not supported by " + job.getClass().getSimpleName());
        }
        StreamExecutionEnvironment env = Driver.environment(p, job.maxParallelism(), job.parallelism());
        job.build(env, p);
        StreamGraph graph = env.getStreamGraph();
        List<Object> operators = describeGraph(job, graph, p);
        JobClient client = env.executeAsync(graph);
        long deadline = Driver.deadline(t0, timeoutS);

        Map<String, Object> timing = new LinkedHashMap<>();
        String snapshotPath;
        if (restore) {
            // The sources finish after their second batch, so the job ends by itself.
            Driver.awaitFinished(client, deadline, () -> job.pending(p));
            String missing = job.pending(p);
            if (missing != null) {
                throw new IllegalStateException("the restored job finished, but " + missing);
            }
            snapshotPath = Driver.restoredPath(p);
        } else {
            Driver.await(client, deadline, () -> job.pending(p));
            timing.put("records_processed_ms", System.currentTimeMillis() - t0);
            snapshotPath = Driver.stopWithSavepoint(client, p, deadline);
        }
        Driver.requireMetadata(snapshotPath);
        timing.put(restore ? "job_finished_ms" : "snapshot_done_ms", System.currentTimeMillis() - t0);

        Map<String, Object> dump = Driver.dumpHead(job, restore ? "restored" : "savepoint", null, p, snapshotPath, client);
        dump.put("operators", operators);
        job.finish(dump, p);
        dump.put("timing", timing);
        Driver.writeDump(p, dump);
        System.out.println("ORACLE OK snapshot_path=" + snapshotPath);
    }

    /** Every stream node in id order: name, uid, operator id (Flink's hash), parallelism, extras. */
    private static List<Object> describeGraph(Job job, StreamGraph graph, Driver.Params p) {
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
            o.put("max_parallelism", node.getMaxParallelism() > 0 ? node.getMaxParallelism() : job.maxParallelism());
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
