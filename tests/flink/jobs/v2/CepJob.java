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
import org.apache.flink.streaming.api.functions.sink.v2.DiscardingSink;
import org.apache.flink.streaming.api.functions.source.legacy.RichSourceFunction;
import org.apache.flink.streaming.api.graph.StreamNode;
import org.apache.flink.util.Collector;

/**
 * CEP oracle: CEP.pattern(a next b next c, within 3650 days, processing time) over a stream of known
 * events Tuple3(key, type, seq) keyed by key, at parallelism 2 (uid "cep", max parallelism 128).
 * Each key has a scripted sequence of event types (SCRIPT); the source emits them round-robin
 * over the keys (seq = position in the emitted stream), then idles. Some keys end with a pending
 * partial match ([a] or [a, b]), some completed matches, some nothing.
 *
 * The completed matches are collected and must equal the ones derived from the input before
 * the savepoint is taken. dump.json's "cep" operator lists, per key, the pending partial matches
 * (the events each one has buffered, in pattern order) and the completed matches.
 *
 * Restore mode (--restore SAVEPOINT): the source emits AGAIN for every key (round-robin, seq
 * continuing) and finishes; dump.json's "matches" are the matches completed after the restore
 * and "expected_matches" those the pattern gives when the savepoint holds the first run's
 * partial matches unchanged (c0 and c6 complete [a, b] from before the savepoint). The window
 * is long because processing time runs on from the savepoint: a cached savepoint restored much
 * later must still hold unexpired partial matches.
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
    /** Event types every key gets after a restore. */
    static final String AGAIN = "c a b c";
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
        return roundRobin(types, 0);
    }

    /** Restore mode: AGAIN for every key, seq continuing after events(). */
    static List<Tuple3<String, String, Long>> eventsAfterRestore() {
        List<List<String>> types = new ArrayList<>();
        for (int k = 0; k < SCRIPT.length; k++) {
            types.add(new ArrayList<>(Arrays.asList(AGAIN.split(" "))));
        }
        return roundRobin(types, events().size());
    }

    private static List<Tuple3<String, String, Long>> roundRobin(List<List<String>> types, long firstSeq) {
        List<Tuple3<String, String, Long>> out = new ArrayList<>();
        boolean more = true;
        for (int round = 0; more; round++) {
            more = false;
            for (int k = 0; k < SCRIPT.length; k++) {
                if (round < types.get(k).size()) {
                    out.add(Tuple3.of(SCRIPT[k][0], types.get(k).get(round), firstSeq + out.size()));
                    more = true;
                }
            }
        }
        return out;
    }

    static List<Tuple3<String, String, Long>> emitted(Driver.Params p) {
        return InternalStateOracle.restoring(p) ? eventsAfterRestore() : events();
    }

    static List<Object> event(Tuple3<String, String, Long> e) {
        return Arrays.asList((Object) e.f0, e.f1, e.f2);
    }

    /**
     * Runs the pattern (strict contiguity) over each key's events: key -> [pending partial
     * matches, completed matches], each a list of events.
     */
    static TreeMap<String, List<List<List<Object>>>[]> simulate() {
        return simulate(events());
    }

    static TreeMap<String, List<List<List<Object>>>[]> simulate(List<Tuple3<String, String, Long>> events) {
        TreeMap<String, List<List<List<Object>>>[]> out = new TreeMap<>();
        for (Tuple3<String, String, Long> e : events) {
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
        return completed(simulate());
    }

    /** Restore mode: the matches completed after the restore of an unchanged savepoint, by their JSON. */
    static List<List<List<Object>>> expectedMatchesAfterRestore() {
        List<Tuple3<String, String, Long>> all = new ArrayList<>(events());
        all.addAll(eventsAfterRestore());
        List<String> before = expectedMatches();
        TreeMap<String, List<List<Object>>> after = new TreeMap<>();
        for (List<List<List<Object>>>[] st : simulate(all).values()) {
            for (List<List<Object>> m : st[1]) {
                if (!before.contains(Json.write(m))) {
                    after.put(Json.write(m), m);
                }
            }
        }
        return new ArrayList<>(after.values());
    }

    private static List<String> completed(TreeMap<String, List<List<List<Object>>>[]> simulated) {
        List<String> l = new ArrayList<>();
        for (List<List<List<Object>>>[] st : simulated.values()) {
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
    public void build(StreamExecutionEnvironment env, Driver.Params p) {
        DataStream<Tuple3<String, String, Long>> src = env.addSource(
                new EventSource(emitted(p), InternalStateOracle.restoring(p)), "cep-source",
                Types.TUPLE(Types.STRING, Types.STRING, Types.LONG)).uid("cep-source").setParallelism(1);
        Pattern<Tuple3<String, String, Long>, ?> pattern = Pattern.<Tuple3<String, String, Long>>begin("a")
                .where(SimpleCondition.of(e -> e.f1.equals("a")))
                .next("b").where(SimpleCondition.of(e -> e.f1.equals("b")))
                .next("c").where(SimpleCondition.of(e -> e.f1.equals("c")))
                .within(Duration.ofDays(3650));
        CEP.pattern(src.keyBy(e -> e.f0, Types.STRING), pattern).inProcessingTime()
                .process(new Collect(), Types.STRING).uid("cep").name("cep")
                .sinkTo(new DiscardingSink<>()).uid("cep-sink").name("cep-sink");
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
    public boolean restorable() {
        return true;
    }

    @Override
    public String pending(Driver.Params p) {
        int n = emitted(p).size();
        if (Oracle.counter("cep-events") < n) {
            return "source emitted " + Oracle.counter("cep-events") + "/" + n;
        }
        if (InternalStateOracle.restoring(p)) {
            return null; // the state restored may have been changed: the matches are reported, not checked
        }
        List<String> got = matches();
        List<String> want = expectedMatches();
        return got.equals(want) ? null : "matches " + got + " but the input gives " + want;
    }

    @Override
    public Map<String, Object> describe(StreamNode node, Driver.Params p) {
        if (!"cep".equals(node.getTransformationUID())) {
            return null;
        }
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("kind", "cep");
        m.put("pattern", "a next b next c within 3650 days (processing time, no skip)");
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
    public void finish(Map<String, Object> dump, Driver.Params p) {
        List<Object> events = new ArrayList<>();
        for (Tuple3<String, String, Long> e : emitted(p)) {
            events.add(event(e));
        }
        dump.put("input", events);
        dump.put("matches", MATCHES);
        if (InternalStateOracle.restoring(p)) {
            dump.put("expected_matches", expectedMatchesAfterRestore());
        }
    }

    /** Emits its events in order, then idles until stopped (or, with finish, ends). */
    public static class EventSource extends RichSourceFunction<Tuple3<String, String, Long>> {
        private final List<Tuple3<String, String, Long>> events;
        private final boolean finish;
        private volatile boolean running = true;

        EventSource(List<Tuple3<String, String, Long>> events, boolean finish) {
            this.events = new ArrayList<>(events);
            this.finish = finish;
        }

        @Override
        public void run(SourceContext<Tuple3<String, String, Long>> ctx) throws Exception {
            for (Tuple3<String, String, Long> e : events) {
                synchronized (ctx.getCheckpointLock()) {
                    ctx.collect(e);
                    Oracle.count("cep-events");
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
