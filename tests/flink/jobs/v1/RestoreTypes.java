// GENERATED from ../v2/RestoreTypes.java by ../make_v1.py -- edit v2 and re-run make_v1.py.
import java.math.BigDecimal;
import java.math.BigInteger;
import java.time.Instant;
import java.time.LocalDate;
import java.time.LocalDateTime;
import java.time.LocalTime;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Comparator;
import java.util.List;
import java.util.Locale;
import java.util.Map;

import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.java.tuple.Tuple;
import org.apache.flink.types.Either;
import org.apache.flink.types.Row;

/**
 * RestoreJob support: type strings -> TypeInformation, and state values -> plain JSON values.
 *
 * Type grammar (names are case-insensitive; ROW field names are kept as written):
 * <pre>
 *   type := LONG | INT | SHORT | BYTE | BOOLEAN | DOUBLE | FLOAT | CHAR | STRING
 *         | BYTES (byte[]) | DECIMAL (BigDecimal) | BIG_INT (BigInteger)
 *         | DATE (LocalDate) | TIME (LocalTime) | TIMESTAMP_NTZ (LocalDateTime) | INSTANT
 *         | LIST&lt;type&gt; | SET&lt;type&gt; | MAP&lt;type, type&gt;
 *         | TUPLE&lt;type, ...&gt; | ROW&lt;name type, ...&gt; | EITHER&lt;type, type&gt;
 * </pre>
 * plus the aliases of fstate's writer type strings (INTEGER, SMALLINT, TINYINT, BOOL, BINARY,
 * BYTE[], BIG_DEC, BIGINT (BigInteger, as in fstate), LOCAL_DATE, LOCAL_TIME, LOCAL_DATE_TIME,
 * TIMESTAMP (Instant), SQL_DATE, SQL_TIME, SQL_TIMESTAMP, INT[] LONG[] SHORT[] FLOAT[] DOUBLE[]
 * CHAR[] BOOLEAN[] STRING[], ARRAY&lt;T&gt; = LIST&lt;T&gt;), so the same strings work for both.
 *
 * JSON value mapping: Long/Integer/Short/Byte -> int, Double/Float -> number (a Float widened
 * to double), String/Character -> string, Boolean, byte[] -> base64, Tuple and Row -> array
 * (positional), List/Set -> array, Map -> array of [k, v] sorted by k, BigDecimal ->
 * toPlainString(), BigInteger -> decimal string, LocalDate -> epoch day, LocalTime -> nano of
 * day, LocalDateTime -> [epoch day, nano of day], Instant -> [epoch second, nano], primitive
 * arrays -> array, java.sql.Timestamp -> [epoch millis, nanos], java.sql.Date/Time -> epoch millis,
 * Either -> {"left": v} / {"right": v}, null -> null.
 */
public final class RestoreTypes {
    private RestoreTypes() {}

    // ------------------------------------------------------------------ type parser

    public static TypeInformation<?> parse(String text) {
        if (text == null) {
            throw new IllegalArgumentException("missing type");
        }
        Parser p = new Parser(text);
        TypeInformation<?> t = p.type();
        p.space();
        if (p.pos != text.length()) {
            throw p.error("unexpected trailing text");
        }
        return t;
    }

    private static final class Parser {
        final String s;
        int pos;

        Parser(String s) {
            this.s = s;
        }

        IllegalArgumentException error(String what) {
            return new IllegalArgumentException("bad type string \"" + s + "\" at offset " + pos + ": " + what);
        }

        void space() {
            while (pos < s.length() && Character.isWhitespace(s.charAt(pos))) {
                pos++;
            }
        }

        String word() {
            space();
            int start = pos;
            while (pos < s.length() && (Character.isLetterOrDigit(s.charAt(pos)) || s.charAt(pos) == '_'
                    || s.charAt(pos) == '$' || s.charAt(pos) == '-' || s.charAt(pos) == '.')) {
                pos++;
            }
            if (pos == start) {
                throw error("expected a name");
            }
            return s.substring(start, pos);
        }

        /** Field name of ROW&lt;...&gt;: a plain word or a `back-quoted` name. */
        String fieldName() {
            space();
            if (pos < s.length() && s.charAt(pos) == '`') {
                int end = s.indexOf('`', pos + 1);
                if (end < 0) {
                    throw error("unterminated `name`");
                }
                String n = s.substring(pos + 1, end);
                pos = end + 1;
                return n;
            }
            return word();
        }

        boolean accept(char c) {
            space();
            if (pos < s.length() && s.charAt(pos) == c) {
                pos++;
                return true;
            }
            return false;
        }

        void expect(char c) {
            if (!accept(c)) {
                throw error("expected '" + c + "'");
            }
        }

        List<TypeInformation<?>> typeArgs() {
            expect('<');
            List<TypeInformation<?>> args = new ArrayList<>();
            do {
                args.add(type());
            } while (accept(','));
            expect('>');
            return args;
        }

        TypeInformation<?> one(String name, List<TypeInformation<?>> args) {
            if (args.size() != 1) {
                throw error(name + " takes 1 type argument, got " + args.size());
            }
            return args.get(0);
        }

        @SuppressWarnings({"unchecked", "rawtypes"})
        TypeInformation<?> type() {
            String name = word().toUpperCase(Locale.ROOT);
            space();
            if (s.startsWith("[]", pos)) {
                pos += 2;
                name += "[]";
            }
            switch (name) {
                case "LONG": return Types.LONG;
                case "INT": case "INTEGER": return Types.INT;
                case "SHORT": case "SMALLINT": return Types.SHORT;
                case "BYTE": case "TINYINT": return Types.BYTE;
                case "BOOLEAN": case "BOOL": return Types.BOOLEAN;
                case "DOUBLE": return Types.DOUBLE;
                case "FLOAT": return Types.FLOAT;
                case "CHAR": return Types.CHAR;
                case "STRING": return Types.STRING;
                case "BYTES": case "BYTE[]": case "BINARY": return Types.PRIMITIVE_ARRAY(Types.BYTE);
                case "DECIMAL": case "BIG_DEC": return Types.BIG_DEC;
                case "BIG_INT": case "BIGINT": return Types.BIG_INT;
                case "DATE": case "LOCAL_DATE": return Types.LOCAL_DATE;
                case "TIME": case "LOCAL_TIME": return Types.LOCAL_TIME;
                case "TIMESTAMP_NTZ": case "LOCAL_DATE_TIME": return Types.LOCAL_DATE_TIME;
                case "INSTANT": case "TIMESTAMP": return Types.INSTANT;
                case "SQL_DATE": return Types.SQL_DATE;
                case "SQL_TIME": return Types.SQL_TIME;
                case "SQL_TIMESTAMP": return Types.SQL_TIMESTAMP;
                case "INT[]": return Types.PRIMITIVE_ARRAY(Types.INT);
                case "LONG[]": return Types.PRIMITIVE_ARRAY(Types.LONG);
                case "SHORT[]": return Types.PRIMITIVE_ARRAY(Types.SHORT);
                case "FLOAT[]": return Types.PRIMITIVE_ARRAY(Types.FLOAT);
                case "DOUBLE[]": return Types.PRIMITIVE_ARRAY(Types.DOUBLE);
                case "CHAR[]": return Types.PRIMITIVE_ARRAY(Types.CHAR);
                case "BOOLEAN[]": return Types.PRIMITIVE_ARRAY(Types.BOOLEAN);
                case "STRING[]": return Types.OBJECT_ARRAY(Types.STRING);
                case "EITHER": {
                    List<TypeInformation<?>> a = typeArgs();
                    if (a.size() != 2) {
                        throw error("EITHER takes 2 type arguments, got " + a.size());
                    }
                    return Types.EITHER((TypeInformation) a.get(0), (TypeInformation) a.get(1));
                }
                case "LIST": case "ARRAY": return Types.LIST((TypeInformation) one(name, typeArgs()));
                case "SET": throw error("SET needs Flink 2.x (1.x has no SetSerializer)");
                case "MAP": {
                    List<TypeInformation<?>> a = typeArgs();
                    if (a.size() != 2) {
                        throw error("MAP takes 2 type arguments, got " + a.size());
                    }
                    return Types.MAP((TypeInformation) a.get(0), (TypeInformation) a.get(1));
                }
                case "TUPLE": {
                    List<TypeInformation<?>> a = typeArgs();
                    if (a.size() > Tuple.MAX_ARITY) {
                        throw error("TUPLE arity " + a.size() + " > " + Tuple.MAX_ARITY);
                    }
                    return Types.TUPLE(a.toArray(new TypeInformation<?>[0]));
                }
                case "ROW": {
                    expect('<');
                    List<String> names = new ArrayList<>();
                    List<TypeInformation<?>> types = new ArrayList<>();
                    do {
                        names.add(fieldName());
                        types.add(type());
                    } while (accept(','));
                    expect('>');
                    return Types.ROW_NAMED(names.toArray(new String[0]), types.toArray(new TypeInformation<?>[0]));
                }
                default:
                    throw error("unknown type " + name);
            }
        }
    }

    // ------------------------------------------------------------------ value encoding

    public static Object enc(Object v) {
        if (v == null || v instanceof String || v instanceof Boolean || v instanceof Long || v instanceof Integer
                || v instanceof Short || v instanceof Byte || v instanceof Double || v instanceof byte[]) {
            return v;
        }
        if (v instanceof Character) {
            return String.valueOf(v);
        }
        if (v instanceof Float) {
            return ((Float) v).doubleValue();
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
            return pair(t.toLocalDate().toEpochDay(), t.toLocalTime().toNanoOfDay());
        }
        if (v instanceof Instant) {
            Instant i = (Instant) v;
            return pair(i.getEpochSecond(), (long) i.getNano());
        }
        if (v instanceof Tuple) {
            Tuple t = (Tuple) v;
            List<Object> out = new ArrayList<>(t.getArity());
            for (int i = 0; i < t.getArity(); i++) {
                out.add(enc(t.getField(i)));
            }
            return out;
        }
        if (v instanceof Row) {
            Row r = (Row) v;
            List<Object> out = new ArrayList<>(r.getArity());
            for (int i = 0; i < r.getArity(); i++) {
                out.add(enc(r.getField(i)));
            }
            return out;
        }
        if (v instanceof java.sql.Timestamp) {
            java.sql.Timestamp t = (java.sql.Timestamp) v;
            return pair(t.getTime(), (long) t.getNanos());
        }
        if (v instanceof java.util.Date) {
            return ((java.util.Date) v).getTime(); // java.sql.Date, java.sql.Time: epoch millis
        }
        if (v instanceof Either) {
            Either<?, ?> e = (Either<?, ?>) v;
            Map<String, Object> m = new java.util.LinkedHashMap<>();
            if (e.isLeft()) {
                m.put("left", enc(e.left()));
            } else {
                m.put("right", enc(e.right()));
            }
            return m;
        }
        if (v.getClass().isArray() && v.getClass().getComponentType().isPrimitive()) {
            // int[], long[], short[], float[], double[], char[], boolean[] (byte[] is base64, above)
            List<Object> out = new ArrayList<>();
            for (int i = 0; i < java.lang.reflect.Array.getLength(v); i++) {
                out.add(enc(java.lang.reflect.Array.get(v, i)));
            }
            return out;
        }
        if (v instanceof Map) {
            return entries(((Map<?, ?>) v).entrySet());
        }
        if (v instanceof Collection) {
            List<Object> out = new ArrayList<>();
            for (Object o : (Collection<?>) v) {
                out.add(enc(o));
            }
            return out;
        }
        if (v instanceof Object[]) {
            List<Object> out = new ArrayList<>();
            for (Object o : (Object[]) v) {
                out.add(enc(o));
            }
            return out;
        }
        throw new IllegalArgumentException("no JSON mapping for " + v.getClass().getName() + ": " + v);
    }

    /** Map entries as [[enc(k), enc(v)], ...] sorted by the encoded key. */
    public static List<Object> entries(Iterable<? extends Map.Entry<?, ?>> entries) {
        List<Object> out = new ArrayList<>();
        for (Map.Entry<?, ?> e : entries) {
            out.add(pair(enc(e.getKey()), enc(e.getValue())));
        }
        out.sort(BY_FIRST);
        return out;
    }

    public static List<Object> pair(Object a, Object b) {
        List<Object> l = new ArrayList<>(2);
        l.add(a);
        l.add(b);
        return l;
    }

    // ------------------------------------------------------------------ ordering of encoded values

    private static int rank(Object o) {
        if (o == null) {
            return 0;
        }
        if (o instanceof Boolean) {
            return 1;
        }
        if (o instanceof Number) {
            return 2;
        }
        if (o instanceof String) {
            return 3;
        }
        if (o instanceof byte[]) {
            return 4;
        }
        if (o instanceof List) {
            return 5;
        }
        return 6;
    }

    /** Total order over encoded values: null, booleans, numbers, strings, bytes, lists. */
    public static final Comparator<Object> ORDER = new Comparator<Object>() {
        @Override
        public int compare(Object a, Object b) {
            int ra = rank(a);
            int rb = rank(b);
            if (ra != rb) {
                return Integer.compare(ra, rb);
            }
            switch (ra) {
                case 0:
                    return 0;
                case 1:
                    return Boolean.compare((Boolean) a, (Boolean) b);
                case 2: {
                    Number x = (Number) a;
                    Number y = (Number) b;
                    boolean fx = x instanceof Double || x instanceof Float;
                    boolean fy = y instanceof Double || y instanceof Float;
                    if (!fx && !fy) {
                        return Long.compare(x.longValue(), y.longValue());
                    }
                    return Double.compare(x.doubleValue(), y.doubleValue());
                }
                case 3:
                    return ((String) a).compareTo((String) b);
                case 4: {
                    byte[] x = (byte[]) a;
                    byte[] y = (byte[]) b;
                    for (int i = 0; i < Math.min(x.length, y.length); i++) {
                        int c = Integer.compare(x[i] & 0xff, y[i] & 0xff);
                        if (c != 0) {
                            return c;
                        }
                    }
                    return Integer.compare(x.length, y.length);
                }
                case 5: {
                    List<?> x = (List<?>) a;
                    List<?> y = (List<?>) b;
                    for (int i = 0; i < Math.min(x.size(), y.size()); i++) {
                        int c = compare(x.get(i), y.get(i));
                        if (c != 0) {
                            return c;
                        }
                    }
                    return Integer.compare(x.size(), y.size());
                }
                default:
                    return String.valueOf(a).compareTo(String.valueOf(b));
            }
        }
    };

    /** Orders [k, v] pairs by k, then v. */
    public static final Comparator<Object> BY_FIRST = (a, b) -> {
        List<?> x = (List<?>) a;
        List<?> y = (List<?>) b;
        int c = ORDER.compare(x.get(0), y.get(0));
        return c != 0 ? c : ORDER.compare(x.get(1), y.get(1));
    };
}
