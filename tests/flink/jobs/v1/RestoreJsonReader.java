// GENERATED from ../v2/RestoreJsonReader.java by ../make_v1.py -- edit v2 and re-run make_v1.py.
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * Minimal JSON reader for RestoreJob's config file (the shared Json class only writes).
 *
 * Objects become LinkedHashMap (key order kept), arrays ArrayList, integral numbers Long,
 * other numbers Double, true/false Boolean, null null.
 */
public final class RestoreJsonReader {
    private final String s;
    private int pos;

    private RestoreJsonReader(String s) {
        this.s = s;
    }

    public static Object parse(String text) {
        RestoreJsonReader r = new RestoreJsonReader(text);
        r.skipSpace();
        Object v = r.value();
        r.skipSpace();
        if (r.pos != r.s.length()) {
            throw r.error("trailing characters");
        }
        return v;
    }

    private IllegalArgumentException error(String what) {
        int from = Math.max(0, pos - 20);
        int to = Math.min(s.length(), pos + 20);
        return new IllegalArgumentException("bad JSON at offset " + pos + " (" + what + "): ..." + s.substring(from, to) + "...");
    }

    private void skipSpace() {
        while (pos < s.length() && Character.isWhitespace(s.charAt(pos))) {
            pos++;
        }
    }

    private char peek() {
        if (pos >= s.length()) {
            throw error("unexpected end");
        }
        return s.charAt(pos);
    }

    private void expect(char c) {
        if (peek() != c) {
            throw error("expected '" + c + "'");
        }
        pos++;
    }

    private Object value() {
        char c = peek();
        switch (c) {
            case '{':
                return object();
            case '[':
                return array();
            case '"':
                return string();
            case 't':
                literal("true");
                return Boolean.TRUE;
            case 'f':
                literal("false");
                return Boolean.FALSE;
            case 'n':
                literal("null");
                return null;
            default:
                if (c == '-' || (c >= '0' && c <= '9')) {
                    return number();
                }
                throw error("unexpected character");
        }
    }

    private void literal(String word) {
        if (!s.startsWith(word, pos)) {
            throw error("expected " + word);
        }
        pos += word.length();
    }

    private Map<String, Object> object() {
        expect('{');
        Map<String, Object> m = new LinkedHashMap<>();
        skipSpace();
        if (peek() == '}') {
            pos++;
            return m;
        }
        while (true) {
            skipSpace();
            String k = string();
            skipSpace();
            expect(':');
            skipSpace();
            m.put(k, value());
            skipSpace();
            if (peek() == ',') {
                pos++;
                continue;
            }
            expect('}');
            return m;
        }
    }

    private List<Object> array() {
        expect('[');
        List<Object> l = new ArrayList<>();
        skipSpace();
        if (peek() == ']') {
            pos++;
            return l;
        }
        while (true) {
            skipSpace();
            l.add(value());
            skipSpace();
            if (peek() == ',') {
                pos++;
                continue;
            }
            expect(']');
            return l;
        }
    }

    private String string() {
        expect('"');
        StringBuilder sb = new StringBuilder();
        while (true) {
            char c = peek();
            pos++;
            if (c == '"') {
                return sb.toString();
            }
            if (c != '\\') {
                sb.append(c);
                continue;
            }
            char e = peek();
            pos++;
            switch (e) {
                case '"': sb.append('"'); break;
                case '\\': sb.append('\\'); break;
                case '/': sb.append('/'); break;
                case 'b': sb.append('\b'); break;
                case 'f': sb.append('\f'); break;
                case 'n': sb.append('\n'); break;
                case 'r': sb.append('\r'); break;
                case 't': sb.append('\t'); break;
                case 'u':
                    if (pos + 4 > s.length()) {
                        throw error("short \\u escape");
                    }
                    sb.append((char) Integer.parseInt(s.substring(pos, pos + 4), 16));
                    pos += 4;
                    break;
                default:
                    throw error("bad escape");
            }
        }
    }

    private Object number() {
        int start = pos;
        boolean integral = true;
        while (pos < s.length()) {
            char c = s.charAt(pos);
            if ((c >= '0' && c <= '9') || c == '-' || c == '+') {
                pos++;
            } else if (c == '.' || c == 'e' || c == 'E') {
                integral = false;
                pos++;
            } else {
                break;
            }
        }
        String t = s.substring(start, pos);
        try {
            return integral ? (Object) Long.parseLong(t) : (Object) Double.parseDouble(t);
        } catch (NumberFormatException e) {
            throw error("bad number " + t);
        }
    }
}
