// GENERATED from ../v2/PrintCapture.java by ../make_v1.py -- edit v2 and re-run make_v1.py.
import java.io.ByteArrayOutputStream;
import java.io.OutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * Captures what Flink's 'print' table sinks write to System.out ("ident> +I[a, 1]" or, at
 * parallelism > 1, "ident:2> -U[a, 1]") and materialises each identifier's changelog: +I/+U add
 * a row, -U/-D remove one equal row. Other lines pass through to the original stdout.
 *
 * After a restore (install(true)) a retraction may name a row the job printed before its
 * savepoint (the sink's changelog continues from the restored state): such rows are collected
 * per identifier ({@link #retracted()}) instead of failing; they show the restored state.
 */
public final class PrintCapture {
    private PrintCapture() {}

    private static final Pattern LINE = Pattern.compile("^([A-Za-z_][A-Za-z0-9_-]*)(?::\\d+)?> ([+-][IUD])(\\[.*\\])$");
    private static final Map<String, List<String>> ROWS = new LinkedHashMap<>();
    private static final List<String> UNMATCHED = new ArrayList<>();
    private static final Map<String, List<String>> RETRACTED = new LinkedHashMap<>();
    private static boolean installed;
    private static boolean restored;

    public static synchronized void install() {
        install(false);
    }

    /** restoredRun: retractions of rows printed before the restore are collected, not errors. */
    public static synchronized void install(boolean restoredRun) {
        restored = restoredRun;
        if (installed) {
            return;
        }
        installed = true;
        PrintStream original = System.out;
        OutputStream sink = new OutputStream() {
            private final ByteArrayOutputStream line = new ByteArrayOutputStream();

            @Override
            public synchronized void write(int b) {
                if (b == '\n') {
                    String text = new String(line.toByteArray(), StandardCharsets.UTF_8);
                    line.reset();
                    if (!accept(text)) {
                        original.println(text);
                    }
                } else {
                    line.write(b);
                }
            }
        };
        System.setOut(new PrintStream(sink, true));
    }

    private static synchronized boolean accept(String text) {
        Matcher m = LINE.matcher(text.endsWith("\r") ? text.substring(0, text.length() - 1) : text);
        if (!m.matches()) {
            return false;
        }
        List<String> rows = ROWS.computeIfAbsent(m.group(1), k -> new ArrayList<>());
        String kind = m.group(2);
        if (kind.equals("+I") || kind.equals("+U")) {
            rows.add(m.group(3));
        } else if (!rows.remove(m.group(3))) {
            if (restored) {
                RETRACTED.computeIfAbsent(m.group(1), k -> new ArrayList<>()).add(m.group(3));
            } else {
                UNMATCHED.add(text);
            }
        }
        return true;
    }

    /** identifier -> current rows, sorted; fails when a retraction had no row to retract. */
    public static synchronized Map<String, List<String>> materialised() {
        if (!UNMATCHED.isEmpty()) {
            throw new IllegalStateException("retractions without a matching row: " + UNMATCHED);
        }
        Map<String, List<String>> out = new LinkedHashMap<>();
        for (Map.Entry<String, List<String>> e : ROWS.entrySet()) {
            List<String> rows = new ArrayList<>(e.getValue());
            rows.sort(null);
            out.put(e.getKey(), rows);
        }
        return out;
    }

    /** identifier -> rows printed before the restore that the restored job retracted, sorted. */
    public static synchronized Map<String, List<String>> retracted() {
        Map<String, List<String>> out = new LinkedHashMap<>();
        for (Map.Entry<String, List<String>> e : RETRACTED.entrySet()) {
            List<String> rows = new ArrayList<>(e.getValue());
            rows.sort(null);
            out.put(e.getKey(), rows);
        }
        return out;
    }
}
