import java.io.ByteArrayOutputStream;
import java.io.ObjectOutputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.List;

import org.apache.flink.api.common.typeutils.TypeSerializer;
import org.apache.flink.api.common.typeutils.TypeSerializerSnapshot;
import org.apache.flink.core.memory.DataOutputSerializer;
import org.apache.flink.table.runtime.typeutils.InternalTypeInfo;
import org.apache.flink.table.types.logical.LogicalType;
import org.apache.flink.table.types.logical.utils.LogicalTypeParser;

/**
 * Oracle of the bytes Flink writes for table types (tests/flink/test_sql_bootstrap_oracle.py):
 * for every line of the input file (a type in Flink SQL syntax, e.g. ROW<k STRING, n BIGINT NOT NULL>)
 * one output line "TYPE<TAB>hex(Java serialization of the LogicalType)<TAB>hex(the versioned
 * serializer snapshot of InternalTypeInfo.of(type)'s serializer, as TypeSerializerSnapshot
 * .writeVersionedSnapshot writes it)".
 *
 * Args: IN_FILE OUT_FILE.
 */
public class SqlTypeSnapshots {
    public static void main(String[] args) throws Exception {
        List<String> out = new ArrayList<>();
        for (String line : Files.readAllLines(Paths.get(args[0]), StandardCharsets.UTF_8)) {
            if (line.trim().isEmpty()) {
                continue;
            }
            LogicalType type = LogicalTypeParser.parse(line, SqlTypeSnapshots.class.getClassLoader());
            ByteArrayOutputStream java = new ByteArrayOutputStream();
            try (ObjectOutputStream oos = new ObjectOutputStream(java)) {
                oos.writeObject(type);
            }
            TypeSerializer<?> serializer = InternalTypeInfo.of(type).toSerializer();
            DataOutputSerializer snapshot = new DataOutputSerializer(256);
            TypeSerializerSnapshot.writeVersionedSnapshot(snapshot, serializer.snapshotConfiguration());
            out.add(line + "\t" + hex(java.toByteArray()) + "\t" + hex(snapshot.getCopyOfBuffer()));
        }
        Files.write(Paths.get(args[1]), out, StandardCharsets.UTF_8);
    }

    private static String hex(byte[] bytes) {
        StringBuilder sb = new StringBuilder();
        for (byte b : bytes) {
            sb.append(String.format("%02x", b & 0xff));
        }
        return sb.toString();
    }
}
