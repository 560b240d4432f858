// GENERATED from ../v2/SqlJobState.java by ../make_v1.py -- edit v2 and re-run make_v1.py.
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

/**
 * SqlJob's expected state per stateful SQL operator, derived from the input rows. The operator
 * kind comes from the operator name in the stream graph ("GroupAggregate[4]", ...); the state
 * names are those Flink 2.3's operators of that kind register (read once off a savepoint's
 * keyed-state meta data and written down here; the job cannot list them at run time).
 */
public final class SqlJobState {
    private SqlJobState() {}

    static Map<String, Object> describe(String name, String description, int n) {
        Map<String, Object> m = new LinkedHashMap<>();
        if (name.startsWith("GroupAggregate[")) {
            m.put("kind", "group-aggregate");
            m.put("state_names", Arrays.asList("accState", "distinctAcc_0", "distinctAcc_0_null_state"));
            m.put("key", "k");
            List<Object> entries = new ArrayList<>();
            for (Map.Entry<String, Object[]> e : SqlJob.groups(n).entrySet()) {
                Object[] a = e.getValue();
                @SuppressWarnings("unchecked")
                TreeMap<String, Long> names = (TreeMap<String, Long>) a[3];
                Map<String, Object> acc = new LinkedHashMap<>();
                acc.put("count", a[0]);
                acc.put("sum", a[1]);
                acc.put("max", a[2]);
                acc.put("count_distinct", (long) names.size());
                List<Object> distinct = new ArrayList<>();
                for (Map.Entry<String, Long> d : names.entrySet()) {
                    distinct.add(Arrays.asList(d.getKey(), d.getValue()));
                }
                acc.put("distinct", distinct);
                entries.add(Arrays.asList(e.getKey(), acc));
            }
            m.put("expected", entries);
        } else if (name.startsWith("Deduplicate[")) {
            // the description reads "Deduplicate(keep=[FirstRow], key=[k], order=[PROCTIME])"
            boolean first = description.contains("FirstRow");
            if (!first && !description.contains("LastRow")) {
                throw new IllegalStateException("cannot tell keep-first from keep-last: " + description);
            }
            m.put("kind", first ? "deduplicate-keep-first" : "deduplicate-keep-last");
            m.put("state_names", Arrays.asList("deduplicate-state"));
            m.put("key", "k");
            m.put("row_fields", Arrays.asList("id", "k", "v"));
            if (!first) {
                m.put("note", "the stored row also holds proctime (4th field, wall clock) after id, k, v");
            } else {
                m.put("note", "keep-first stores only a flag (true) per key; expected shows the kept row");
            }
            List<Object> entries = new ArrayList<>();
            for (Map.Entry<String, List<Object>> e : SqlJob.dedup(n, first).entrySet()) {
                entries.add(Arrays.asList(e.getKey(), e.getValue()));
            }
            m.put("expected", entries);
        } else if (name.startsWith("Join[")) {
            m.put("kind", "join");
            m.put("state_names", Arrays.asList("left-records", "right-records"));
            m.put("key", "k");
            m.put("left_fields", Arrays.asList("id", "k", "v"));
            m.put("right_fields", Arrays.asList("k", "label"));
            Map<String, Object> sides = new LinkedHashMap<>();
            sides.put("left", side(SqlJob.joinSide(n, true)));
            sides.put("right", side(SqlJob.joinSide(n, false)));
            m.put("expected", sides);
        } else if (name.startsWith("GlobalWindowAggregate[") || name.startsWith("WindowAggregate[")) {
            m.put("kind", "window-aggregate");
            m.put("state_names", Arrays.asList("window-aggs"));
            m.put("key", "k");
            m.put("accumulator_fields", Arrays.asList("count", "sum", "max"));
            m.put("note", "open windows only (fired ones were purged); entries [[k, window_start_ms, window_end_ms],"
                    + " [count, sum, max]]; the state namespace is window_end_ms");
            List<Object> entries = new ArrayList<>();
            for (Map.Entry<List<Object>, long[]> e : SqlJob.windows(n).entrySet()) {
                if (!SqlJob.fired((Long) e.getKey().get(2))) {
                    long[] a = e.getValue();
                    entries.add(Arrays.asList(e.getKey(), Arrays.asList(a[0], a[1], a[2])));
                }
            }
            m.put("expected", entries);
        } else {
            return null;
        }
        return m;
    }

    private static List<Object> side(TreeMap<String, TreeMap<String, Object[]>> side) {
        List<Object> out = new ArrayList<>();
        for (Map.Entry<String, TreeMap<String, Object[]>> e : side.entrySet()) {
            List<Object> rows = new ArrayList<>();
            for (Object[] r : e.getValue().values()) {
                rows.add(Arrays.asList(r[0], r[1]));
            }
            out.add(Arrays.asList(e.getKey(), rows));
        }
        return out;
    }
}
