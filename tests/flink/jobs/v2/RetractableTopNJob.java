import java.io.File;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.graph.StreamNode;
import org.apache.flink.table.api.bridge.java.StreamStatementSet;
import org.apache.flink.table.api.bridge.java.StreamTableEnvironment;
import org.apache.flink.types.Row;

/**
 * Flink SQL oracle of the Top-N over an updating input, which the planner runs as
 * RetractableTopNFunction (Rank with strategy RetractStrategy): its states are the ValueState
 * "sorted-map" (SortedMapSerializer: sort key -> how many input rows have it, in the order of
 * the Top-N's comparator) and the MapState "data-state" (sort key -> the input rows with it, in
 * arrival order).
 *
 * Input: SqlJob's rows i = 0..n-1 (--records, default 120: id, k = "k" + i % 6, v, name), no event
 * time. A GROUP BY k, name (COUNT(*) cnt, SUM(v) total) feeds two Top-Ns partitioned by k:
 * "rare" (ORDER BY cnt ASC, rn <= 2: COUNT rises, so an ascending order is not monotonic and
 * the planner cannot use its update-fast strategy; names share a count, so a sort key counts
 * up to 2 rows) and "top" (ORDER BY total DESC, cnt ASC, rn <= 2: a sort key of two fields in
 * mixed directions; SUM over negative and positive v is not monotonic either).
 *
 * The state both keep is derived from the final groups: every group's current row (k, name,
 * cnt, total) is in its sort key's list; a group's row joined that list with its last update
 * (each update retracts the row before it), so a list is in the order of the groups' last rows
 * in the input (the job runs at parallelism 1, see parallelism()). The order of rows by rank is the comparator's, ties in list order; the print
 * sinks (materialised) must show the first two of each k with their row numbers before the
 * savepoint is taken.
 *
 * Args: --uids true|false (table.exec.uid.generation ALWAYS or the default), --ttl DURATION
 * (table.exec.state.ttl), --records N, --backend. Savepoints only; no restore mode. plan.json in
 * the output dir is the COMPILE PLAN of the same statement set, with the job's node ids.
 */
public class RetractableTopNJob implements InternalStateOracle.Job {
    static final int RANK_END = 2;

    /** One Top-N: its sink, its ORDER BY, and the sort key fields in that order. */
    enum TopN {
        RARE("rare", "cnt ASC", new String[] {"cnt"}, new boolean[] {true}),
        TOP("top", "total DESC, cnt ASC", new String[] {"total", "cnt"}, new boolean[] {false, true});

        final String sink;
        final String orderBy;
        final String[] sortKey;
        final boolean[] ascending;

        TopN(String sink, String orderBy, String[] sortKey, boolean[] ascending) {
            this.sink = sink;
            this.orderBy = orderBy;
            this.sortKey = sortKey;
            this.ascending = ascending;
        }

        String sql() {
            return "INSERT INTO " + sink + "_out SELECT k, name, cnt, total, rn FROM (SELECT k, name, cnt, total, "
                    + "ROW_NUMBER() OVER (PARTITION BY k ORDER BY " + orderBy + ") AS rn FROM g) WHERE rn <= " + RANK_END;
        }

        /** The sort key of a group row [k, name, cnt, total]. */
        List<Object> sortKeyOf(List<Object> row) {
            List<Object> key = new ArrayList<>();
            for (String f : sortKey) {
                key.add(row.get(f.equals("cnt") ? 2 : 3));
            }
            return key;
        }

        Comparator<List<Object>> order() {
            return (a, b) -> {
                for (int i = 0; i < ascending.length; i++) {
                    int c = Long.compare((Long) a.get(i), (Long) b.get(i));
                    if (c != 0) {
                        return ascending[i] ? c : -c;
                    }
                }
                return 0;
            };
        }
    }

    public static void main(String[] args) {
        InternalStateOracle.run(new RetractableTopNJob(), args);
    }

    @Override
    public int maxParallelism() {
        return SqlJob.MAX_PARALLELISM;
    }

    /**
     * 1: the order of a sort key's rows in "data-state" is the order in which the Top-N received
     * their groups' updates; at a higher parallelism the updates of one k come from several
     * GroupAggregate subtasks (hashed by k and name) over as many channels, in an order timing decides.
     */
    @Override
    public int parallelism() {
        return 1;
    }

    @Override
    public void build(StreamExecutionEnvironment env, Driver.Params p) throws Exception {
        PrintCapture.install();
        StreamTableEnvironment tenv = StreamTableEnvironment.create(env);
        if (Boolean.parseBoolean(p.get("uids", "false"))) {
            tenv.getConfig().set("table.exec.uid.generation", "ALWAYS");
        }
        if (p.raw.containsKey("ttl")) {
            tenv.getConfig().set("table.exec.state.ttl", p.get("ttl", null));
        }
        List<Object[]> events = new ArrayList<>();
        for (long i = 0; i < SqlJob.records(p); i++) {
            events.add(new Object[] {i * SqlJob.STEP_MS, Row.of(i, SqlJob.key(i), SqlJob.value(i), SqlJob.name(i))});
        }
        TypeInformation<Row> eventType = Types.ROW_NAMED(new String[] {"id", "k", "v", "name"},
                Types.LONG, Types.STRING, Types.LONG, Types.STRING);
        DataStream<Row> ev = env.addSource(new SqlJob.RowSource(events, Long.MIN_VALUE, false, "events"),
                "events-source", eventType).setParallelism(1);
        tenv.createTemporaryView("ev", ev);
        tenv.createTemporaryView("g", tenv.sqlQuery(
                "SELECT k, name, COUNT(*) AS cnt, SUM(v) AS total FROM ev GROUP BY k, name"));
        StreamStatementSet set = tenv.createStatementSet();
        for (TopN t : TopN.values()) {
            tenv.executeSql("CREATE TABLE " + t.sink + "_out (k STRING, name STRING, cnt BIGINT, total BIGINT, "
                    + "rn BIGINT) WITH ('connector' = 'print', 'print-identifier' = '" + t.sink + "')");
            set.addInsertSql(t.sql());
        }
        SqlJob.resetNodeIds(tenv);
        Files.write(new File(p.out(), "plan.json").toPath(),
                set.compilePlan().asJsonString().getBytes(StandardCharsets.UTF_8));
        SqlJob.resetNodeIds(tenv);
        set.attachAsDataStream();
    }

    // ------------------------------------------------------------------ expected state and output

    /** k -> the groups' rows [k, name, cnt, total], each in the order of its last update. */
    static TreeMap<String, List<List<Object>>> groups(int n) {
        Map<List<String>, long[]> acc = new LinkedHashMap<>();
        for (long i = 0; i < n; i++) {
            List<String> group = Arrays.asList(SqlJob.key(i), SqlJob.name(i));
            long[] a = acc.remove(group);  // re-inserted: the map is in the order of the last updates
            a = a == null ? new long[2] : a;
            a[0] += 1;
            a[1] += SqlJob.value(i);
            acc.put(group, a);
        }
        TreeMap<String, List<List<Object>>> byKey = new TreeMap<>();
        for (Map.Entry<List<String>, long[]> e : acc.entrySet()) {
            String k = e.getKey().get(0);
            byKey.computeIfAbsent(k, x -> new ArrayList<>()).add(
                    Arrays.asList((Object) k, e.getKey().get(1), e.getValue()[0], e.getValue()[1]));
        }
        return byKey;
    }

    /** One k's state: sort key (in the comparator's order) -> the rows with it (in list order). */
    static TreeMap<List<Object>, List<List<Object>>> state(TopN t, List<List<Object>> rows) {
        TreeMap<List<Object>, List<List<Object>>> m = new TreeMap<>(t.order());
        for (List<Object> row : rows) {
            m.computeIfAbsent(t.sortKeyOf(row), x -> new ArrayList<>()).add(row);
        }
        return m;
    }

    /** The sinks' rows (materialised, as Row.toString): the first RANK_END rows of each k with their number. */
    static Map<String, List<String>> expectedOutput(int n) {
        Map<String, List<String>> out = new LinkedHashMap<>();
        for (TopN t : TopN.values()) {
            List<String> rows = new ArrayList<>();
            for (List<List<Object>> group : groups(n).values()) {
                long rn = 0;
                for (List<List<Object>> same : state(t, group).values()) {
                    for (List<Object> row : same) {
                        if (++rn <= RANK_END) {
                            rows.add("[" + row.get(0) + ", " + row.get(1) + ", " + row.get(2) + ", " + row.get(3)
                                    + ", " + rn + "]");
                        }
                    }
                }
            }
            rows.sort(null);
            out.put(t.sink, rows);
        }
        return out;
    }

    // ------------------------------------------------------------------ driver hooks

    @Override
    public String pending(Driver.Params p) {
        int n = SqlJob.records(p);
        if (Oracle.counter("events") < n) {
            return "the source emitted " + Oracle.counter("events") + "/" + n + " rows";
        }
        Map<String, List<String>> actual = PrintCapture.materialised();
        for (Map.Entry<String, List<String>> e : expectedOutput(n).entrySet()) {
            List<String> got = actual.getOrDefault(e.getKey(), new ArrayList<>());
            if (!got.equals(e.getValue())) {
                return "sink " + e.getKey() + " shows " + got + " but the input gives " + e.getValue();
            }
        }
        return null;
    }

    @Override
    public Map<String, Object> describe(StreamNode node, Driver.Params p) {
        String description = String.valueOf(node.getOperatorDescription());
        if (!node.getOperatorName().startsWith("Rank[")) {
            return null;
        }
        if (!description.contains("RetractStrategy")) {
            throw new IllegalStateException("the planner did not choose RetractableTopN: " + description);
        }
        TopN t = null;
        for (TopN candidate : TopN.values()) {
            if (description.contains("orderBy=[" + candidate.orderBy + "]")) {
                t = candidate;
            }
        }
        if (t == null) {
            throw new IllegalStateException("no Top-N of this job orders as " + description);
        }
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("kind", "retractable-rank");
        m.put("top_n", t.sink);
        m.put("state_names", Arrays.asList("data-state", "sorted-map"));
        m.put("key", "k");
        m.put("row_fields", Arrays.asList("k", "name", "cnt", "total"));
        m.put("sort_key", Arrays.asList(t.sortKey));
        m.put("note", "per k: sorted_map = [[sort key, rows with it]] in the comparator's order (ORDER BY "
                + t.orderBy + "); data_state = [[sort key, [row...]]], rows in arrival order of their last update");
        List<Object> entries = new ArrayList<>();
        for (Map.Entry<String, List<List<Object>>> e : groups(SqlJob.records(p)).entrySet()) {
            List<Object> sorted = new ArrayList<>();
            List<Object> data = new ArrayList<>();
            for (Map.Entry<List<Object>, List<List<Object>>> s : state(t, e.getValue()).entrySet()) {
                sorted.add(Arrays.asList(s.getKey(), (long) s.getValue().size()));
                data.add(Arrays.asList(s.getKey(), s.getValue()));
            }
            Map<String, Object> st = new LinkedHashMap<>();
            st.put("sorted_map", sorted);
            st.put("data_state", data);
            entries.add(Arrays.asList(e.getKey(), st));
        }
        m.put("expected", entries);
        return m;
    }

    @Override
    public void finish(Map<String, Object> dump, Driver.Params p) {
        dump.put("output", PrintCapture.materialised());
        dump.put("plan", "plan.json");
    }
}
