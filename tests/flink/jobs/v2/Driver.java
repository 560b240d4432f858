import java.io.File;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.Arrays;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;
import java.util.function.Supplier;

import org.apache.flink.api.common.JobStatus;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.core.execution.JobClient;
import org.apache.flink.core.execution.SavepointFormatType;
import org.apache.flink.runtime.util.EnvironmentInformation;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;

/**
 * The driver side of the oracle jobs (Flink 2.x API flavour): the command line, the watchdog and
 * exit code of a job's main, the Flink configuration and environment, the deadline and the waits
 * on the running job, stop-with-savepoint and dump.json.
 *
 * {@link Oracle} and {@link InternalStateOracle} drive their jobs with all of it;
 * {@link RestoreJob} (its own configuration and dump) with the command line, main, the deadline,
 * the wait for the job to finish and dump.json writing.
 */
public final class Driver {
    private Driver() {}

    /** Parsed command line: --backend, --snapshot, --out, --timeout and job-specific extras. */
    public static final class Params {
        public final Map<String, String> raw = new LinkedHashMap<>();

        /**
         * {@code --key value} pairs; a bare flag (--compression) followed by another --key or
         * nothing means "true".
         */
        static Params parse(String[] args) {
            Params p = new Params();
            for (int i = 0; i < args.length; i++) {
                if (!args[i].startsWith("--")) {
                    throw new IllegalArgumentException("expected --key value pairs, got " + Arrays.toString(args));
                }
                boolean flag = i + 1 >= args.length || args[i + 1].startsWith("--");
                p.raw.put(args[i].substring(2), flag ? "true" : args[++i]);
            }
            return p;
        }

        public String get(String k, String def) {
            return raw.getOrDefault(k, def);
        }

        public int getInt(String k, int def) {
            return raw.containsKey(k) ? Integer.parseInt(raw.get(k)) : def;
        }

        public String backend() {
            return get("backend", "hashmap");
        }

        public String snapshot() {
            return get("snapshot", "savepoint");
        }

        public File out() {
            return new File(get("out", "out")).getAbsoluteFile();
        }
    }

    /** What a driver does with the parsed command line and the --timeout (seconds). */
    interface Body {
        void execute(Params p, int timeoutS) throws Exception;
    }

    /** The job's progress for the watchdog's and the waits' messages (set by {@link #main}). */
    private static volatile Supplier<String> progress = () -> "";

    /** {@link #main(String[], String, Supplier, Body, Consumer)} reporting nothing beyond the stack trace. */
    static void main(String[] args, String name, Supplier<String> progress, Body body) {
        main(args, name, progress, body, t -> {});
    }

    /**
     * A job's main: parses the command line, starts the watchdog (after --timeout seconds, default
     * 100, it prints "NAME WATCHDOG: ..." with {@code progress} and every thread's stack, and halts
     * with exit code 3), runs {@code body} and halts the JVM without waiting for the MiniCluster's
     * shutdown: exit code 0, or 1 when {@code body} failed, after "NAME FAILED: error", its stack
     * trace and what {@code report} adds on stderr. {@code progress} ("" or "; what so far")
     * also ends the messages of {@link #await}.
     */
    static void main(String[] args, String name, Supplier<String> progress, Body body, Consumer<Throwable> report) {
        Params p = Params.parse(args);
        int timeoutS = p.getInt("timeout", 100);
        Driver.progress = progress;
        startWatchdog(name, timeoutS);
        int rc = 0;
        try {
            body.execute(p, timeoutS);
        } catch (Throwable t) {
            System.err.println(name + " FAILED: " + t);
            t.printStackTrace();
            report.accept(t);
            rc = 1;
        }
        System.out.flush();
        System.err.flush();
        Runtime.getRuntime().halt(rc);
    }

    private static void startWatchdog(String name, int timeoutS) {
        Thread t = new Thread(() -> {
            try {
                Thread.sleep(timeoutS * 1000L);
            } catch (InterruptedException e) {
                return;
            }
            System.err.println(name + " WATCHDOG: job did not complete within " + timeoutS + " s" + progress.get());
            for (Map.Entry<Thread, StackTraceElement[]> e : Thread.getAllStackTraces().entrySet()) {
                System.err.println("Thread " + e.getKey().getName() + " (" + e.getKey().getState() + ")");
                for (StackTraceElement s : e.getValue()) {
                    System.err.println("    at " + s);
                }
            }
            System.err.flush();
            Runtime.getRuntime().halt(3);
        }, name.toLowerCase(java.util.Locale.ROOT) + "-watchdog");
        t.setDaemon(true);
        t.start();
    }

    static Configuration config(Params p) {
        File out = p.out();
        Map<String, String> m = new HashMap<>();
        m.put("state.backend.type", p.backend());
        m.put("execution.checkpointing.storage", "filesystem");
        m.put("execution.checkpointing.dir", new File(out, "checkpoints").toURI().toString());
        m.put("execution.checkpointing.savepoint-dir", new File(out, "savepoint").toURI().toString());
        m.put("execution.checkpointing.incremental", p.get("incremental", "false"));
        // RocksDB flushes only at checkpoints: with managed memory its write buffer manager flushes
        // (and then compacts) whenever the slot's small budget fills, at moments that depend on the
        // machine's speed (seen on Flink 1.20), so the SST layout of a snapshot would vary between
        // machines. Unmanaged, every column family has its own 64 MB memtable, far above what these
        // jobs write.
        m.put("state.backend.rocksdb.memory.managed", "false");
        // Fail fast: with checkpointing on, the default would restart the job forever.
        m.put("restart-strategy.type", "none");
        m.put("restart-strategy", "none");
        m.put("rest.bind-port", "0");
        m.put("rest.port", "0");
        m.put("execution.checkpointing.unaligned.enabled", "false");
        m.put("pipeline.auto-watermark-interval", "0 ms");
        if (p.snapshot().equals("checkpoint")) {
            m.put("execution.checkpointing.interval", p.get("interval", "300 ms"));
            m.put("execution.checkpointing.mode", "EXACTLY_ONCE");
            m.put("execution.checkpointing.externalized-checkpoint-retention", "RETAIN_ON_CANCELLATION");
            m.put("execution.checkpointing.num-retained", "1000");
            m.put("execution.checkpointing.max-concurrent-checkpoints", "1");
        } else if (!p.snapshot().equals("savepoint")) {
            throw new IllegalArgumentException("--snapshot must be savepoint or checkpoint");
        }
        if (p.raw.containsKey("restore")) {
            m.put("execution.state-recovery.path", p.get("restore", null));
            m.put("execution.state-recovery.ignore-unclaimed-state", "false");
        }
        return Configuration.fromMap(m);
    }

    /** The environment of a job: config(p), the given parallelisms; creates the --out directory. */
    static StreamExecutionEnvironment environment(Params p, int maxParallelism, int parallelism) {
        p.out().mkdirs();
        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment(config(p));
        env.setMaxParallelism(maxParallelism);
        env.setParallelism(parallelism);
        return env;
    }

    // ------------------------------------------------------------------ waits

    /** When the driver's own waits give up: before the watchdog, so failures carry a readable message. */
    static long deadline(long t0, int timeoutS) {
        return t0 + Math.max(timeoutS * 800L, (timeoutS - 15) * 1000L);
    }

    /** Milliseconds left until {@code deadline} (at least 1). */
    static long remaining(long deadline) {
        return Math.max(1, deadline - System.currentTimeMillis());
    }

    /**
     * Waits until {@code pending} returns null (else it names what the job still lacks); fails with
     * that when the deadline passes or, with a client, when the job terminates first.
     */
    static void await(JobClient client, long deadline, Supplier<String> pending) throws Exception {
        long lastStatusCheck = 0;
        String what;
        while ((what = pending.get()) != null) {
            long now = System.currentTimeMillis();
            if (now > deadline) {
                throw new IllegalStateException("timed out waiting for " + what + progress.get());
            }
            if (client != null && now - lastStatusCheck > 500) {
                lastStatusCheck = now;
                JobStatus st;
                try {
                    st = client.getJobStatus().get(10, TimeUnit.SECONDS);
                } catch (java.util.concurrent.TimeoutException e) {
                    continue; // a slow answer (a loaded machine) says nothing about the job
                } catch (Exception e) {
                    st = null; // the per-job MiniCluster shuts down as soon as the job terminates
                }
                if (st == null && !client.getJobExecutionResult().isDone()) {
                    continue; // the status call failed while the job still runs
                }
                if (st == null || st.isGloballyTerminalState()) {
                    Throwable cause = null;
                    try {
                        client.getJobExecutionResult().get(10, TimeUnit.SECONDS);
                    } catch (Exception e) {
                        cause = e;
                    }
                    throw new IllegalStateException("job " + (st == null ? "terminated (MiniCluster gone)" : "reached " + st)
                            + " while waiting for " + what + progress.get(), cause);
                }
            }
            Thread.sleep(20);
        }
    }

    /** Waits for a job whose sources finish to finish; {@code state} tells how far it got. */
    static void awaitFinished(JobClient client, long deadline, Supplier<String> state) throws Exception {
        try {
            client.getJobExecutionResult().get(remaining(deadline), TimeUnit.MILLISECONDS);
        } catch (java.util.concurrent.TimeoutException e) {
            throw new IllegalStateException("the restored job did not finish: " + state.get(), e);
        }
    }

    // ------------------------------------------------------------------ snapshots

    /** Stops the job with a savepoint into --out/savepoint (--savepoint-format canonical|native); returns its path. */
    static String stopWithSavepoint(JobClient client, Params p, long deadline) throws Exception {
        String target = new File(p.out(), "savepoint").toURI().toString();
        SavepointFormatType format = SavepointFormatType.valueOf(
                p.get("savepoint-format", "canonical").toUpperCase(java.util.Locale.ROOT));
        String path = client.stopWithSavepoint(false, target, format)
                .get(remaining(deadline), TimeUnit.MILLISECONDS);
        client.getJobExecutionResult().get(remaining(deadline), TimeUnit.MILLISECONDS);
        return localPath(path);
    }

    /** The absolute local path of --restore. */
    static String restoredPath(Params p) {
        return new File(localPath(p.get("restore", null))).getAbsolutePath();
    }

    static void requireMetadata(String snapshotPath) {
        File meta = new File(snapshotPath, "_metadata");
        if (!meta.isFile()) {
            throw new IllegalStateException("no _metadata at " + meta);
        }
    }

    /** The local path of a file: URI; any other text as it is. */
    static String localPath(String uri) {
        return uri.startsWith("file:") ? new File(java.net.URI.create(uri)).getPath() : uri;
    }

    // ------------------------------------------------------------------ dump.json

    /**
     * The head of dump.json: flink_version, job (the class of {@code job}), kind, checkpoint_id
     * (unless null), backend, snapshot_path (relative to --out when inside it), job_id and the
     * command line without --out and --timeout.
     */
    static Map<String, Object> dumpHead(Object job, String kind, Long checkpointId, Params p, String snapshotPath,
            JobClient client) {
        File out = p.out();
        Map<String, Object> dump = new LinkedHashMap<>();
        dump.put("flink_version", EnvironmentInformation.getVersion());
        dump.put("job", job.getClass().getSimpleName());
        dump.put("kind", kind);
        if (checkpointId != null) {
            dump.put("checkpoint_id", checkpointId);
        }
        dump.put("backend", p.backend());
        java.nio.file.Path snap = new File(snapshotPath).getAbsoluteFile().toPath().normalize();
        dump.put("snapshot_path", snap.startsWith(out.toPath()) ? out.toPath().relativize(snap).toString() : snap.toString());
        dump.put("job_id", client.getJobID().toString());
        Map<String, String> args = new LinkedHashMap<>(p.raw);
        args.remove("out");
        args.remove("timeout");
        dump.put("args", args);
        return dump;
    }

    /** Writes {@code dump} to --out/dump.json. */
    static void writeDump(Params p, Map<String, Object> dump) throws IOException {
        Files.write(new File(p.out(), "dump.json").toPath(), Json.write(dump).getBytes(StandardCharsets.UTF_8));
    }

    /** Lower-case hex of {@code b}, e.g. an operator id. */
    static String hex(byte[] b) {
        StringBuilder sb = new StringBuilder();
        for (byte x : b) {
            sb.append(String.format("%02x", x & 0xff));
        }
        return sb.toString();
    }
}
