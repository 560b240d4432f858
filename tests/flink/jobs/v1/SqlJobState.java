// GENERATED from ../v2/SqlJobState.java by ../make_v1.py -- edit v2 and re-run make_v1.py.
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.Iterator;
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
        if (name.startsWith("GroupAggregate[") && description.contains("LISTAGG")) {
            m.put("kind", "group-aggregate-listagg");
            m.put("state_names", Arrays.asList("accState", "agg0$list", "agg0$retractList"));
            m.put("key", "k");
            m.put("note", "LISTAGG(id || ':' || rn) over the Top-N's changelog (ListAggWithRetractAggFunction): "
                    + "count = the input rows counted (+I/+U add one, -U/-D remove one), list = the ListView "
                    + "(in order), retract_list = the ListView of retractions that found nothing to remove");
            TopN top = TopN.replay(0, n);
            List<Object> entries = new ArrayList<>();
            for (Map.Entry<String, ListAgg> e : top.lists.entrySet()) {
                Map<String, Object> acc = new LinkedHashMap<>();
                acc.put("count", e.getValue().count);
                acc.put("list", e.getValue().list);
                acc.put("retract_list", e.getValue().retractList);
                acc.put("value", e.getValue().value());
                entries.add(Arrays.asList(e.getKey(), acc));
            }
            m.put("expected", entries);
        } else if (name.startsWith("Rank[")) {
            m.put("kind", "rank");
            m.put("state_names", Arrays.asList("data-state-with-append"));
            m.put("key", "k");
            m.put("row_fields", Arrays.asList("id", "k", "v"));
            m.put("sort_key", Arrays.asList("v"));
            m.put("note", "AppendOnlyTopN with row numbers: sort key (v) -> the rows [id, k, v] with that v; a row "
                    + "pushed out of the top 2 stays in the state while the loop that renumbered it reached it");
            TopN top = TopN.replay(0, n);
            List<Object> entries = new ArrayList<>();
            for (Map.Entry<String, TreeMap<Long, List<Object>>> e : top.buffers.entrySet()) {
                entries.add(Arrays.asList(e.getKey(), new ArrayList<>(e.getValue().values())));
            }
            m.put("expected", entries);
        } else if (name.startsWith("GroupAggregate[")) {
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

    // ------------------------------------------------------------------ Top-N and LISTAGG replay

    /**
     * The print sink's materialisation (as PrintCapture): after restart() a retraction of a row
     * printed before goes to retracted.
     */
    static final class Capture {
        final List<String> rows = new ArrayList<>();
        final List<String> retracted = new ArrayList<>();
        private boolean restarted;

        void restart() {
            rows.clear();
            restarted = true;
        }

        void apply(boolean add, String row) {
            if (add) {
                rows.add(row);
            } else if (!rows.remove(row)) {
                if (!restarted) {
                    throw new IllegalStateException("retraction without a row: " + row);
                }
                retracted.add(row);
            }
        }

        static List<String> sorted(List<String> l) {
            List<String> c = new ArrayList<>(l);
            Collections.sort(c);
            return c;
        }
    }

    /** LISTAGG with retraction: the record count, the list view and the retract list view. */
    static final class ListAgg {
        long count;
        final List<String> list = new ArrayList<>();
        final List<String> retractList = new ArrayList<>();

        String value() {
            return list.isEmpty() ? null : String.join(",", list);
        }
    }

    /**
     * Replays AppendOnlyTopNFunction with row numbers (ORDER BY v DESC, rank end 2; v has no
     * ties within a key) and the group aggregate of LISTAGG(id || ':' || rn) over its changelog.
     */
    static final class TopN {
        /** k -> v (descending) -> the row [id, k, v]: the operator's buffer, mirrored by its state. */
        final TreeMap<String, TreeMap<Long, List<Object>>> buffers = new TreeMap<>();
        final TreeMap<String, ListAgg> lists = new TreeMap<>();
        final Capture rank = new Capture();
        final Capture listagg = new Capture();

        static TopN replay(long from, long to) {
            TopN t = new TopN();
            t.run(from, to);
            return t;
        }

        void restart() {
            rank.restart();
            listagg.restart();
        }

        void run(long from, long to) {
            for (long i = from; i < to; i++) {
                add(i);
            }
        }

        private void add(long i) {
            String k = SqlJob.key(i);
            long v = SqlJob.value(i);
            TreeMap<Long, List<Object>> buffer = buffers.computeIfAbsent(k, x -> new TreeMap<>(Collections.reverseOrder()));
            int size = buffer.size();
            if (!(buffer.isEmpty() || v > buffer.lastKey() || size < SqlJob.TOP)) {
                return;
            }
            if (buffer.put(v, Arrays.asList((Object) i, k, v)) != null) {
                throw new IllegalStateException("v ties within key " + k);
            }
            Iterator<Map.Entry<Long, List<Object>>> it = buffer.entrySet().iterator();
            long rankNow = 0;
            boolean found = false;
            List<Object> current = null;
            while (it.hasNext() && rankNow <= SqlJob.TOP) {
                Map.Entry<Long, List<Object>> e = it.next();
                if (!found && e.getKey() == v) {
                    rankNow += 1;
                    current = e.getValue();
                    found = true;
                } else if (found) {
                    emit(false, e.getValue(), rankNow);
                    emit(true, current, rankNow);
                    current = e.getValue();
                    rankNow += 1;
                } else {
                    rankNow += 1;
                }
            }
            if (rankNow <= SqlJob.TOP) {
                emit(true, current, rankNow);
            }
            while (it.hasNext()) {
                it.next();
                it.remove();
            }
        }

        private void emit(boolean add, List<Object> row, long rn) {
            String k = (String) row.get(1);
            rank.apply(add, "[" + k + ", " + row.get(0) + ", " + row.get(2) + ", " + rn + "]");
            String element = row.get(0) + ":" + rn;
            ListAgg acc = lists.get(k);
            boolean first = acc == null;
            if (first) {
                if (!add) {
                    return;
                }
                acc = new ListAgg();
            }
            String before = acc.value();
            if (add) {
                acc.count++;
                acc.list.add(element);
            } else {
                acc.count--;
                if (!acc.list.remove(element)) {
                    acc.retractList.add(element);
                }
            }
            if (acc.count != 0) {
                String after = acc.value();
                if (first) {
                    listagg.apply(true, "[" + k + ", " + after + "]");
                } else if (String.valueOf(before).equals(String.valueOf(after))) {
                    throw new IllegalStateException("LISTAGG unchanged (the output would depend on state TTL)");
                } else {
                    listagg.apply(false, "[" + k + ", " + before + "]");
                    listagg.apply(true, "[" + k + ", " + after + "]");
                }
                lists.put(k, acc);
            } else {
                if (!first) {
                    listagg.apply(false, "[" + k + ", " + before + "]");
                }
                lists.remove(k);
            }
        }
    }
}
