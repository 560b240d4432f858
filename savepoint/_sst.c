/* fstate.savepoint._sst: RocksDB's block-based table files (SST) read in C, merged as RocksDB reads
 * a column family, into one buffer of pairs for the columnar decoder (no Python object per pair).
 *
 * rocksdict (RocksDB itself) is the reference and the fallback: savepoint/rocksdb_native.py uses
 * this module only for tables it reads completely, and tests/savepoint/test_sst.py compares both
 * on generated databases and every sample.
 *
 * Table(path)                      opens one table file (mmap): footer (format version 2..6),
 *                                  metaindex, properties, index block (binary search index)
 *     .column_family               the column family its properties name (bytes)
 * Merger((table, ...), prefix)     the tables of one column family, merged by internal key:
 *     .seek(user_key)              every table at its first user key >= user_key (before a read)
 *     .read(last_key_group) -> bytes
 *                                  the visible pairs up to the key group last_key_group (the key's
 *                                  first `prefix` bytes), in key order, each as uint32 key length,
 *                                  key, uint32 value length, value (native byte order). Per user
 *                                  key the newest entry (highest sequence number) decides: a value
 *                                  is the pair; a deletion hides it and every older entry; merge
 *                                  operands are joined as RocksDB's string-append operator joins
 *                                  them (the older value if any, then the operands oldest first,
 *                                  ',' between each).
 *
 * Errors: Unsupported((path, reason)) when a table uses a feature this reader does not read
 * (raised by Table(), before any pair is read); Corrupt((path, problem)) for bytes that are not a
 * valid table (checksums are verified on every block read).
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include "_sst_codecs.h"

#define TRAILER 5                  /* a block's compression type byte and checksum */
#define FOOTER 53                  /* format version 1+ */
#define LAST_FORMAT 6
#define MAGIC 0x88e241b785f4cff7ull

static PyObject *Unsupported, *Corrupt;

static int
fail(PyObject *type, PyObject *path, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    PyObject *msg = PyUnicode_FromFormatV(fmt, ap);
    va_end(ap);
    if (msg != NULL) {
        PyObject *args = Py_BuildValue("(ON)", path, msg);
        if (args != NULL) {
            PyErr_SetObject(type, args);
            Py_DECREF(args);
        }
    }
    return -1;
}

/* ------------------------------------------------------------------------------------------ */
/* blocks */

typedef struct {
    const uint8_t *p;
    size_t n;
    uint8_t *owned;                /* decompressed memory, or NULL (p points into the file) */
} Block;

static void block_free(Block *b) { free(b->owned); b->owned = NULL; b->p = NULL; b->n = 0; }

typedef struct {
    PyObject_HEAD
    PyObject *path;
    uint8_t *map;
    size_t size;
    int checksum, format_version, index_user_key, index_delta;
    uint32_t base_checksum;        /* format version 6+: what every block's checksum is offset by */
    PyObject *column_family;
    size_t nblocks;
    uint64_t *offset, *length;     /* the data blocks' handles */
    size_t *sep_at;                /* the index's separator keys in sep (nblocks + 1 offsets) */
    uint8_t *sep;
} Table;

/* the block at (offset, size): checksum verified, decompressed */
static int
read_block(Table *t, uint64_t offset, uint64_t size, Block *out, const char *what)
{
    if (offset > t->size || size > t->size - offset || t->size - offset - size < TRAILER)
        return fail(Corrupt, t->path, "the %s block at byte %llu (%llu bytes) is outside the file of %zu bytes",
                    what, (unsigned long long)offset, (unsigned long long)size, t->size);
    const uint8_t *b = t->map + offset;
    if (!checksum_ok(t->checksum, b, (size_t)size, le32(b + size + 1), t->base_checksum, offset))
        return fail(Corrupt, t->path, "the %s block at byte %llu does not match its checksum", what,
                    (unsigned long long)offset);
    int type = b[size];
    out->owned = NULL;
    if (type == NO_COMPRESSION) {
        out->p = b;
        out->n = (size_t)size;
        return 0;
    }
    uint8_t *dst;
    size_t n;
    const char *problem = decompress(type, b, (size_t)size, &dst, &n);
    if (problem != NULL)
        return fail(Corrupt, t->path, "the %s block at byte %llu: %s (compression type %d)", what,
                    (unsigned long long)offset, problem, type);
    out->p = out->owned = dst;
    out->n = n;
    return 0;
}

/* where a block's entries end (its restart array starts); 0 when the block is malformed */
static size_t
entries_end(const Block *b)
{
    if (b->n < 4)
        return 0;
    uint32_t packed = le32(b->p + b->n - 4);
    size_t end = b->n - 4;
    if (packed & 0x80000000u) {    /* a data block hash index after the restart array */
        if (end < 2)
            return 0;
        size_t buckets = (size_t)b->p[end - 2] | ((size_t)b->p[end - 1] << 8);
        if (end - 2 < buckets)
            return 0;
        end -= 2 + buckets;
    }
    size_t restarts = packed & 0x7fffffffu;
    if (restarts == 0 || restarts > end / 4)
        return 0;
    return end - 4 * restarts;
}

/* one block's entries in order; key rebuilt from the shared prefix */
typedef struct {
    Block blk;
    size_t pos, end;
    uint8_t *key;
    size_t klen, kcap;
    const uint8_t *val;
    size_t vlen;
} BlockIter;

/* the next entry (1), the end (0), or -1 (malformed: problem set). values_delta: an index block whose
 * values are block handles, the first of each restart in full, the others as a size delta */
static int
block_next(BlockIter *it, int values_delta, const char **problem)
{
    if (it->pos >= it->end)
        return 0;
    const uint8_t *p = it->blk.p + it->pos, *end = it->blk.p + it->end;
    uint32_t shared, fresh, vlen = 0;
    if (!get_varint32(&p, end, &shared) || !get_varint32(&p, end, &fresh)
        || (!values_delta && !get_varint32(&p, end, &vlen)) || shared > it->klen || (size_t)(end - p) < fresh) {
        *problem = "an entry that does not decode";
        return -1;
    }
    size_t klen = (size_t)shared + fresh;
    if (klen > it->kcap) {
        size_t cap = klen * 2 + 64;
        uint8_t *k = realloc(it->key, cap);
        if (k == NULL) {
            *problem = "out of memory";
            return -1;
        }
        it->key = k;
        it->kcap = cap;
    }
    copy_bytes(it->key + shared, p, fresh);
    it->klen = klen;
    p += fresh;
    if (values_delta) {            /* the value's length is that of the handle it encodes */
        const uint8_t *v = p;
        uint64_t a, b;
        if (!get_varint64(&p, end, &a) || (shared == 0 && !get_varint64(&p, end, &b))) {
            *problem = "an index entry that does not decode";
            return -1;
        }
        vlen = (uint32_t)(p - v);
        p = v;
    }
    if ((size_t)(end - p) < vlen) {
        *problem = "an entry that does not decode";
        return -1;
    }
    it->val = p;
    it->vlen = vlen;
    it->pos = (size_t)(p + vlen - it->blk.p);
    return 1;
}

static void iter_free(BlockIter *it) { block_free(&it->blk); free(it->key); memset(it, 0, sizeof(*it)); }

/* ------------------------------------------------------------------------------------------ */
/* Table */

static int
parse_properties(Table *t, const Block *b)
{
    BlockIter it = {.blk = *b, .end = entries_end(b)};
    const char *problem = NULL;
    int rc, found_index_type = 0;
    long long range_deletions = -1;
    if (it.end == 0)
        return fail(Corrupt, t->path, "the properties block is malformed");
    while ((rc = block_next(&it, 0, &problem)) == 1) {
        const char *k = (const char *)it.key;
        size_t n = it.klen;
        const uint8_t *v = it.val, *vend = it.val + it.vlen;
        uint64_t x = 0;
#define KEY(s) (n == sizeof(s) - 1 && memcmp(k, s, n) == 0)
        if (KEY("rocksdb.comparator")) {
            if (!(it.vlen == 26 && memcmp(v, "leveldb.BytewiseComparator", 26) == 0))
                rc = fail(Unsupported, t->path, "the comparator %.*s", (int)it.vlen, v);
        } else if (KEY("rocksdb.compression")) {
            if (!compression_supported((const char *)v, it.vlen))
                rc = fail(Unsupported, t->path, "the compression %.*s", (int)it.vlen, v);
        } else if (KEY("rocksdb.block.based.table.index.type")) {
            found_index_type = 1;
            if (it.vlen != 4 || le32(v) != 0)
                rc = fail(Unsupported, t->path, "an index that is not a binary search index");
        } else if (KEY("rocksdb.index.key.is.user.key")) {
            t->index_user_key = get_varint64(&v, vend, &x) && x != 0;
        } else if (KEY("rocksdb.index.value.is.delta.encoded")) {
            t->index_delta = get_varint64(&v, vend, &x) && x != 0;
        } else if (KEY("rocksdb.num.range-deletions")) {
            range_deletions = get_varint64(&v, vend, &x) ? (long long)x : -1;
        } else if (KEY("rocksdb.column.family.name")) {
            Py_XSETREF(t->column_family, PyBytes_FromStringAndSize((const char *)v, it.vlen));
            if (t->column_family == NULL)
                rc = -1;
        }
#undef KEY
        if (rc < 0)
            return -1;
    }
    if (rc < 0)
        return fail(Corrupt, t->path, "the properties block: %s", problem);
    if (!found_index_type || t->column_family == NULL)
        return fail(Unsupported, t->path, "properties without the index type or the column family");
    if (range_deletions != 0)
        return fail(Unsupported, t->path, "range deletions");
    return 0;
}

static int
parse_index(Table *t, const Block *b)
{
    BlockIter it = {.blk = *b, .end = entries_end(b)};
    const char *problem = "a malformed block";
    size_t cap = 64, sep_cap = 4096, sep_len = 0;
    uint64_t prev_offset = 0, prev_length = 0;
    int rc = it.end ? 1 : -1;
    t->offset = malloc(cap * sizeof(uint64_t));
    t->length = malloc(cap * sizeof(uint64_t));
    t->sep_at = malloc((cap + 1) * sizeof(size_t));
    t->sep = malloc(sep_cap);
    if (!t->offset || !t->length || !t->sep_at || !t->sep) {
        PyErr_NoMemory();
        goto error;
    }
    while (rc > 0 && (rc = block_next(&it, t->index_delta, &problem)) == 1) {
        if (t->nblocks == cap) {
            cap *= 2;
            uint64_t *o = realloc(t->offset, cap * sizeof(uint64_t));
            if (o) t->offset = o;
            uint64_t *l = realloc(t->length, cap * sizeof(uint64_t));
            if (l) t->length = l;
            size_t *s = realloc(t->sep_at, (cap + 1) * sizeof(size_t));
            if (s) t->sep_at = s;
            if (!o || !l || !s) {
                PyErr_NoMemory();
                goto error;
            }
        }
        /* a full handle (offset, size), or (values delta encoded, not at a restart) the zigzag
         * size difference to the previous block, which this one follows */
        const uint8_t *v = it.val, *vend = it.val + it.vlen;
        uint64_t a = 0, b2 = 0;
        if (!get_varint64(&v, vend, &a)) { problem = "an index entry that does not decode"; rc = -1; break; }
        if (v < vend || !t->index_delta) {
            if (!get_varint64(&v, vend, &b2)) { problem = "an index entry that does not decode"; rc = -1; break; }
            t->offset[t->nblocks] = a;
            t->length[t->nblocks] = b2;
        } else {
            int64_t delta = (int64_t)(a >> 1) ^ -(int64_t)(a & 1);
            if (t->nblocks == 0) { problem = "a delta-encoded first index entry"; rc = -1; break; }
            t->offset[t->nblocks] = prev_offset + prev_length + TRAILER;
            t->length[t->nblocks] = (uint64_t)((int64_t)prev_length + delta);
        }
        if (v != vend) { problem = "an index entry longer than its block handle"; rc = -1; break; }
        prev_offset = t->offset[t->nblocks];
        prev_length = t->length[t->nblocks];
        size_t klen = it.klen;
        if (!t->index_user_key) {
            if (klen < 8) { problem = "an index key shorter than 8 bytes"; rc = -1; break; }
            klen -= 8;
        }
        while (sep_len + klen > sep_cap) {
            sep_cap *= 2;
            uint8_t *s = realloc(t->sep, sep_cap);
            if (s == NULL) {
                PyErr_NoMemory();
                goto error;
            }
            t->sep = s;
        }
        t->sep_at[t->nblocks] = sep_len;
        memcpy(t->sep + sep_len, it.key, klen);
        sep_len += klen;
        t->nblocks++;
    }
    if (rc < 0) {
        free(it.key);
        return fail(Corrupt, t->path, "the index block: %s", problem);
    }
    t->sep_at[t->nblocks] = sep_len;
    it.blk = (Block){0};           /* the caller frees the block */
    free(it.key);
    return 0;
error:
    it.blk = (Block){0};
    free(it.key);
    return -1;
}

static int
table_open(Table *t)
{
    PyObject *bytes = PyUnicode_EncodeFSDefault(t->path);
    if (bytes == NULL)
        return -1;
    int fd = open(PyBytes_AS_STRING(bytes), O_RDONLY | O_CLOEXEC);
    Py_DECREF(bytes);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0) {
        if (fd >= 0)
            close(fd);
        PyErr_SetFromErrnoWithFilenameObject(PyExc_OSError, t->path);
        return -1;
    }
    t->size = (size_t)st.st_size;
    if (t->size < FOOTER) {
        close(fd);
        return fail(Corrupt, t->path, "a table file of %zu bytes (a footer takes %d)", t->size, FOOTER);
    }
    void *m = mmap(NULL, t->size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (m == MAP_FAILED) {
        PyErr_SetFromErrnoWithFilenameObject(PyExc_OSError, t->path);
        return -1;
    }
    t->map = m;
    const uint8_t *f = t->map + t->size - FOOTER;
    if (le64(f + FOOTER - 8) != MAGIC) {
        if (le64(t->map + t->size - 8) == 0xdb4775248b80fb57ull)
            return fail(Unsupported, t->path, "the table format of RocksDB before 4.x (legacy footer)");
        return fail(Corrupt, t->path, "no block-based table footer (magic number)");
    }
    t->format_version = (int)le32(f + FOOTER - 12);
    t->checksum = f[0];
    if (t->format_version < 2 || t->format_version > LAST_FORMAT)
        return fail(Unsupported, t->path, "table format version %d", t->format_version);
    if (!checksum_supported(t->checksum))
        return fail(Unsupported, t->path, "checksum type %d", t->checksum);
    uint64_t meta_off, meta_len, index_off = 0, index_len = 0;
    int index_found = 0;
    if (t->format_version >= 6) {  /* the metaindex block right before the footer; the index's handle in it */
        static const uint8_t extended[4] = {0x3e, 0x00, 0x7a, 0x00};
        if (memcmp(f + 1, extended, 4) != 0)
            return fail(Corrupt, t->path, "a footer of format version %d without its extended magic number",
                        t->format_version);
        t->base_checksum = le32(f + 9);
        meta_len = le32(f + 13);
        if (meta_len + TRAILER > t->size - FOOTER)
            return fail(Corrupt, t->path, "a metaindex block of %llu bytes in a file of %zu",
                        (unsigned long long)meta_len, t->size);
        meta_off = t->size - FOOTER - TRAILER - meta_len;
    } else {
        const uint8_t *p = f + 1, *end = f + FOOTER - 12;
        if (!get_varint64(&p, end, &meta_off) || !get_varint64(&p, end, &meta_len) || !get_varint64(&p, end, &index_off)
            || !get_varint64(&p, end, &index_len))
            return fail(Corrupt, t->path, "a footer whose block handles do not decode");
        index_found = 1;
    }
    Block meta = {0}, props = {0}, index = {0};
    if (read_block(t, meta_off, meta_len, &meta, "metaindex") < 0)
        return -1;
    BlockIter it = {.blk = meta, .end = entries_end(&meta)};
    const char *problem = "a malformed block";
    int rc = it.end ? 1 : -1, found = 0;
    while (rc > 0 && (rc = block_next(&it, 0, &problem)) == 1) {
        if (it.klen == 18 && memcmp(it.key, "rocksdb.properties", 18) == 0) {
            const uint8_t *v = it.val, *vend = it.val + it.vlen;
            uint64_t off, len;
            if (!get_varint64(&v, vend, &off) || !get_varint64(&v, vend, &len)) {
                problem = "the properties handle does not decode";
                rc = -1;
                break;
            }
            found = 1;
            rc = read_block(t, off, len, &props, "properties") < 0 ? -2 : 1;
        } else if (it.klen == 24 && memcmp(it.key, "rocksdb.compression_dict", 24) == 0) {
            rc = -3;
        } else if (t->format_version >= 6 && it.klen == 13 && memcmp(it.key, "rocksdb.index", 13) == 0) {
            const uint8_t *v = it.val, *vend = it.val + it.vlen;
            if (!get_varint64(&v, vend, &index_off) || !get_varint64(&v, vend, &index_len)) {
                problem = "the index handle does not decode";
                rc = -1;
                break;
            }
            index_found = 1;
        }
    }
    free(it.key);
    block_free(&meta);
    if (rc == -1)
        return fail(Corrupt, t->path, "the metaindex block: %s", problem);
    if (rc == -2)
        return -1;
    if (rc == -3 || !found) {
        block_free(&props);
        return fail(Unsupported, t->path, rc == -3 ? "a compression dictionary" : "no properties block");
    }
    if (!index_found) {
        block_free(&props);
        return fail(Corrupt, t->path, "a metaindex block without the index's handle");
    }
    rc = parse_properties(t, &props);
    block_free(&props);
    if (rc < 0 || read_block(t, index_off, index_len, &index, "index") < 0)
        return -1;
    rc = parse_index(t, &index);
    block_free(&index);
    return rc;
}

static PyObject *
Table_new(PyTypeObject *type, PyObject *args, PyObject *Py_UNUSED(kwds))
{
    PyObject *path;
    if (!PyArg_ParseTuple(args, "U:Table", &path))
        return NULL;
    Table *t = (Table *)type->tp_alloc(type, 0);
    if (t == NULL)
        return NULL;
    Py_INCREF(path);
    t->path = path;
    if (table_open(t) < 0) {
        Py_DECREF(t);
        return NULL;
    }
    return (PyObject *)t;
}

static void
Table_dealloc(Table *t)
{
    if (t->map != NULL)
        munmap(t->map, t->size);
    free(t->offset);
    free(t->length);
    free(t->sep_at);
    free(t->sep);
    Py_XDECREF(t->path);
    Py_XDECREF(t->column_family);
    Py_TYPE(t)->tp_free((PyObject *)t);
}

static PyObject *Table_cf(Table *t, void *Py_UNUSED(c)) { return Py_NewRef(t->column_family); }

static PyGetSetDef Table_getset[] = {
    {"column_family", (getter)Table_cf, NULL, "the column family its properties name (bytes)", NULL},
    {NULL},
};

static PyTypeObject TableType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "fstate.savepoint._sst.Table",
    .tp_basicsize = sizeof(Table),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Table(path): one RocksDB block-based table file",
    .tp_new = Table_new,
    .tp_dealloc = (destructor)Table_dealloc,
    .tp_getset = Table_getset,
};

/* ------------------------------------------------------------------------------------------ */
/* one table read in order */

typedef struct {
    Table *t;
    size_t next_block;             /* the index of the block after the one `it` reads */
    BlockIter it;
    int valid;                     /* it is at an entry */
} Source;

static inline size_t user_len(const Source *s) { return s->it.klen - 8; }
static inline uint64_t trailer(const Source *s) { return le64(s->it.key + s->it.klen - 8); }

/* the entry after the current one, loading blocks as needed */
static int
source_next(Source *s)
{
    for (;;) {
        const char *problem = NULL;
        int rc = s->it.end ? block_next(&s->it, 0, &problem) : 0;
        if (rc < 0)
            return fail(Corrupt, s->t->path, "the data block %zu: %s", s->next_block - 1, problem);
        if (rc == 1) {
            if (s->it.klen < 8)
                return fail(Corrupt, s->t->path, "the data block %zu: a key shorter than 8 bytes", s->next_block - 1);
            s->valid = 1;
            return 0;
        }
        block_free(&s->it.blk);
        s->it.pos = s->it.end = 0;
        s->it.klen = 0;
        if (s->next_block >= s->t->nblocks) {
            s->valid = 0;
            return 0;
        }
        size_t i = s->next_block++;
        if (read_block(s->t, s->t->offset[i], s->t->length[i], &s->it.blk, "data") < 0)
            return -1;
        s->it.end = entries_end(&s->it.blk);
        if (s->it.end == 0)
            return fail(Corrupt, s->t->path, "the data block %zu is malformed", i);
    }
}

/* bytewise order (RocksDB's BytewiseComparator); 8 bytes at a time, inline: keys are short */
static inline int
compare(const uint8_t *a, size_t alen, const uint8_t *b, size_t blen)
{
    size_t n = alen < blen ? alen : blen, i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t x = be64(a + i), y = be64(b + i);
        if (x != y)
            return x < y ? -1 : 1;
    }
    if (i < n && n >= 8) {        /* the last 8 bytes (their first ones are known equal) */
        uint64_t x = be64(a + n - 8), y = be64(b + n - 8);
        if (x != y)
            return x < y ? -1 : 1;
    } else {
        for (; i < n; i++)
            if (a[i] != b[i])
                return a[i] < b[i] ? -1 : 1;
    }
    return alen < blen ? -1 : alen > blen;
}

/* at the first entry whose user key is >= key */
static int
source_seek(Source *s, const uint8_t *key, size_t klen)
{
    Table *t = s->t;
    size_t lo = 0, hi = t->nblocks;        /* the first block whose separator is >= key */
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (compare(t->sep + t->sep_at[mid], t->sep_at[mid + 1] - t->sep_at[mid], key, klen) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    block_free(&s->it.blk);
    s->it.pos = s->it.end = 0;
    s->it.klen = 0;
    s->next_block = lo;
    do {
        if (source_next(s) < 0)
            return -1;
    } while (s->valid && compare(s->it.key, user_len(s), key, klen) < 0);
    return 0;
}

#include "_sst_merge.h"
