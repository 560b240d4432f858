import java.lang.reflect.Field;
import java.lang.reflect.Modifier;
import java.math.BigDecimal;
import java.math.BigInteger;
import java.time.Instant;
import java.time.LocalDate;
import java.time.LocalDateTime;
import java.time.LocalTime;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.Comparator;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.TreeMap;

import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.state.CheckpointListener;
import org.apache.flink.api.common.state.ListState;
import org.apache.flink.api.common.state.ListStateDescriptor;
import org.apache.flink.api.common.state.MapState;
import org.apache.flink.api.common.state.MapStateDescriptor;
import org.apache.flink.api.common.state.StateDescriptor;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.common.typeutils.TypeSerializer;
import org.apache.flink.api.common.typeutils.base.LongSerializer;
import org.apache.flink.api.common.typeutils.base.StringSerializer;
import org.apache.flink.api.java.tuple.Tuple;
import org.apache.flink.api.java.tuple.Tuple2;
import org.apache.flink.api.java.tuple.Tuple3;
import org.apache.flink.api.java.typeutils.GenericTypeInfo;
import org.apache.flink.api.java.typeutils.PojoTypeInfo;
import org.apache.flink.api.java.typeutils.runtime.NullableSerializer;
import org.apache.flink.api.java.typeutils.runtime.TupleSerializer;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.ExecutionOptions;
import org.apache.flink.runtime.state.FunctionInitializationContext;
import org.apache.flink.runtime.state.FunctionSnapshotContext;
import org.apache.flink.streaming.api.TimeDomain;
import org.apache.flink.streaming.api.checkpoint.CheckpointedFunction;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.KeyedProcessFunction;
import org.apache.flink.streaming.api.functions.ProcessFunction;
import org.apache.flink.streaming.api.functions.sink.v2.DiscardingSink;
import org.apache.flink.streaming.api.functions.source.legacy.RichSourceFunction;
import org.apache.flink.types.Either;
import org.apache.flink.types.Row;
import org.apache.flink.util.Collector;

/**
 * Type-coverage oracle: keyed and operator state whose keys and values cover the Java / Flink
 * types a savepoint reader has to decode.
 *
 * The source emits i = 0..KEYS-1 (no timestamps, no watermarks) and then idles. Operators:
 *   types-string-key  String keys key-0..key-9999, one keyed state per value type (v_*), a list
 *                     state (l_tuples) and two map states (m_pojos, m_long_keys); every state is
 *                     absent for some keys, keys key-499, key-999, ... hold no state at all.
 *   types-long-key    Long keys: ValueState<String> label, ListState<Long> history, event timers
 *   types-int-key     Integer keys: MapState<String,Integer> counts
 *   types-tuple-key   Tuple2<String,Integer> keys: ValueState<Long> total, processing timers (2100)
 *   types-pojo-key    PojoKey keys: ValueState<String> label
 *   types-ops         operator ListState<MyPojo> pojos (split) and ListState<LocalDate> dates (union)
 *
 * dump.json encodes values as documented in common/Json.java plus (done here, by {@link Enc}):
 * POJO -> object of its fields, Row -> array, enum -> constant name, Either -> {"left": v} /
 * {"right": v}, BigDecimal -> toPlainString(), BigInteger -> decimal string, LocalDate -> epoch
 * day, LocalTime -> nano of day, LocalDateTime -> [epoch day, nano of day], Instant -> [epoch
 * second, nano], java.sql.Date/Time -> getTime(), java.sql.Timestamp -> [getTime(), getNanos()],
 * Float -> the double it widens to, int[]/long[]/String[] -> array, Map -> sorted [k, v] pairs.
 * Kryo values are not dumped: their state entry says "opaque": true and every value is null.
 *
 * Verify mode (--restore SNAPSHOT_DIR): the source emits 0..KEYS-1 again and finishes; every
 * function reads (and never writes) all state of each key it gets and records what it read, the
 * final watermark fires the restored event-time timers (recorded by onTimer), and types-ops
 * records the lists it restored. A restored Kryo value is recorded as null when it equals the
 * value written (toString), as its text otherwise.
 *
 * Args: --backend hashmap|rocksdb --snapshot savepoint|checkpoint --out DIR [--compression]
 *       [--no-kryo] [--restore SNAPSHOT_DIR]
 *   --compression  snapshot compression (execution.checkpointing.snapshot-compression)
 *   --no-kryo      leave out v_kryo (heap checkpoints cannot be parsed past Kryo bytes without Kryo)
 */
public class TypesJob implements Oracle.JobDef {
    static final int MAX_PARALLELISM = 128;
    static final int P = 3;
    static final int KEYS = 10_000;
    static final int LONG_KEYS = 600;
    static final int INT_KEYS = 400;
    static final int TUPLE_KEYS = 300;
    static final int POJO_KEYS = 200;
    static final int OPS_RECORDS = 60;
    static final long EVENT_TIMER_BASE = 1_000_000L;
    static final long PROC_TIMER_BASE = 4_102_444_800_000L; // 2100-01-01

    public static void main(String[] args) {
        Oracle.run(new TypesJob(), args);
    }

    @Override
    public int maxParallelism() {
        return MAX_PARALLELISM;
    }

    @Override
    public LinkedHashMap<String, Integer> operators(Driver.Params p) {
        LinkedHashMap<String, Integer> m = new LinkedHashMap<>();
        for (String uid : new String[] {"types-string-key", "types-long-key", "types-int-key", "types-tuple-key",
                "types-pojo-key", "types-ops"}) {
            m.put(uid, P);
        }
        return m;
    }

    @Override
    public Map<String, Long> expectedCounts(Driver.Params p) {
        Map<String, Long> m = new LinkedHashMap<>();
        if (Oracle.restoring()) {
            return m; // the sources finish; the driver waits for the job to finish
        }
        m.put("src", (long) KEYS);
        m.put("types-string-key", (long) KEYS);
        m.put("types-long-key", (long) LONG_KEYS);
        m.put("types-int-key", (long) INT_KEYS);
        m.put("types-tuple-key", (long) TUPLE_KEYS);
        m.put("types-pojo-key", (long) POJO_KEYS);
        m.put("types-ops", (long) OPS_RECORDS);
        return m;
    }

    @Override
    public void build(StreamExecutionEnvironment env, Driver.Params p) {
        Configuration c = new Configuration();
        if (Boolean.parseBoolean(p.get("compression", "false"))) {
            c.set(ExecutionOptions.SNAPSHOT_COMPRESSION, true);
        }
        if (p.backend().equals("rocksdb")) {
            // 33 column families per subtask in a few MB of managed memory make RocksDB stall
            // writes (Flink 1.x: ~45 s for 10 000 keys); unmanaged memory never flushes here. The
            // snapshot format does not depend on it. On 1.x this builds the job's backend from
            // this configuration alone, hence the backend and incremental keys.
            c.setString("state.backend", "rocksdb");
            c.setString("state.backend.type", "rocksdb");
            c.setString("state.backend.incremental", p.get("incremental", "false"));
            c.setString("state.backend.rocksdb.memory.managed", "false");
        }
        env.configure(c);
        DataStream<Long> src = env.addSource(new Src()).uid("src").name("src").setParallelism(1);

        src.keyBy(i -> "key-" + i, Types.STRING)
                .process(new StringKeyFn(!p.raw.containsKey("no-kryo"))).uid("types-string-key").name("types-string-key").setParallelism(P)
                .sinkTo(new DiscardingSink<>()).uid("sink-string-key").name("sink-string-key").setParallelism(P);

        src.filter(i -> i < LONG_KEYS).uid("f-long-key").name("f-long-key").setParallelism(1)
                .keyBy(i -> longKey(i), Types.LONG)
                .process(new LongKeyFn()).uid("types-long-key").name("types-long-key").setParallelism(P)
                .sinkTo(new DiscardingSink<>()).uid("sink-long-key").name("sink-long-key").setParallelism(P);

        src.filter(i -> i < INT_KEYS).uid("f-int-key").name("f-int-key").setParallelism(1)
                .keyBy(i -> intKey(i), Types.INT)
                .process(new IntKeyFn()).uid("types-int-key").name("types-int-key").setParallelism(P)
                .sinkTo(new DiscardingSink<>()).uid("sink-int-key").name("sink-int-key").setParallelism(P);

        src.filter(i -> i < TUPLE_KEYS).uid("f-tuple-key").name("f-tuple-key").setParallelism(1)
                .keyBy(i -> tupleKey(i), Types.TUPLE(Types.STRING, Types.INT))
                .process(new TupleKeyFn()).uid("types-tuple-key").name("types-tuple-key").setParallelism(P)
                .sinkTo(new DiscardingSink<>()).uid("sink-tuple-key").name("sink-tuple-key").setParallelism(P);

        src.filter(i -> i < POJO_KEYS).uid("f-pojo-key").name("f-pojo-key").setParallelism(1)
                .keyBy(i -> pojoKey(i), Types.POJO(PojoKey.class))
                .process(new PojoKeyFn()).uid("types-pojo-key").name("types-pojo-key").setParallelism(P)
                .sinkTo(new DiscardingSink<>()).uid("sink-pojo-key").name("sink-pojo-key").setParallelism(P);

        src.filter(i -> i < OPS_RECORDS).uid("f-ops").name("f-ops").setParallelism(1)
                .process(new OpsFn()).uid("types-ops").name("types-ops").setParallelism(P)
                .sinkTo(new DiscardingSink<>()).uid("sink-ops").name("sink-ops").setParallelism(P);
    }

    static long longKey(long i) {
        return i * 1_000_003L - 300_000_000L;
    }

    static int intKey(long i) {
        return (int) (i * 7 - 1000);
    }

    static Tuple2<String, Integer> tupleKey(long i) {
        return Tuple2.of("t" + (i % 50), (int) i);
    }

    static PojoKey pojoKey(long i) {
        return new PojoKey("p" + (i % 20), (int) i);
    }

    // ------------------------------------------------------------------ types

    public enum Color {
        RED, GREEN, BLUE
    }

    /** Nested POJO field of {@link MyPojo}. */
    public static class Inner {
        public long a;
        public String b;

        public Inner() {}

        public Inner(long a, String b) {
            this.a = a;
            this.b = b;
        }
    }

    /** A POJO with a nested POJO, a List, an enum and a nullable boxed Double. */
    public static class MyPojo {
        public String name;
        public int id;
        public Inner inner;
        public List<String> tags;
        public Color color;
        public Double score;

        public MyPojo() {}
    }

    /** POJO key: public fields, default constructor, equals/hashCode. */
    public static class PojoKey {
        public String name;
        public int id;

        public PojoKey() {}

        public PojoKey(String name, int id) {
            this.name = name;
            this.id = id;
        }

        @Override
        public boolean equals(Object o) {
            return o instanceof PojoKey && ((PojoKey) o).id == id && Objects.equals(((PojoKey) o).name, name);
        }

        @Override
        public int hashCode() {
            return Objects.hash(name, id);
        }
    }

    /** Not a POJO (final fields, no default constructor): Flink falls back to Kryo. */
    public static final class Opaque {
        private final String s;
        private final long n;

        public Opaque(String s, long n) {
            this.s = s;
            this.n = n;
        }

        @Override
        public String toString() {
            return "Opaque(" + s + "," + n + ")";
        }
    }

    /**
     * TypeInformation of MyPojo. Flink 2.x extracts the List field as a (nullable) list type;
     * Flink 1.x extracts it as GenericType (Kryo), which is replaced by an explicit list type so
     * the value stays decodable on every version.
     */
    static TypeInformation<MyPojo> pojoType() {
        TypeInformation<MyPojo> t = TypeInformation.of(MyPojo.class);
        if (t instanceof PojoTypeInfo) {
            PojoTypeInfo<MyPojo> pt = (PojoTypeInfo<MyPojo>) t;
            if (!(pt.getTypeAt(pt.getFieldIndex("tags")) instanceof GenericTypeInfo)) {
                return t;
            }
        }
        Map<String, TypeInformation<?>> fields = new HashMap<>();
        fields.put("name", Types.STRING);
        fields.put("id", Types.INT);
        fields.put("inner", Types.POJO(Inner.class));
        fields.put("tags", Types.LIST(Types.STRING));
        fields.put("color", Types.ENUM(Color.class));
        fields.put("score", Types.DOUBLE);
        return Types.POJO(MyPojo.class, fields);
    }

    static MyPojo pojo(long i) {
        MyPojo p = new MyPojo();
        p.name = i % 13 == 0 ? null : "pojo-" + i;
        p.id = (int) i;
        p.inner = i % 5 == 0 ? null : new Inner(i * 10 - 7, i % 3 == 0 ? null : "in-" + i);
        if (i % 7 != 0) {
            p.tags = new ArrayList<>();
            for (int k = 0; k < i % 3; k++) {
                p.tags.add("tag" + k + "-" + i);
            }
        }
        p.color = i % 11 == 0 ? null : Color.values()[(int) (i % 3)];
        p.score = i % 4 == 0 ? null : i * 1.5 - 20;
        return p;
    }

    // ------------------------------------------------------------------ dump encoding

    /** Encodes state values and keys into the plain structures Json writes (see class comment). */
    static final class Enc {
        private Enc() {}

        static Object enc(Object v) {
            if (v == null || v instanceof String || v instanceof Boolean || v instanceof Character
                    || v instanceof Long || v instanceof Integer || v instanceof Short || v instanceof Byte
                    || v instanceof Double || v instanceof byte[]) {
                return v;
            }
            if (v instanceof Float) {
                return (double) (Float) v;
            }
            if (v instanceof BigDecimal) {
                return ((BigDecimal) v).toPlainString();
            }
            if (v instanceof BigInteger) {
                return v.toString();
            }
            if (v instanceof LocalDate) {
                return ((LocalDate) v).toEpochDay();
            }
            if (v instanceof LocalTime) {
                return ((LocalTime) v).toNanoOfDay();
            }
            if (v instanceof LocalDateTime) {
                LocalDateTime t = (LocalDateTime) v;
                return Arrays.asList(t.toLocalDate().toEpochDay(), t.toLocalTime().toNanoOfDay());
            }
            if (v instanceof Instant) {
                return Arrays.asList(((Instant) v).getEpochSecond(), (long) ((Instant) v).getNano());
            }
            if (v instanceof java.sql.Timestamp) {
                return Arrays.asList(((java.sql.Timestamp) v).getTime(), (long) ((java.sql.Timestamp) v).getNanos());
            }
            if (v instanceof java.sql.Date || v instanceof java.sql.Time) {
                return ((java.util.Date) v).getTime();
            }
            if (v instanceof Enum) {
                return ((Enum<?>) v).name();
            }
            if (v instanceof Either) {
                Either<?, ?> e = (Either<?, ?>) v;
                Map<String, Object> m = new LinkedHashMap<>();
                if (e.isLeft()) {
                    m.put("left", enc(e.left()));
                } else {
                    m.put("right", enc(e.right()));
                }
                return m;
            }
            if (v instanceof Tuple) {
                Tuple t = (Tuple) v;
                List<Object> l = new ArrayList<>();
                for (int i = 0; i < t.getArity(); i++) {
                    l.add(enc(t.getField(i)));
                }
                return l;
            }
            if (v instanceof Row) {
                Row r = (Row) v;
                List<Object> l = new ArrayList<>();
                for (int i = 0; i < r.getArity(); i++) {
                    l.add(enc(r.getField(i)));
                }
                return l;
            }
            if (v instanceof int[]) {
                List<Object> l = new ArrayList<>();
                for (int x : (int[]) v) {
                    l.add(x);
                }
                return l;
            }
            if (v instanceof long[]) {
                List<Object> l = new ArrayList<>();
                for (long x : (long[]) v) {
                    l.add(x);
                }
                return l;
            }
            if (v instanceof Object[]) {
                return enc(Arrays.asList((Object[]) v));
            }
            if (v instanceof Collection) {
                List<Object> l = new ArrayList<>();
                for (Object x : (Collection<?>) v) {
                    l.add(enc(x));
                }
                return l;
            }
            if (v instanceof Map) {
                return pairs((Map<?, ?>) v);
            }
            if (v instanceof Inner || v instanceof MyPojo || v instanceof PojoKey) {
                return pojo(v);
            }
            throw new IllegalArgumentException("TypesJob.Enc: no dump encoding for " + v.getClass() + ": " + v);
        }

        /** Map -> [[k, v], ...] sorted by encoded key. */
        static List<Object> pairs(Map<?, ?> m) {
            TreeMap<Object, Object> sorted = new TreeMap<>(Oracle.VALUE_ORDER);
            for (Map.Entry<?, ?> e : m.entrySet()) {
                sorted.put(enc(e.getKey()), enc(e.getValue()));
            }
            List<Object> l = new ArrayList<>();
            sorted.forEach((k, x) -> l.add(Arrays.asList(k, x)));
            return l;
        }

        /** POJO -> {field: value} over its public instance fields, by name. */
        static Map<String, Object> pojo(Object v) {
            List<Field> fields = new ArrayList<>(Arrays.asList(v.getClass().getFields()));
            fields.removeIf(f -> Modifier.isStatic(f.getModifiers()) || Modifier.isTransient(f.getModifiers()));
            fields.sort(Comparator.comparing(Field::getName));
            Map<String, Object> m = new LinkedHashMap<>();
            for (Field f : fields) {
                try {
                    m.put(f.getName(), enc(f.get(v)));
                } catch (IllegalAccessException e) {
                    throw new IllegalStateException(e);
                }
            }
            return m;
        }
    }

    /** Mirror of the keyed state of one subtask: state name -> encoded key -> encoded value. */
    static final class KeyedMirror {
        final LinkedHashMap<String, Map<String, Object>> attrs = new LinkedHashMap<>();
        final Map<String, Map<Object, Object>> values = new HashMap<>();
        final Map<String, String> kinds = new HashMap<>();
        /** {kind, encoded key, timestamp}. */
        final List<Object[]> timers = new ArrayList<>();
        private Oracle.OpSnapshot last;

        /** Declares a state (dump order = declaration order) once its descriptor's serializer is known. */
        void declare(String name, String kind, String type, StateDescriptor<?, ?> desc, boolean opaque) {
            Map<String, Object> a = new LinkedHashMap<>();
            a.put("type", type);
            a.put("serializer", describe(desc.getSerializer()));
            if (opaque) {
                a.put("opaque", true);
            }
            attrs.put(name, a);
            kinds.put(name, kind);
            values.put(name, new HashMap<>());
        }

        void put(String name, Object encKey, Object encValue) {
            values.get(name).put(encKey, encValue);
            last = null;
        }

        /** Verify mode: what a state holds for a key as the dump has it (null: nothing). */
        void putRestored(String name, Object encKey, Object value) {
            if (value != null) {
                put(name, encKey, value instanceof Map ? Enc.pairs((Map<?, ?>) value) : Enc.enc(value));
            }
        }

        /** A list state's elements, null when it holds none (no list for the key). */
        static List<Object> restoredList(Iterable<?> elements) {
            List<Object> l = new ArrayList<>();
            if (elements != null) {
                elements.forEach(l::add);
            }
            return l.isEmpty() ? null : l;
        }

        /** A map state's entries, null when it holds none (no map for the key). */
        static <K, V> Map<K, V> restoredMap(Iterable<Map.Entry<K, V>> entries) throws Exception {
            Map<K, V> m = new HashMap<>();
            for (Map.Entry<K, V> e : entries) {
                m.put(e.getKey(), e.getValue());
            }
            return m.isEmpty() ? null : m;
        }

        void timer(String kind, Object encKey, long ts) {
            timers.add(new Object[] {kind, encKey, ts});
            last = null;
        }

        /** Unchanged mirrors share one snapshot object, so many checkpoints cost no extra memory. */
        Oracle.OpSnapshot snapshot() {
            if (last == null) {
                Oracle.OpSnapshot s = new Oracle.OpSnapshot();
                for (Map.Entry<String, Map<String, Object>> e : attrs.entrySet()) {
                    s.keyed(e.getKey(), kinds.get(e.getKey()), values.get(e.getKey()), e.getValue());
                }
                for (Object[] t : timers) {
                    s.timer((String) t[0], t[1], (Long) t[2], null);
                }
                last = s;
            }
            return last;
        }
    }

    static String describe(TypeSerializer<?> s) {
        String n = s.getClass().getSimpleName();
        return n.isEmpty() ? s.getClass().getName() : n;
    }

    // ------------------------------------------------------------------ src

    public static class Src extends RichSourceFunction<Long> implements CheckpointedFunction, CheckpointListener {
        private volatile boolean running = true;
        private long emitted;

        @Override
        public void run(SourceContext<Long> ctx) throws Exception {
            while (running && emitted < KEYS) {
                synchronized (ctx.getCheckpointLock()) {
                    ctx.collect(emitted);
                    emitted++;
                    Oracle.count("src");
                }
            }
            if (Oracle.restoring()) {
                return; // finishing emits the final watermark: every event-time timer fires
            }
            while (running) {
                Thread.sleep(20);
            }
        }

        @Override
        public void cancel() {
            running = false;
        }

        @Override
        public void initializeState(FunctionInitializationContext ctx) {}

        @Override
        public void snapshotState(FunctionSnapshotContext ctx) {
            Oracle.sourceSnapshot(ctx.getCheckpointId());
        }

        @Override
        public void notifyCheckpointComplete(long checkpointId) {
            Oracle.COMPLETED.add(checkpointId);
        }
    }

    // ------------------------------------------------------------------ types-string-key

    /** Value state names in declaration order; state j is absent for keys with (idx + j) % 11 == 0. */
    static final String[] STATES = {
        "v_long", "v_int", "v_short", "v_byte", "v_bool", "v_double", "v_float", "v_char", "v_string", "v_bigdec",
        "v_bigint", "v_bytes", "v_ints", "v_longs", "v_strings", "v_localdate", "v_localtime", "v_localdatetime",
        "v_instant", "v_sqldate", "v_sqltime", "v_sqltimestamp", "v_tuple3", "v_row", "v_pojo", "v_map_list",
        "v_enum", "v_either", "v_nullable", "v_kryo", "l_tuples", "m_pojos", "m_long_keys",
    };

    static boolean absent(long idx, String state) {
        int j = Arrays.asList(STATES).indexOf(state);
        if (j < 0) {
            throw new IllegalArgumentException(state);
        }
        return idx % 500 == 499 || (idx + j) % 11 == 0;
    }

    static LocalDate localDate(long i) {
        return LocalDate.ofEpochDay(1 + (i * 37) % 40_000);
    }

    static LocalTime localTime(long i) {
        return LocalTime.ofNanoOfDay(((i * 7_777_777_777L) % 86_400_000_000L) * 1000);
    }

    static LocalDateTime localDateTime(long i) {
        return LocalDateTime.of(localDate(i + 1), localTime(i + 2));
    }

    static String longString(long i) {
        StringBuilder sb = new StringBuilder();
        while (sb.length() < 200) {
            sb.append("long-").append(i).append('-');
        }
        return sb.toString();
    }

    public static class StringKeyFn extends KeyedProcessFunction<String, Long, String> implements CheckpointedFunction {
        private transient ValueState<Long> vLong;
        private transient ValueState<Integer> vInt;
        private transient ValueState<Short> vShort;
        private transient ValueState<Byte> vByte;
        private transient ValueState<Boolean> vBool;
        private transient ValueState<Double> vDouble;
        private transient ValueState<Float> vFloat;
        private transient ValueState<Character> vChar;
        private transient ValueState<String> vString;
        private transient ValueState<BigDecimal> vBigdec;
        private transient ValueState<BigInteger> vBigint;
        private transient ValueState<byte[]> vBytes;
        private transient ValueState<int[]> vInts;
        private transient ValueState<long[]> vLongs;
        private transient ValueState<String[]> vStrings;
        private transient ValueState<LocalDate> vLocaldate;
        private transient ValueState<LocalTime> vLocaltime;
        private transient ValueState<LocalDateTime> vLocaldatetime;
        private transient ValueState<Instant> vInstant;
        private transient ValueState<java.sql.Date> vSqldate;
        private transient ValueState<java.sql.Time> vSqltime;
        private transient ValueState<java.sql.Timestamp> vSqltimestamp;
        private transient ValueState<Tuple3<String, Long, Double>> vTuple3;
        private transient ValueState<Row> vRow;
        private transient ValueState<MyPojo> vPojo;
        private transient ValueState<Map<String, List<Long>>> vMapList;
        private transient ValueState<Color> vEnum;
        private transient ValueState<Either<String, Long>> vEither;
        private transient ValueState<Tuple2<Long, String>> vNullable;
        private transient ValueState<Opaque> vKryo;
        private transient ListState<Tuple2<String, Long>> lTuples;
        private transient MapState<String, MyPojo> mPojos;
        private transient MapState<Long, String> mLongKeys;

        private transient KeyedMirror mirror;
        /** value states by name, in declaration order (verify mode reads them all). */
        private transient LinkedHashMap<String, ValueState<?>> valueStates;
        private final boolean kryo;

        StringKeyFn(boolean kryo) {
            this.kryo = kryo;
        }

        @Override
        public void initializeState(FunctionInitializationContext ctx) {
            mirror = new KeyedMirror();
        }

        private <T> ValueState<T> value(String name, String type, TypeInformation<T> t) {
            ValueStateDescriptor<T> d = new ValueStateDescriptor<>(name, t);
            ValueState<T> s = getRuntimeContext().getState(d);
            mirror.declare(name, "VALUE", type, d, false);
            valueStates.put(name, s);
            return s;
        }

        @Override
        @SuppressWarnings({"unchecked", "rawtypes"})
        public void open(OpenContext openContext) {
            valueStates = new LinkedHashMap<>();
            vLong = value("v_long", "Long", Types.LONG);
            vInt = value("v_int", "Integer", Types.INT);
            vShort = value("v_short", "Short", Types.SHORT);
            vByte = value("v_byte", "Byte", Types.BYTE);
            vBool = value("v_bool", "Boolean", Types.BOOLEAN);
            vDouble = value("v_double", "Double", Types.DOUBLE);
            vFloat = value("v_float", "Float", Types.FLOAT);
            vChar = value("v_char", "Character", Types.CHAR);
            vString = value("v_string", "String", Types.STRING);
            vBigdec = value("v_bigdec", "BigDecimal", Types.BIG_DEC);
            vBigint = value("v_bigint", "BigInteger", Types.BIG_INT);
            vBytes = value("v_bytes", "byte[]", (TypeInformation<byte[]>) Types.PRIMITIVE_ARRAY(Types.BYTE));
            vInts = value("v_ints", "int[]", (TypeInformation<int[]>) Types.PRIMITIVE_ARRAY(Types.INT));
            vLongs = value("v_longs", "long[]", (TypeInformation<long[]>) Types.PRIMITIVE_ARRAY(Types.LONG));
            vStrings = value("v_strings", "String[] (with null elements)", Types.OBJECT_ARRAY(Types.STRING));
            vLocaldate = value("v_localdate", "java.time.LocalDate", Types.LOCAL_DATE);
            vLocaltime = value("v_localtime", "java.time.LocalTime", Types.LOCAL_TIME);
            vLocaldatetime = value("v_localdatetime", "java.time.LocalDateTime", Types.LOCAL_DATE_TIME);
            vInstant = value("v_instant", "java.time.Instant", Types.INSTANT);
            vSqldate = value("v_sqldate", "java.sql.Date", Types.SQL_DATE);
            vSqltime = value("v_sqltime", "java.sql.Time", Types.SQL_TIME);
            vSqltimestamp = value("v_sqltimestamp", "java.sql.Timestamp", Types.SQL_TIMESTAMP);
            vTuple3 = value("v_tuple3", "Tuple3<String,Long,Double>", Types.TUPLE(Types.STRING, Types.LONG, Types.DOUBLE));
            vRow = value("v_row", "Row(String,Integer,LocalDateTime) with null fields",
                    Types.ROW(Types.STRING, Types.INT, Types.LOCAL_DATE_TIME));
            vPojo = value("v_pojo", "POJO MyPojo{color: enum Color, id: int, inner: POJO Inner{a: long, b: String},"
                    + " name: String, score: Double, tags: List<String>}", pojoType());
            vMapList = value("v_map_list", "Map<String,List<Long>> with null map values",
                    Types.MAP(Types.STRING, Types.LIST(Types.LONG)));
            vEnum = value("v_enum", "enum Color", Types.ENUM(Color.class));
            vEither = value("v_either", "Either<String,Long>", Types.EITHER(Types.STRING, Types.LONG));

            // Tuple2<Long, String> whose Long field is NullableSerializer-wrapped (padded to fixed length).
            TypeSerializer<?>[] fields = {NullableSerializer.wrap(LongSerializer.INSTANCE, true), StringSerializer.INSTANCE};
            ValueStateDescriptor<Tuple2<Long, String>> nd = new ValueStateDescriptor<>("v_nullable",
                    new TupleSerializer<Tuple2<Long, String>>((Class) Tuple2.class, fields));
            vNullable = getRuntimeContext().getState(nd);
            valueStates.put("v_nullable", vNullable);
            mirror.declare("v_nullable", "VALUE", "Tuple2<Long (NullableSerializer, padded), String> with null fields", nd,
                    false);

            if (kryo) {
                ValueStateDescriptor<Opaque> kd = new ValueStateDescriptor<>("v_kryo", TypeInformation.of(Opaque.class));
                vKryo = getRuntimeContext().getState(kd);
                valueStates.put("v_kryo", vKryo);
                mirror.declare("v_kryo", "VALUE", "Opaque (not a POJO: Kryo)", kd, true);
            }

            ListStateDescriptor<Tuple2<String, Long>> ld = new ListStateDescriptor<>("l_tuples",
                    Types.TUPLE(Types.STRING, Types.LONG));
            lTuples = getRuntimeContext().getListState(ld);
            mirror.declare("l_tuples", "LIST", "List<Tuple2<String,Long>>", ld, false);

            MapStateDescriptor<String, MyPojo> pd = new MapStateDescriptor<>("m_pojos", Types.STRING, pojoType());
            mPojos = getRuntimeContext().getMapState(pd);
            mirror.declare("m_pojos", "MAP", "Map<String,MyPojo> with a null value", pd, false);

            MapStateDescriptor<Long, String> md = new MapStateDescriptor<>("m_long_keys", Types.LONG, Types.STRING);
            mLongKeys = getRuntimeContext().getMapState(md);
            mirror.declare("m_long_keys", "MAP", "Map<Long,String>", md, false);
        }

        private <T> void set(String name, ValueState<T> state, Object key, long idx, T v) throws Exception {
            if (absent(idx, name)) {
                return;
            }
            state.update(v);
            mirror.put(name, key, name.equals("v_kryo") ? null : Enc.enc(v));
        }

        @Override
        public void processElement(Long i, Context ctx, Collector<String> out) throws Exception {
            String key = ctx.getCurrentKey();
            long idx = i;
            if (Oracle.restoring()) {
                for (Map.Entry<String, ValueState<?>> e : valueStates.entrySet()) {
                    Object v = e.getValue().value();
                    if (e.getKey().equals("v_kryo") && v != null) {
                        String written = new Opaque("k" + idx, idx).toString();
                        mirror.put("v_kryo", key, v.toString().equals(written) ? null : v.toString());
                    } else {
                        mirror.putRestored(e.getKey(), key, v);
                    }
                }
                mirror.putRestored("l_tuples", key, KeyedMirror.restoredList(lTuples.get()));
                mirror.putRestored("m_pojos", key, KeyedMirror.restoredMap(mPojos.entries()));
                mirror.putRestored("m_long_keys", key, KeyedMirror.restoredMap(mLongKeys.entries()));
                out.collect(key);
                return;
            }

            set("v_long", vLong, key, idx, idx == 0 ? Long.MIN_VALUE : idx == 2 ? Long.MAX_VALUE
                    : (idx % 2 == 0 ? 1 : -1) * idx * 2_654_435_761L);
            set("v_int", vInt, key, idx, idx == 3 ? Integer.MIN_VALUE : idx == 4 ? Integer.MAX_VALUE
                    : (int) ((idx % 2 == 0 ? 1 : -1) * idx * 7919));
            set("v_short", vShort, key, idx, (short) (idx * 31 - 5000));
            set("v_byte", vByte, key, idx, (byte) idx);
            set("v_bool", vBool, key, idx, idx % 3 == 0);
            set("v_double", vDouble, key, idx, idx == 5 ? -0.0 : idx == 6 ? 1e300 : idx == 7 ? -4.9e-324
                    : idx * 0.5 - 1234.25 + (idx % 7) * 0.1);
            set("v_float", vFloat, key, idx, idx == 5 ? Float.MAX_VALUE : idx * 0.1f - 100f);
            set("v_char", vChar, key, idx, idx % 10 == 0 ? '\u00e9' : idx % 10 == 1 ? '\u4e2d' : idx == 42 ? '\u0000'
                    : (char) ('A' + idx % 26));
            String s;
            switch ((int) (idx % 10)) {
                case 0: s = ""; break;
                case 1: s = "\u00fc-" + idx + "-\u4e2d"; break;
                case 2: s = longString(idx); break;
                case 3: s = "\ud83d\ude00-" + idx; break;
                default: s = "s-" + idx;
            }
            set("v_string", vString, key, idx, s);
            BigDecimal bd;
            if (idx % 50 == 0) {
                bd = new BigDecimal("1E+" + (idx % 7 + 1));
            } else if (idx % 50 == 1) {
                bd = new BigDecimal((idx % 4 == 1 ? "-" : "") + "123456789012345678901234567890.123456789");
            } else {
                bd = BigDecimal.valueOf(idx * 12345L - 99_999, (int) (idx % 6));
            }
            set("v_bigdec", vBigdec, key, idx, bd);
            BigInteger bi = idx % 3 == 0 ? BigInteger.valueOf(idx).pow(7).negate()
                    : idx % 3 == 1 ? BigInteger.ONE.shiftLeft((int) (64 + idx % 100)) : BigInteger.valueOf(idx - 5000);
            set("v_bigint", vBigint, key, idx, bi);
            byte[] bytes = new byte[(int) (idx % 5)];
            for (int k = 0; k < bytes.length; k++) {
                bytes[k] = (byte) (idx * 31 + k * 97);
            }
            set("v_bytes", vBytes, key, idx, bytes);
            int[] ints = new int[(int) (idx % 4)];
            for (int k = 0; k < ints.length; k++) {
                ints[k] = k == 2 ? Integer.MIN_VALUE : (int) (idx * k - 3);
            }
            set("v_ints", vInts, key, idx, ints);
            long[] longs = new long[(int) ((idx + 1) % 4)];
            for (int k = 0; k < longs.length; k++) {
                longs[k] = k == 2 ? Long.MAX_VALUE : idx * 1_000_000_007L * (k + 1);
            }
            set("v_longs", vLongs, key, idx, longs);
            String[] strings = new String[(int) (idx % 4)];
            for (int k = 0; k < strings.length; k++) {
                strings[k] = (idx + k) % 5 == 0 ? null : "a" + k + "-" + idx;
            }
            set("v_strings", vStrings, key, idx, strings);
            set("v_localdate", vLocaldate, key, idx, localDate(idx));
            set("v_localtime", vLocaltime, key, idx, localTime(idx));
            set("v_localdatetime", vLocaldatetime, key, idx, localDateTime(idx));
            set("v_instant", vInstant, key, idx, Instant.ofEpochSecond(1_500_000_000L + idx * 86_413L, (idx % 1_000_000) * 1000));
            set("v_sqldate", vSqldate, key, idx, new java.sql.Date(localDate(idx + 3).toEpochDay() * 86_400_000L));
            set("v_sqltime", vSqltime, key, idx, new java.sql.Time((idx * 3_601_007L) % 86_400_000L));
            java.sql.Timestamp ts = new java.sql.Timestamp((1_500_000_000L + idx * 977L) * 1000L);
            ts.setNanos((int) ((idx * 1_234_567L % 1_000_000L) * 1000));
            set("v_sqltimestamp", vSqltimestamp, key, idx, ts);
            set("v_tuple3", vTuple3, key, idx, Tuple3.of("t" + idx, idx * idx - 7, idx / 3.0));
            set("v_row", vRow, key, idx, Row.of(idx % 4 == 0 ? null : "r" + idx, idx % 5 == 0 ? null : (int) idx - 5000,
                    idx % 6 == 0 ? null : localDateTime(idx * 3)));
            set("v_pojo", vPojo, key, idx, pojo(idx));
            Map<String, List<Long>> ml = new HashMap<>();
            for (int m = 0; m < idx % 4; m++) {
                List<Long> l = null;
                if (!(idx % 9 == 0 && m == 0)) {
                    l = new ArrayList<>();
                    for (int n = 0; n <= m; n++) {
                        l.add(idx * m - n);
                    }
                }
                ml.put("m" + m, l);
            }
            set("v_map_list", vMapList, key, idx, ml);
            set("v_enum", vEnum, key, idx, Color.values()[(int) (idx % 3)]);
            set("v_either", vEither, key, idx, idx % 2 == 0 ? Either.<String, Long>Left("L" + idx) : Either.<String, Long>Right(idx * -3));
            set("v_nullable", vNullable, key, idx, Tuple2.of(idx % 3 == 0 ? null : idx, idx % 7 == 0 ? null : "n" + idx));
            if (kryo) {
                set("v_kryo", vKryo, key, idx, new Opaque("k" + idx, idx));
            }

            if (!absent(idx, "l_tuples") && idx % 4 != 0) {
                List<Tuple2<String, Long>> l = new ArrayList<>();
                for (int k = 0; k < idx % 4; k++) {
                    l.add(Tuple2.of("lt" + idx + "-" + k, k - idx));
                }
                lTuples.addAll(l);
                mirror.put("l_tuples", key, Enc.enc(l));
            }
            if (!absent(idx, "m_pojos") && (idx % 3 != 0 || idx % 100 == 7)) {
                Map<String, MyPojo> m = new HashMap<>();
                for (int k = 0; k < idx % 3; k++) {
                    m.put("p" + k, pojo(idx * 10 + k));
                }
                if (idx % 100 == 7) {
                    m.put("pnull", null);
                }
                mPojos.putAll(m);
                mirror.put("m_pojos", key, Enc.pairs(m));
            }
            if (!absent(idx, "m_long_keys") && (idx + 1) % 3 != 0) {
                Map<Long, String> m = new HashMap<>();
                for (int k = 0; k <= (idx + 1) % 3; k++) {
                    m.put(idx * 1000 + k - 5_000_000, "v" + k + "-" + idx);
                }
                mLongKeys.putAll(m);
                mirror.put("m_long_keys", key, Enc.pairs(m));
            }
            Oracle.count("types-string-key");
            out.collect(key);
        }

        @Override
        public void snapshotState(FunctionSnapshotContext ctx) {
            Oracle.record("types-string-key", getRuntimeContext().getTaskInfo().getIndexOfThisSubtask(),
                    ctx.getCheckpointId(), mirror.snapshot());
        }

        @Override
        public void close() {
            if (mirror != null) { // null when the restore failed before initializeState
                Oracle.recordRestored("types-string-key", getRuntimeContext().getTaskInfo().getIndexOfThisSubtask(), mirror.snapshot());
            }
        }
    }

    // ------------------------------------------------------------------ types-long-key

    public static class LongKeyFn extends KeyedProcessFunction<Long, Long, String> implements CheckpointedFunction {
        private transient ValueState<String> label;
        private transient ListState<Long> history;
        private transient KeyedMirror mirror;

        @Override
        public void initializeState(FunctionInitializationContext ctx) {
            mirror = new KeyedMirror();
        }

        @Override
        public void open(OpenContext openContext) {
            ValueStateDescriptor<String> vd = new ValueStateDescriptor<>("label", Types.STRING);
            label = getRuntimeContext().getState(vd);
            mirror.declare("label", "VALUE", "String", vd, false);
            ListStateDescriptor<Long> ld = new ListStateDescriptor<>("history", Types.LONG);
            history = getRuntimeContext().getListState(ld);
            mirror.declare("history", "LIST", "List<Long>", ld, false);
        }

        @Override
        public void processElement(Long i, Context ctx, Collector<String> out) throws Exception {
            long key = ctx.getCurrentKey();
            if (Oracle.restoring()) {
                mirror.putRestored("label", key, label.value());
                mirror.putRestored("history", key, KeyedMirror.restoredList(history.get()));
                out.collect("" + key);
                return;
            }
            if (i % 5 != 0) {
                String v = "label-" + i;
                label.update(v);
                mirror.put("label", key, v);
            }
            List<Long> h = new ArrayList<>();
            for (int k = 0; k <= i % 3; k++) {
                h.add(key * 10 + k);
            }
            history.addAll(h);
            mirror.put("history", key, new ArrayList<Object>(h));
            ctx.timerService().registerEventTimeTimer(EVENT_TIMER_BASE + i);
            mirror.timer("event", key, EVENT_TIMER_BASE + i);
            Oracle.count("types-long-key");
            out.collect("" + key);
        }

        @Override
        public void onTimer(long timestamp, OnTimerContext ctx, Collector<String> out) {
            if (!Oracle.restoring() || ctx.timeDomain() != TimeDomain.EVENT_TIME) {
                throw new IllegalStateException("oracle timer fired unexpectedly: " + ctx.getCurrentKey() + " @" + timestamp);
            }
            mirror.timer("event", ctx.getCurrentKey(), timestamp); // the final watermark fires it
        }

        @Override
        public void snapshotState(FunctionSnapshotContext ctx) {
            Oracle.record("types-long-key", getRuntimeContext().getTaskInfo().getIndexOfThisSubtask(),
                    ctx.getCheckpointId(), mirror.snapshot());
        }

        @Override
        public void close() {
            if (mirror != null) { // null when the restore failed before initializeState
                Oracle.recordRestored("types-long-key", getRuntimeContext().getTaskInfo().getIndexOfThisSubtask(), mirror.snapshot());
            }
        }
    }

    // ------------------------------------------------------------------ types-int-key

    public static class IntKeyFn extends KeyedProcessFunction<Integer, Long, String> implements CheckpointedFunction {
        private transient MapState<String, Integer> counts;
        private transient KeyedMirror mirror;

        @Override
        public void initializeState(FunctionInitializationContext ctx) {
            mirror = new KeyedMirror();
        }

        @Override
        public void open(OpenContext openContext) {
            MapStateDescriptor<String, Integer> d = new MapStateDescriptor<>("counts", Types.STRING, Types.INT);
            counts = getRuntimeContext().getMapState(d);
            mirror.declare("counts", "MAP", "Map<String,Integer>", d, false);
        }

        @Override
        public void processElement(Long i, Context ctx, Collector<String> out) throws Exception {
            int key = ctx.getCurrentKey();
            if (Oracle.restoring()) {
                mirror.putRestored("counts", key, KeyedMirror.restoredMap(counts.entries()));
                out.collect("" + key);
                return;
            }
            Map<String, Integer> m = new HashMap<>();
            for (int k = 0; k <= i % 4; k++) {
                m.put("c" + k, (int) (key * 3 + k));
            }
            counts.putAll(m);
            mirror.put("counts", key, Enc.pairs(m));
            Oracle.count("types-int-key");
            out.collect("" + key);
        }

        @Override
        public void snapshotState(FunctionSnapshotContext ctx) {
            Oracle.record("types-int-key", getRuntimeContext().getTaskInfo().getIndexOfThisSubtask(),
                    ctx.getCheckpointId(), mirror.snapshot());
        }

        @Override
        public void close() {
            if (mirror != null) { // null when the restore failed before initializeState
                Oracle.recordRestored("types-int-key", getRuntimeContext().getTaskInfo().getIndexOfThisSubtask(), mirror.snapshot());
            }
        }
    }

    // ------------------------------------------------------------------ types-tuple-key

    public static class TupleKeyFn extends KeyedProcessFunction<Tuple2<String, Integer>, Long, String>
            implements CheckpointedFunction {
        private transient ValueState<Long> total;
        private transient KeyedMirror mirror;

        @Override
        public void initializeState(FunctionInitializationContext ctx) {
            mirror = new KeyedMirror();
        }

        @Override
        public void open(OpenContext openContext) {
            ValueStateDescriptor<Long> d = new ValueStateDescriptor<>("total", Types.LONG);
            total = getRuntimeContext().getState(d);
            mirror.declare("total", "VALUE", "Long", d, false);
        }

        @Override
        public void processElement(Long i, Context ctx, Collector<String> out) throws Exception {
            Object key = Enc.enc(ctx.getCurrentKey());
            if (Oracle.restoring()) {
                mirror.putRestored("total", key, total.value());
                out.collect(String.valueOf(key));
                return;
            }
            long v = i * i - 1000;
            total.update(v);
            mirror.put("total", key, v);
            if (i % 2 == 0) {
                ctx.timerService().registerProcessingTimeTimer(PROC_TIMER_BASE + i);
                mirror.timer("processing", key, PROC_TIMER_BASE + i);
            }
            Oracle.count("types-tuple-key");
            out.collect(String.valueOf(key));
        }

        @Override
        public void onTimer(long timestamp, OnTimerContext ctx, Collector<String> out) {
            throw new IllegalStateException("oracle timer fired unexpectedly: " + ctx.getCurrentKey() + " @" + timestamp);
        }

        @Override
        public void snapshotState(FunctionSnapshotContext ctx) {
            Oracle.record("types-tuple-key", getRuntimeContext().getTaskInfo().getIndexOfThisSubtask(),
                    ctx.getCheckpointId(), mirror.snapshot());
        }

        @Override
        public void close() {
            if (mirror != null) { // null when the restore failed before initializeState
                Oracle.recordRestored("types-tuple-key", getRuntimeContext().getTaskInfo().getIndexOfThisSubtask(), mirror.snapshot());
            }
        }
    }

    // ------------------------------------------------------------------ types-pojo-key

    public static class PojoKeyFn extends KeyedProcessFunction<PojoKey, Long, String> implements CheckpointedFunction {
        private transient ValueState<String> label;
        private transient KeyedMirror mirror;

        @Override
        public void initializeState(FunctionInitializationContext ctx) {
            mirror = new KeyedMirror();
        }

        @Override
        public void open(OpenContext openContext) {
            ValueStateDescriptor<String> d = new ValueStateDescriptor<>("label", Types.STRING);
            label = getRuntimeContext().getState(d);
            mirror.declare("label", "VALUE", "String", d, false);
        }

        @Override
        public void processElement(Long i, Context ctx, Collector<String> out) throws Exception {
            Object key = Enc.enc(ctx.getCurrentKey());
            if (Oracle.restoring()) {
                mirror.putRestored("label", key, label.value());
                out.collect(String.valueOf(key));
                return;
            }
            String v = i % 9 == 0 ? "" : "pk-" + i;
            label.update(v);
            mirror.put("label", key, v);
            Oracle.count("types-pojo-key");
            out.collect(String.valueOf(key));
        }

        @Override
        public void snapshotState(FunctionSnapshotContext ctx) {
            Oracle.record("types-pojo-key", getRuntimeContext().getTaskInfo().getIndexOfThisSubtask(),
                    ctx.getCheckpointId(), mirror.snapshot());
        }

        @Override
        public void close() {
            if (mirror != null) { // null when the restore failed before initializeState
                Oracle.recordRestored("types-pojo-key", getRuntimeContext().getTaskInfo().getIndexOfThisSubtask(), mirror.snapshot());
            }
        }
    }

    // ------------------------------------------------------------------ types-ops

    /** Operator (non-keyed) list states of complex types: split-distributed POJOs, union LocalDates. */
    public static class OpsFn extends ProcessFunction<Long, String> implements CheckpointedFunction {
        private transient ListState<MyPojo> pojos;
        private transient ListState<LocalDate> dates;
        private transient List<MyPojo> mPojos;
        private transient List<LocalDate> mDates;

        @Override
        public void initializeState(FunctionInitializationContext ctx) throws Exception {
            pojos = ctx.getOperatorStateStore().getListState(new ListStateDescriptor<>("pojos", pojoType()));
            dates = ctx.getOperatorStateStore().getUnionListState(new ListStateDescriptor<>("dates", Types.LOCAL_DATE));
            mPojos = new ArrayList<>();
            mDates = new ArrayList<>();
            pojos.get().forEach(mPojos::add);
            dates.get().forEach(mDates::add);
        }

        @Override
        public void processElement(Long i, Context ctx, Collector<String> out) {
            if (Oracle.restoring()) {
                out.collect("" + i);
                return;
            }
            mPojos.add(pojo(i * 100 + 1));
            if (i % 4 != 3) {
                mDates.add(localDate(i * 1000));
            }
            Oracle.count("types-ops");
            out.collect("" + i);
        }

        @Override
        public void snapshotState(FunctionSnapshotContext ctx) throws Exception {
            pojos.update(new ArrayList<>(mPojos));
            dates.update(new ArrayList<>(mDates));
            Oracle.record("types-ops", getRuntimeContext().getTaskInfo().getIndexOfThisSubtask(), ctx.getCheckpointId(),
                    mirror());
        }

        /** In verify mode: what initializeState restored. */
        @Override
        public void close() {
            if (mPojos != null) { // null when the restore failed in initializeState
                Oracle.recordRestored("types-ops", getRuntimeContext().getTaskInfo().getIndexOfThisSubtask(), mirror());
            }
        }

        private Oracle.OpSnapshot mirror() {
            List<Object> encPojos = new ArrayList<>();
            mPojos.forEach(x -> encPojos.add(Enc.enc(x)));
            List<Object> encDates = new ArrayList<>();
            mDates.forEach(x -> encDates.add(Enc.enc(x)));
            return new Oracle.OpSnapshot().list("pojos", "SPLIT_DISTRIBUTE", encPojos).list("dates", "UNION", encDates);
        }
    }
}
