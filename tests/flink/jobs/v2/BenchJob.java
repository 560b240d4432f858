import java.io.File;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.state.CheckpointListener;
import org.apache.flink.api.common.state.ListState;
import org.apache.flink.api.common.state.ListStateDescriptor;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.core.execution.JobClient;
import org.apache.flink.core.execution.SavepointFormatType;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.KeyedProcessFunction;
import org.apache.flink.streaming.api.functions.sink.v2.DiscardingSink;
import org.apache.flink.streaming.api.functions.source.legacy.RichParallelSourceFunction;
import org.apache.flink.util.Collector;

/**
 * Benchmark job for bench/read_keyed.py: keyed state of N keys "key-i" (String key,
 * ValueState<Long> count, ListState<String> recent with 3 elements), parallelism 2, max parallelism 128
 * (--max-parallelism M: M; fewer key groups hold more keys each).
 *
 *   generate --records N --out DIR   build the state, stop with a canonical savepoint into DIR
 *            [--backend rocksdb]     the RocksDB backend (default: hashmap)
 *            [--snapshot native]     stop with a NATIVE-format savepoint instead
 *            [--snapshot checkpoint] incremental checkpoints every --interval (default 2 s), kept on
 *                                    cancellation: wait for the second checkpoint to complete on every
 *                                    subtask after the last record was processed (so it started after
 *                                    it), cancel, and report that checkpoint
 *   restore  --savepoint PATH        start from PATH; report the time from job submission until
 *                                    every subtask has restored its state and opened its function
 * Prints one JSON line to stdout.
 */
public class BenchJob {
    static final int P = 2;
    static final AtomicLong PROCESSED = new AtomicLong();
    static final AtomicInteger OPENED = new AtomicInteger();
    static volatile long records;
    static volatile boolean emit;
    /** the last checkpoint each subtask heard complete */
    static final Map<Integer, Long> COMPLETED = new ConcurrentHashMap<>();

    public static void main(String[] args) throws Exception {
        Map<String, String> a = new HashMap<>();
        String mode = args[0];
        for (int i = 1; i + 1 < args.length; i += 2) a.put(args[i].replaceFirst("^--", ""), args[i + 1]);
        Configuration conf = new Configuration();
        File work = new File(a.getOrDefault("out", a.getOrDefault("work", System.getProperty("java.io.tmpdir"))));
        Map<String, String> m = new HashMap<>();
        String snapshot = a.getOrDefault("snapshot", "canonical");
        m.put("state.backend.type", a.getOrDefault("backend", "hashmap"));
        if (snapshot.equals("checkpoint")) {
            m.put("execution.checkpointing.incremental", "true");
            m.put("execution.checkpointing.interval", a.getOrDefault("interval", "2 s"));
            m.put("execution.checkpointing.externalized-checkpoint-retention", "RETAIN_ON_CANCELLATION");
        }
        m.put("execution.checkpointing.storage", "filesystem");
        m.put("execution.checkpointing.dir", new File(work, "checkpoints").toURI().toString());
        m.put("restart-strategy.type", "none");
        m.put("taskmanager.memory.process.size", a.getOrDefault("tm-memory", "6g"));
        if (mode.equals("restore")) {
            m.put("execution.state-recovery.path", a.get("savepoint"));
            m.put("execution.state-recovery.ignore-unclaimed-state", "false");
        }
        conf = Configuration.fromMap(m);
        records = Long.parseLong(a.getOrDefault("records", "0"));
        emit = mode.equals("generate");
        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment(conf);
        env.setParallelism(P);
        env.setMaxParallelism(Integer.parseInt(a.getOrDefault("max-parallelism", "128")));
        env.addSource(new Source()).uid("bench-source")
            .keyBy(s -> s, Types.STRING)
            .process(new Fn()).uid("bench-keyed")
            .sinkTo(new DiscardingSink<>()).uid("bench-sink");
        long t0 = System.nanoTime();
        JobClient client = env.executeAsync("bench-" + mode);
        if (mode.equals("generate")) {
            while (PROCESSED.get() < records) Thread.sleep(50);
            long t1 = System.nanoTime();
            String path;
            if (snapshot.equals("checkpoint")) {
                long seen = COMPLETED.values().stream().mapToLong(Long::longValue).max().orElse(0);
                while (COMPLETED.size() < P || COMPLETED.values().stream().anyMatch(c -> c < seen + 2)) Thread.sleep(50);
                long id = COMPLETED.values().stream().mapToLong(Long::longValue).min().getAsLong();
                client.cancel().get();
                path = new File(work, "checkpoints/" + client.getJobID() + "/chk-" + id).toURI().toString();
            } else {
                path = client.stopWithSavepoint(false, new File(work, "savepoint").toURI().toString(),
                                                snapshot.equals("native") ? SavepointFormatType.NATIVE
                                                                          : SavepointFormatType.CANONICAL).get();
            }
            long t2 = System.nanoTime();
            System.out.println("{\"savepoint\": \"" + path + "\", \"process_s\": " + (t1 - t0) / 1e9
                               + ", \"savepoint_s\": " + (t2 - t1) / 1e9 + "}");
        } else {
            while (OPENED.get() < P) Thread.sleep(5);
            long t1 = System.nanoTime();
            System.out.println("{\"restore_s\": " + (t1 - t0) / 1e9 + "}");
            client.cancel().get();
        }
        System.out.flush();
        System.exit(0);
    }

    static class Source extends RichParallelSourceFunction<String> {
        volatile boolean running = true;

        @Override
        public void run(SourceContext<String> ctx) throws Exception {
            int idx = getRuntimeContext().getTaskInfo().getIndexOfThisSubtask();
            int n = getRuntimeContext().getTaskInfo().getNumberOfParallelSubtasks();
            if (emit) {
                for (long i = idx; i < records && running; i += n) {
                    synchronized (ctx.getCheckpointLock()) {
                        ctx.collect("key-" + i);
                    }
                }
            }
            while (running) Thread.sleep(20);
        }

        @Override
        public void cancel() {
            running = false;
        }
    }

    static class Fn extends KeyedProcessFunction<String, String, String> implements CheckpointListener {
        transient ValueState<Long> count;
        transient ListState<String> recent;

        @Override
        public void open(OpenContext ctx) {
            count = getRuntimeContext().getState(new ValueStateDescriptor<>("count", Types.LONG));
            recent = getRuntimeContext().getListState(new ListStateDescriptor<>("recent", Types.STRING));
            OPENED.incrementAndGet();
        }

        @Override
        public void processElement(String key, Context ctx, Collector<String> out) throws Exception {
            long i = Long.parseLong(key.substring(4));
            count.update(i);
            recent.add("a" + i);
            recent.add("b" + i);
            recent.add("c" + i);
            PROCESSED.incrementAndGet();
        }

        @Override
        public void notifyCheckpointComplete(long checkpointId) {
            COMPLETED.merge(getRuntimeContext().getTaskInfo().getIndexOfThisSubtask(), checkpointId, Math::max);
        }
    }
}
