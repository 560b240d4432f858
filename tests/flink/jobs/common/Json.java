import java.util.Base64;
import java.util.Collection;
import java.util.Map;

import org.apache.flink.api.java.tuple.Tuple;

/**
 * Tiny hand-written JSON writer (no dependencies). Value mapping used by dump.json:
 * Long/Integer/Short/Byte -> int, Double/Float -> number, String -> string (non-ASCII is
 * written as \\uXXXX escapes, so the file is pure ASCII), Boolean -> true/false,
 * byte[] -> base64 string, Flink Tuple -> array of its fields, Collection/Object[] -> array,
 * Map -> object (keys via String.valueOf), null -> null.
 */
public final class Json {
    private Json() {}

    public static String write(Object value) {
        StringBuilder sb = new StringBuilder();
        write(sb, value, 0);
        sb.append('\n');
        return sb.toString();
    }

    private static void indent(StringBuilder sb, int level) {
        sb.append('\n');
        for (int i = 0; i < level; i++) {
            sb.append("  ");
        }
    }

    /** Containers are written on one line when all elements are scalars or the line is short. */
    private static final int INLINE_WIDTH = 100;

    private static boolean isScalar(Object v) {
        return !(v instanceof Map || v instanceof Collection || v instanceof Object[] || v instanceof Tuple);
    }

    private static boolean allScalar(Collection<?> items) {
        for (Object o : items) {
            if (!isScalar(o)) {
                return false;
            }
        }
        return true;
    }

    private static void write(StringBuilder sb, Object v, int level) {
        write(sb, v, level, false);
    }

    @SuppressWarnings("unchecked")
    private static void write(StringBuilder sb, Object v, int level, boolean compact) {
        if (v == null) {
            sb.append("null");
        } else if (v instanceof String) {
            string(sb, (String) v);
        } else if (v instanceof Boolean) {
            sb.append(((Boolean) v) ? "true" : "false");
        } else if (v instanceof Long || v instanceof Integer || v instanceof Short || v instanceof Byte) {
            sb.append(((Number) v).longValue());
        } else if (v instanceof Double || v instanceof Float) {
            double d = ((Number) v).doubleValue();
            if (Double.isNaN(d) || Double.isInfinite(d)) {
                throw new IllegalArgumentException("JSON cannot hold " + d);
            }
            sb.append(v instanceof Float ? Float.toString((Float) v) : Double.toString(d));
        } else if (v instanceof Character) {
            string(sb, String.valueOf(v));
        } else if (v instanceof byte[]) {
            string(sb, Base64.getEncoder().encodeToString((byte[]) v));
        } else if (v instanceof Tuple) {
            Tuple t = (Tuple) v;
            Object[] fields = new Object[t.getArity()];
            for (int i = 0; i < fields.length; i++) {
                fields[i] = t.getField(i);
            }
            write(sb, java.util.Arrays.asList(fields), level, compact);
        } else if (v instanceof Object[]) {
            write(sb, java.util.Arrays.asList((Object[]) v), level, compact);
        } else if (v instanceof Map || v instanceof Collection) {
            boolean isMap = v instanceof Map;
            Collection<Object> items = isMap ? (Collection<Object>) (Collection<?>) ((Map<Object, Object>) v).entrySet()
                    : (Collection<Object>) v;
            if (items.isEmpty()) {
                sb.append(isMap ? "{}" : "[]");
                return;
            }
            boolean oneLine = compact || (!isMap && allScalar(items));
            if (!oneLine) {
                StringBuilder probe = new StringBuilder();
                write(probe, v, level, true);
                if (probe.length() + 2 * level <= INLINE_WIDTH) {
                    sb.append(probe);
                    return;
                }
            }
            sb.append(isMap ? '{' : '[');
            boolean first = true;
            for (Object o : items) {
                if (!first) {
                    sb.append(oneLine ? ", " : ",");
                }
                first = false;
                if (!oneLine) {
                    indent(sb, level + 1);
                }
                if (isMap) {
                    Map.Entry<Object, Object> e = (Map.Entry<Object, Object>) o;
                    string(sb, String.valueOf(e.getKey()));
                    sb.append(": ");
                    write(sb, e.getValue(), level + 1, compact);
                } else {
                    write(sb, o, level + 1, compact);
                }
            }
            if (!oneLine) {
                indent(sb, level);
            }
            sb.append(isMap ? '}' : ']');
        } else {
            throw new IllegalArgumentException("no JSON mapping for " + v.getClass() + ": " + v);
        }
    }

    private static void string(StringBuilder sb, String s) {
        sb.append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"': sb.append("\\\""); break;
                case '\\': sb.append("\\\\"); break;
                case '\n': sb.append("\\n"); break;
                case '\r': sb.append("\\r"); break;
                case '\t': sb.append("\\t"); break;
                default:
                    if (c < 0x20 || c > 0x7e) {
                        sb.append(String.format("\\u%04x", (int) c));
                    } else {
                        sb.append(c);
                    }
            }
        }
        sb.append('"');
    }
}
