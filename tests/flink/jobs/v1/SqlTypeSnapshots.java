// GENERATED from ../v2/SqlTypeSnapshots.java by ../make_v1.py -- edit v2 and re-run make_v1.py.
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
import org.apache.flink.table.runtime.typeutils.ExternalSerializer;
import org.apache.flink.table.runtime.typeutils.InternalTypeInfo;
import org.apache.flink.table.types.DataType;
import org.apache.flink.table.types.logical.LogicalType;
import org.apache.flink.table.types.logical.utils.LogicalTypeParser;
import org.apache.flink.table.types.utils.DataTypeUtils;
import org.apache.flink.table.types.utils.TypeConversions;

/**
 * Oracle of the bytes Flink writes for table types (tests/flink/test_sql_bootstrap_oracle.py):
 * for every line of the input file (a type in Flink SQL syntax, e.g. ROW<k STRING, n BIGINT NOT NULL>)
 * one output line "TYPE<TAB>hex(Java serialization of the LogicalType)<TAB>hex(the versioned
 * serializer snapshot of InternalTypeInfo.of(type)'s serializer, as TypeSerializerSnapshot
 * .writeVersionedSnapshot writes it)".
 *
 * A line EXTERNAL<TYPE>, EXTERNAL<TYPE, INTERNAL> or EXTERNAL<TYPE, 'conversion.Class'> names a DataType
 * instead (Flink's default conversion classes, the internal ones of DataTypeUtils.toInternalDataType, or
 * the default ones bridged to the given class at the top); its line holds the Java serialization of that
 * DataType and the versioned snapshot of ExternalSerializer.of(dataType).
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
            Object written;
            TypeSerializer<?> serializer;
            if (line.startsWith("EXTERNAL<") && line.endsWith(">")) {
                DataType dataType = dataType(line.substring("EXTERNAL<".length(), line.length() - 1).trim());
                written = dataType;
                serializer = ExternalSerializer.of(dataType);
            } else {
                LogicalType type = LogicalTypeParser.parse(line, SqlTypeSnapshots.class.getClassLoader());
                written = type;
                serializer = InternalTypeInfo.of(type).toSerializer();
            }
            ByteArrayOutputStream java = new ByteArrayOutputStream();
            try (ObjectOutputStream oos = new ObjectOutputStream(java)) {
                oos.writeObject(written);
            }
            DataOutputSerializer snapshot = new DataOutputSerializer(256);
            TypeSerializerSnapshot.writeVersionedSnapshot(snapshot, serializer.snapshotConfiguration());
            out.add(line + "\t" + hex(java.toByteArray()) + "\t" + hex(snapshot.getCopyOfBuffer()));
        }
        Files.write(Paths.get(args[1]), out, StandardCharsets.UTF_8);
    }

    private static DataType dataType(String text) throws Exception {
        ClassLoader loader = SqlTypeSnapshots.class.getClassLoader();
        if (text.endsWith(", INTERNAL")) {
            String type = text.substring(0, text.length() - ", INTERNAL".length());
            return DataTypeUtils.toInternalDataType(LogicalTypeParser.parse(type, loader));
        }
        if (text.endsWith("'")) {
            int comma = text.lastIndexOf(", '");
            LogicalType type = LogicalTypeParser.parse(text.substring(0, comma), loader);
            Class<?> conversion = Class.forName(text.substring(comma + 3, text.length() - 1), false, loader);
            return TypeConversions.fromLogicalToDataType(type).bridgedTo(conversion);
        }
        return TypeConversions.fromLogicalToDataType(LogicalTypeParser.parse(text, loader));
    }

    private static String hex(byte[] bytes) {
        StringBuilder sb = new StringBuilder();
        for (byte b : bytes) {
            sb.append(String.format("%02x", b & 0xff));
        }
        return sb.toString();
    }
}
