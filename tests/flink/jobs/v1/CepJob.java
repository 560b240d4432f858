// GENERATED from ../v2/CepJob.java by ../make_v1.py -- edit v2 and re-run make_v1.py.
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.java.tuple.Tuple3;
import org.apache.flink.cep.CEP;
import org.apache.flink.cep.functions.PatternProcessFunction;
import org.apache.flink.cep.pattern.Pattern;
import org.apache.flink.cep.pattern.conditions.SimpleCondition;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.sink.DiscardingSink;
import org.apache.flink.streaming.api.functions.source.RichSourceFunction;
import org.apache.flink.streaming.api.graph.StreamNode;
import org.apache.flink.util.Collector;

/**
 * CEP oracle: CEP.pattern(a next b next c, within 1 h, processing time) over a stream of known
 * events Tuple3(key, type, seq) keyed by key, at parallelism 2 (uid "cep", max parallelism 128).
 * Each key has a scripted sequence of event types (SCRIPT); the source emits them round-robin
 * over the keys (seq = position in the emitted stream), then idles. Some keys end with a pending
 * partial match ([a] or [a, b]), some completed matches, some nothing.
 *
 * The completed matches are collected and must equal the ones derived from the input before
 * the savepoint is taken. dump.json's "cep" operator lists, per key, the pending partial matches
 * (the events each one has buffered, in pattern order) and the completed matches.
 */
public class CepJob implements InternalStateOracle.Job {
    static final int MAX_PARALLELISM = 128;
    static final int P = 2;
    static final String[] PATTERN = {"a", "b", "c"};
    /** key -> event types in order. */
    static final String[][] SCRIPT = {
        {"c0", "a b c a b"},      // one match, then pending [a, b]
        {"c1", "a"},              // pending [a]
        {"c2", "a c"},            // broken by strict contiguity: nothing pending
        {"c3", "a b c a b c"},    // two matches, nothing pending
        {"c4", "b c x"},          // nothing
        {"c5", "a a"},            // the first a fails at the second; pending [a(2nd)]
        {"c6", "x a b x a b"},    // pending [a, b] (the second one)
        {"c7", "a b c"},          // one match
    };
    static final List<List<Object>> MATCHES = new ArrayList<>();

    public static void main(String[] args) {
        InternalStateOracle.run(new CepJob(), args);
    }

    /** The emitted events, in order: Tuple3(key, type, seq). */
    static List<Tuple3<String, String, Long>> events() {
        List<List<String>> types = new ArrayList<>();
        for (String[] s : SCRIPT) {
            types.add(new ArrayList<>(Arrays.asList(s[1].split(" "))));
        }
        List<Tuple3<String, String, Long>> out = new ArrayList<>();
        boolean more = true;
        for (int round = 0; more; round++) {
            more = false;
            for (int k = 0; k < SCRIPT.length; k++) {
                if (round < types.get(k).size()) {
                    out.add(Tuple3.of(SCRIPT[k][0], types.get(k).get(round), (long) out.size()));
                    more = true;
                }
            }
        }
        return out;
    }

    static List<Object> event(Tuple3<String, String, Long> e) {
        return Arrays.asList((Object) e.f0, e.f1, e.f2);
    }

    /**
     * Runs the pattern (strict contiguity) over each key's events: key -> [pending partial
     * matches, completed matches], each a list of events.
     */
    static TreeMap<String, List<List<List<Object>>>[]> simulate() {
        TreeMap<String, List<List<List<Object>>>[]> out = new TreeMap<>();
        for (Tuple3<String, String, Long> e : events()) {
            @SuppressWarnings("unchecked")
            List<List<List<Object>>>[] st = out.computeIfAbsent(e.f0, k -> new List[] {new ArrayList<>(), new ArrayList<>()});
            List<List<List<Object>>> next = new ArrayList<>();
            for (List<List<Object>> partial : st[0]) {
                if (PATTERN[partial.size()].equals(e.f1)) {
                    List<List<Object>> extended = new ArrayList<>(partial);
                    extended.add(event(e));
                    if (extended.size() == PATTERN.length) {
                        st[1].add(extended);
                    } else {
                        next.add(extended);
                    }
                }
            }
            if (PATTERN[0].equals(e.f1)) {
                List<List<Object>> started = new ArrayList<>();
                started.add(event(e));
                next.add(started);
            }
            st[0] = next;
        }
        return out;
    }

    static List<String> expectedMatches() {
        List<String> l = new ArrayList<>();
        for (List<List<List<Object>>>[] st : simulate().values()) {
            for (List<List<Object>> m : st[1]) {
                l.add(Json.write(m));
            }
        }
        l.sort(null);
        return l;
    }

    static synchronized List<String> matches() {
        List<String> l = new ArrayList<>();
        for (List<Object> m : MATCHES) {
            l.add(Json.write(m));
        }
        l.sort(null);
        return l;
    }

    @Override
    public int maxParallelism() {
        return MAX_PARALLELISM;
    }

    @Override
    public int parallelism() {
        return P;
    }

    @Override
    public void build(StreamExecutionEnvironment env, Oracle.Params p) {
        DataStream<Tuple3<String, String, Long>> src = env.addSource(new EventSource(), "cep-source",
                Types.TUPLE(Types.STRING, Types.STRING, Types.LONG)).uid("cep-source").setParallelism(1);
        Pattern<Tuple3<String, String, Long>, ?> pattern = Pattern.<Tuple3<String, String, Long>>begin("a")
                .where(SimpleCondition.of(e -> e.f1.equals("a")))
                .next("b").where(SimpleCondition.of(e -> e.f1.equals("b")))
                .next("c").where(SimpleCondition.of(e -> e.f1.equals("c")))
                .within(Duration.ofHours(1));
        CEP.pattern(src.keyBy(e -> e.f0, Types.STRING), pattern).inProcessingTime()
                .process(new Collect(), Types.STRING).uid("cep").name("cep")
                .addSink(new DiscardingSink<>()).uid("cep-sink").name("cep-sink");
    }

    /** Records each completed match (as a list of events in pattern order). */
    public static class Collect extends PatternProcessFunction<Tuple3<String, String, Long>, String> {
        @Override
        public void processMatch(Map<String, List<Tuple3<String, String, Long>>> match, Context ctx, Collector<String> out) {
            List<Object> m = new ArrayList<>();
            for (String name : PATTERN) {
                for (Tuple3<String, String, Long> e : match.get(name)) {
                    m.add(event(e));
                }
            }
            synchronized (CepJob.class) {
                MATCHES.add(m);
            }
            out.collect(Json.write(m));
        }
    }

    @Override
    public String pending(Oracle.Params p) {
        int n = events().size();
        if (Oracle.counter("cep-events") < n) {
            return "source emitted " + Oracle.counter("cep-events") + "/" + n;
        }
        List<String> got = matches();
        List<String> want = expectedMatches();
        return got.equals(want) ? null : "matches " + got + " but the input gives " + want;
    }

    @Override
    public Map<String, Object> describe(StreamNode node, Oracle.Params p) {
        if (!"cep".equals(node.getTransformationUID())) {
            return null;
        }
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("kind", "cep");
        m.put("pattern", "a next b next c within 1 h (processing time, no skip)");
        m.put("event_fields", Arrays.asList("key", "type", "seq"));
        // the names Flink 2.3's CepOperator registers (read once off a savepoint's meta data)
        m.put("state_names", Arrays.asList("nfaStateName", "eventQueuesStateName", "sharedBuffer-events",
                "sharedBuffer-events-count", "sharedBuffer-entries-with-lockable-edges"));
        List<Object> keys = new ArrayList<>();
        for (Map.Entry<String, List<List<List<Object>>>[]> e : simulate().entrySet()) {
            Map<String, Object> k = new LinkedHashMap<>();
            k.put("key", e.getKey());
            k.put("pending", e.getValue()[0]);
            k.put("completed", e.getValue()[1]);
            keys.add(k);
        }
        m.put("expected", keys);
        return m;
    }

    @Override
    public void finish(Map<String, Object> dump, Oracle.Params p) {
        List<Object> events = new ArrayList<>();
        for (Tuple3<String, String, Long> e : events()) {
            events.add(event(e));
        }
        dump.put("input", events);
        dump.put("matches", MATCHES);
    }

    /** Emits events() in order, then idles until stopped. */
    public static class EventSource extends RichSourceFunction<Tuple3<String, String, Long>> {
        private volatile boolean running = true;

        @Override
        public void run(SourceContext<Tuple3<String, String, Long>> ctx) throws Exception {
            for (Tuple3<String, String, Long> e : events()) {
                synchronized (ctx.getCheckpointLock()) {
                    ctx.collect(e);
                    Oracle.count("cep-events");
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
    }
}
