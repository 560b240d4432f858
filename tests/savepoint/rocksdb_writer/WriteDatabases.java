import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;

import org.rocksdb.BlockBasedTableConfig;
import org.rocksdb.ColumnFamilyDescriptor;
import org.rocksdb.ColumnFamilyHandle;
import org.rocksdb.ColumnFamilyOptions;
import org.rocksdb.CompressionType;
import org.rocksdb.DBOptions;
import org.rocksdb.FlushOptions;
import org.rocksdb.RocksDB;

/**
 * Databases written by the RocksDB that Flink bundles (frocksdb, from flink-dist), with the
 * string-append merge operator Flink configures, for tests/savepoint/test_sst_generated.py.
 *
 * <p>Usage: WriteDatabases DIR NAME COMPRESSION PREFIX SEED RANGE_DELETES FORMAT_VERSION [NAME ...]: each
 * group of six arguments (COMPRESSION: a CompressionType name) writes the database DIR/NAME: two column families, six generations of puts,
 * merges, deletions and single deletions (of keys written once) over a small key space (so keys
 * recur across generations and files), a flush after each generation, the first three compacted
 * into the last level (the later ones stay overlapping L0 files), and range deletions when
 * RANGE_DELETES is "true". Keys start with a key-group prefix of PREFIX bytes.
 */
public class WriteDatabases {

    public static void main(String[] args) throws Exception {
        RocksDB.loadLibrary();
        String dir = args[0];
        for (int i = 1; i + 6 <= args.length; i += 6) {
            write(dir + "/" + args[i], CompressionType.valueOf(args[i + 1]), Integer.parseInt(args[i + 2]),
                    Long.parseLong(args[i + 3]), Boolean.parseBoolean(args[i + 4]), Integer.parseInt(args[i + 5]));
        }
    }

    private static byte[] key(Random rng, int prefix) {
        int kg = rng.nextInt(prefix == 1 ? 128 : 600);
        byte[] suffix = new byte[1 + rng.nextInt(3)];
        for (int i = 0; i < suffix.length; i++) {
            suffix[i] = (byte) ('a' + rng.nextInt(4));
        }
        byte[] out = new byte[prefix + suffix.length];
        if (prefix == 1) {
            out[0] = (byte) kg;
        } else {
            out[0] = (byte) (kg >> 8);
            out[1] = (byte) kg;
        }
        System.arraycopy(suffix, 0, out, prefix, suffix.length);
        return out;
    }

    private static byte[] value(Random rng) {
        int[] sizes = {0, 1, 8, 40, 300};
        byte[] v = new byte[sizes[rng.nextInt(sizes.length)]];
        rng.nextBytes(v);
        return v;
    }

    private static void write(String path, CompressionType compression, int prefix, long seed, boolean rangeDeletes,
                              int formatVersion) throws Exception {
        Random rng = new Random(seed);
        BlockBasedTableConfig table = new BlockBasedTableConfig()
                .setBlockSize(512)
                .setBlockRestartInterval(4)
                .setFormatVersion(formatVersion);
        ColumnFamilyOptions cfOptions = new ColumnFamilyOptions()
                .setMergeOperatorName("stringappendtest")
                .setCompressionType(compression)
                .setTableFormatConfig(table)
                .setDisableAutoCompactions(true);
        DBOptions dbOptions = new DBOptions().setCreateIfMissing(true).setCreateMissingColumnFamilies(true);
        List<ColumnFamilyDescriptor> descriptors = Arrays.asList(
                new ColumnFamilyDescriptor(RocksDB.DEFAULT_COLUMN_FAMILY, cfOptions),
                new ColumnFamilyDescriptor("state-0".getBytes(), cfOptions),
                new ColumnFamilyDescriptor("state-1".getBytes(), cfOptions));
        List<ColumnFamilyHandle> handles = new ArrayList<>();
        try (RocksDB db = RocksDB.open(dbOptions, path, descriptors, handles);
             FlushOptions flush = new FlushOptions().setWaitForFlush(true)) {
            List<Map<String, Integer>> writes = new ArrayList<>();
            for (int f = 0; f < 2; f++) {
                writes.add(new HashMap<>());
            }
            for (int generation = 0; generation < 6; generation++) {
                for (int f = 0; f < 2; f++) {
                    ColumnFamilyHandle cf = handles.get(f + 1);
                    Map<String, Integer> written = writes.get(f);  // key -> puts since it last disappeared (-1: merged)
                    for (int op = 0; op < 400; op++) {
                        byte[] k = key(rng, prefix);
                        String id = Arrays.toString(k);
                        double r = rng.nextDouble();
                        if (r < 0.35) {
                            db.put(cf, k, value(rng));
                            written.merge(id, 1, (a, b) -> a < 0 ? -1 : a + b);
                        } else if (r < 0.7) {
                            db.merge(cf, k, value(rng));
                            written.put(id, -1);
                        } else if (r < 0.85) {
                            db.delete(cf, k);
                            written.remove(id);
                        } else if (r < 0.92) {
                            if (written.getOrDefault(id, 0) == 1) {  // single deletion: of a key put once only
                                db.singleDelete(cf, k);
                                written.remove(id);
                            }
                        } else if (rangeDeletes && r < 0.94) {
                            byte[] end = key(rng, prefix);
                            byte[] lo = Arrays.compareUnsigned(k, end) <= 0 ? k : end;
                            byte[] hi = lo == k ? end : k;
                            db.deleteRange(cf, lo, hi);
                            written.clear();  // forget: no single deletion after a range deletion
                        } else {
                            db.put(cf, k, value(rng));
                            written.merge(id, 1, (a, b) -> a < 0 ? -1 : a + b);
                        }
                    }
                }
                db.flush(flush, handles);
                if (generation == 2) {
                    for (ColumnFamilyHandle cf : handles) {
                        db.compactRange(cf);
                    }
                }
            }
        } finally {
            for (ColumnFamilyHandle h : handles) {
                h.close();
            }
        }
    }
}
