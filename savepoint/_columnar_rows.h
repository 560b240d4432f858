/* fstate.savepoint._columnar, part 2 (included by _columnar.c only): the Decoder, the joining of
 * rows by identity and the framing of one canonical key group. */

#ifndef FSTATE_COLUMNAR_ROWS_H
#define FSTATE_COLUMNAR_ROWS_H

#include "_columnar_values.h"


/* ------------------------------------------------------------------------------------------ */
/* the decoder */

/* how a heap-native entry of a state without a column is skipped: parts decoded with store = 0 */
enum { SKIP_PLAIN = 0, SKIP_LIST, SKIP_MAP };
typedef struct {
    int kind;                  /* SKIP_PLAIN: a; SKIP_LIST: i32 count x a; SKIP_MAP: i32 count x (a, flag, b) */
    Node a, b;
} SkipPart;

typedef struct {
    int mode;
    int ambiguous;
    int column;                /* -1: not selected */
    Node col;                  /* VALUE: the value; LIST: (LISTC, elem); MAP: (MAPC, (ukey, value)) */
    Buf take;                  /* int32 per row: the state row, -1 none */
    Py_ssize_t count;          /* state rows */
    int identity;              /* take[r] == r so far */
    int32_t last_row;          /* the row of this state's previous entry in the key group */
    SkipPart *skip;            /* heap-native: how an entry is skipped (NULL: it cannot be) */
    Py_ssize_t nskip;
    int native_seen;           /* heap-native: this state's block was read in the current key group */
} Plan;

typedef struct {
    uint32_t gen, hash;
    int32_t row;
} Slot;

typedef struct {
    PyObject_HEAD
    Py_ssize_t nstates;
    Plan *plans;
    Py_ssize_t ncols;
    int *cols;                 /* state id of each column */
    Node key, ns;
    int keep_ns;               /* the namespace column is wanted */
    int prefix;
    PyObject *corrupt;
    PyObject *source;
    Py_ssize_t rows;
    /* identities of the current key group */
    Slot *slots;
    size_t nslots;             /* a power of two */
    uint32_t gen;
    Buf ids;                   /* identity bytes of the key group's rows */
    Buf id_start;              /* int64 per key-group row (+ 1): where its identity starts in ids */
    Buf id_hash;               /* uint32 per hashed key-group row: its identity's hash */
    Py_ssize_t hashed;         /* key-group rows in the hash table (the first ones) */
    int ordered;               /* every key-group row so far was made by creator, in increasing order */
    Plan *creator;
    Buf scratch;
    Py_ssize_t kg_first;       /* the first row of the key group */
    Py_ssize_t failed_cursor;  /* RocksDB: the cursor whose call raised in the last add_pairs_from, or -1 */
} Decoder;

/* raises the CorruptStateError handed to the Decoder; -1 */
#define raise_corrupt(self, ...) wire_corrupt((self)->corrupt, (self)->source, __VA_ARGS__)

static int
decode_failed(Decoder *self, long kg, Err *e)
{
    if (PyErr_Occurred())
        return -1;
    return raise_corrupt(self, "key group %ld: cannot decode the state bytes (%s)", kg, e->msg);
}

static inline uint64_t
mix(uint64_t h, uint64_t v)
{
    h ^= v;
    h *= 0x9E3779B97F4A7C15ULL;
    return h ^ (h >> 29);
}

static inline uint64_t
hash_bytes(uint64_t h, const uint8_t *p, Py_ssize_t n)
{
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h = mix(h, w);
    }
    uint64_t w = 0;
    memcpy(&w, p + i, (size_t)(n - i));
    return mix(h, w ^ ((uint64_t)n << 56));
}

static int
grow_slots(Decoder *self)
{
    size_t n = self->nslots ? self->nslots * 2 : 1024;
    Slot *s = PyMem_Calloc(n, sizeof(Slot));
    if (s == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    const uint32_t *hashes = (const uint32_t *)self->id_hash.p;
    uint32_t gen = 1;
    for (Py_ssize_t r = 0; r < self->hashed; r++) {
        uint32_t h = hashes[r];
        size_t i = h & (n - 1);
        while (s[i].gen == gen)
            i = (i + 1) & (n - 1);
        s[i].gen = gen;
        s[i].hash = h;
        s[i].row = (int32_t)(self->kg_first + r);
    }
    PyMem_Free(self->slots);
    self->slots = s;
    self->nslots = n;
    self->gen = gen;
    return 0;
}

static inline uint32_t
identity_hash(const uint8_t *p, Py_ssize_t n)
{
    uint64_t h = hash_bytes(0x243F6A8885A308D3ULL, p, n);
    return (uint32_t)(h ^ (h >> 32));
}

/* key-group row r (relative) into the hash table */
static int
insert_row(Decoder *self, Py_ssize_t r)
{
    if ((size_t)(self->hashed + 1) * 2 > self->nslots && grow_slots(self) < 0)
        return -1;
    const int64_t *off = (const int64_t *)self->id_start.p;
    uint32_t h = identity_hash(self->ids.p + off[r], (Py_ssize_t)(off[r + 1] - off[r]));
    if (buf_reserve(&self->id_hash, 4) < 0)
        return -1;
    memcpy(self->id_hash.p + self->id_hash.len, &h, 4);
    self->id_hash.len += 4;
    size_t mask = self->nslots - 1, i = h & mask;
    while (self->slots[i].gen == self->gen)
        i = (i + 1) & mask;
    self->slots[i].gen = self->gen;
    self->slots[i].hash = h;
    self->slots[i].row = (int32_t)(self->kg_first + r);
    self->hashed++;
    return 0;
}

/* short byte strings: word compares instead of a libc call (identities are a few bytes) */
static inline int
bytes_equal(const uint8_t *a, const uint8_t *b, Py_ssize_t n)
{
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t x, y;
        memcpy(&x, a + i, 8);
        memcpy(&y, b + i, 8);
        if (x != y)
            return 0;
    }
    for (; i < n; i++)
        if (a[i] != b[i])
            return 0;
    return 1;
}

/* memcmp's sign over n bytes */
static inline int
bytes_compare(const uint8_t *a, const uint8_t *b, Py_ssize_t n)
{
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t x, y;
        memcpy(&x, a + i, 8);
        memcpy(&y, b + i, 8);
        if (x != y) {
            x = __builtin_bswap64(x);
            y = __builtin_bswap64(y);
            return x < y ? -1 : 1;
        }
    }
    for (; i < n; i++)
        if (a[i] != b[i])
            return a[i] < b[i] ? -1 : 1;
    return 0;
}

static inline int
same_identity(Decoder *self, Py_ssize_t r, const uint8_t *a, Py_ssize_t n)
{
    const int64_t *off = (const int64_t *)self->id_start.p;
    return off[r + 1] - off[r] == n && bytes_equal(self->ids.p + off[r], a, n);
}

/* identity a (n bytes) after row r's (bytewise order) */
static inline int
after_identity(Decoder *self, Py_ssize_t r, const uint8_t *a, Py_ssize_t n)
{
    const int64_t *off = (const int64_t *)self->id_start.p;
    Py_ssize_t m = (Py_ssize_t)(off[r + 1] - off[r]);
    int c = bytes_compare(self->ids.p + off[r], a, m < n ? m : n);
    return c < 0 || (c == 0 && m < n);
}

/* The row of an identity (a, na) + (b, nb) in the current key group; *fresh = 1 when it is new.
 * Without hashing when the entries come in the usual order: a state's entries follow the rows in
 * the order the first state made them (sorted), or make new rows in increasing order. Otherwise
 * the rows are hashed (lazily) and looked up. -2: a Python error. */
static int32_t
find_row(Decoder *self, Plan *plan, const uint8_t *a, Py_ssize_t na, const uint8_t *b, Py_ssize_t nb, int *fresh)
{
    Py_ssize_t n = na + nb;
    if (nb) {                  /* an ambiguous key: the identity is key bytes + namespace bytes */
        self->scratch.len = 0;
        if (buf_reserve(&self->scratch, (size_t)n) < 0)
            return -2;
        memcpy(self->scratch.p, a, (size_t)na);
        memcpy(self->scratch.p + na, b, (size_t)nb);
        a = self->scratch.p;
    }
    Py_ssize_t kg_rows = self->rows - self->kg_first;
    *fresh = 0;
    if (plan->last_row >= 0) {
        Py_ssize_t r = plan->last_row - self->kg_first;
        if (same_identity(self, r, a, n))
            return plan->last_row;
        if (r + 1 < kg_rows && same_identity(self, r + 1, a, n))
            return plan->last_row + 1;
    } else if (kg_rows > 0 && same_identity(self, 0, a, n)) {
        return (int32_t)self->kg_first;
    }
    int ordered = kg_rows == 0 ||
                  (self->ordered && self->creator == plan && after_identity(self, kg_rows - 1, a, n));
    if (!ordered) {
        self->ordered = 0;
        while (self->hashed < kg_rows)
            if (insert_row(self, self->hashed) < 0)
                return -2;
        uint32_t h = identity_hash(a, n);
        size_t mask = self->nslots - 1, i = h & mask;
        for (;;) {
            Slot *s = &self->slots[i];
            if (s->gen != self->gen)
                break;
            if (s->hash == h && same_identity(self, s->row - self->kg_first, a, n))
                return s->row;
            i = (i + 1) & mask;
        }
    } else {
        self->creator = plan;
    }
    /* a new row: keep its identity */
    if (buf_reserve(&self->ids, (size_t)n) < 0 || buf_reserve(&self->id_start, 8) < 0)
        return -2;
    memcpy(self->ids.p + self->ids.len, a, (size_t)n);
    self->ids.len += (size_t)n;
    int64_t end = (int64_t)self->ids.len;
    memcpy(self->id_start.p + self->id_start.len, &end, 8);
    self->id_start.len += 8;
    *fresh = 1;
    self->rows++;
    if (!ordered && insert_row(self, kg_rows) < 0)
        return -2;
    return (int32_t)(self->rows - 1);
}

static int
start_key_group(Decoder *self)
{
    self->kg_first = self->rows;
    self->ids.len = 0;
    self->id_start.len = 0;
    self->id_hash.len = 0;
    self->hashed = 0;
    self->ordered = 1;
    self->creator = NULL;
    int64_t zero = 0;
    if (buf_reserve(&self->id_start, 8) < 0)
        return -1;
    memcpy(self->id_start.p, &zero, 8);
    self->id_start.len = 8;
    if (++self->gen == 0) {    /* wrapped: clear every slot once */
        memset(self->slots, 0, self->nslots * sizeof(Slot));
        self->gen = 1;
    }
    for (Py_ssize_t c = 0; c < self->ncols; c++)
        self->plans[self->cols[c]].last_row = -1;
    return 0;
}

/* a new row: key and namespace columns, and no state row yet in any column */
static int
new_row(Decoder *self, int32_t row)
{
    for (Py_ssize_t c = 0; c < self->ncols; c++) {
        Plan *p = &self->plans[self->cols[c]];
        if (buf_i32(&p->take, -1) < 0)
            return -1;
    }
    (void)row;
    return 0;
}

/* a new row's key and namespace columns: the key's bytes at key_at of d, the namespace's at ns_at */
static int
fill_row(Decoder *self, int32_t row, const uint8_t *d, Py_ssize_t limit, Py_ssize_t key_at, Py_ssize_t ns_at, long kg)
{
    Err e = {NULL, 0};
    Py_ssize_t q = key_at;
    if (dec(&self->key, d, limit, &q, 1, &e) < 0)
        return decode_failed(self, kg, &e);
    q = ns_at;
    if (self->keep_ns && dec(&self->ns, d, limit, &q, 1, &e) < 0)
        return decode_failed(self, kg, &e);
    return new_row(self, row);
}

/* the state's next state row belongs to row */
static inline void
take_row(Plan *plan, int32_t row)
{
    int32_t j = (int32_t)plan->count++;
    if (j != row)
        plan->identity = 0;
    ((int32_t *)plan->take.p)[row] = j;
}

/* a list / map entry of row: a new list / map, unless the state's previous entry was of the same
 * row (it extends that one); a row whose list / map was closed by another row's cannot come back */
static int
open_collection(Decoder *self, Plan *plan, int32_t row, long kg)
{
    int contiguous = plan->last_row == row;
    plan->last_row = row;
    if (contiguous)
        return 0;
    if (((int32_t *)plan->take.p)[row] != -1)
        return raise_corrupt(self, "key group %ld: a key of a %s state comes back after other keys",
                             kg, plan->mode == M_MAP ? "map" : "list");
    take_row(plan, row);
    /* its start offset (the end is the next start, or set at flush) */
    Node *col = &plan->col;
    if (col->length > 0 && buf_i32(&col->off, (int32_t)storage(&col->kids[0])->length) < 0)
        return -1;
    col->length++;
    return 0;
}

/* one entry of a selected state */
static int
entry(Decoder *self, Plan *plan, const uint8_t *kb, Py_ssize_t klen, const uint8_t *vb, Py_ssize_t vlen, long kg)
{
    Err e = {NULL, 0};
    int prefix = self->prefix;
    Py_ssize_t p = prefix;
    if (dec(&self->key, kb, klen, &p, 0, &e) < 0)
        return decode_failed(self, kg, &e);
    Py_ssize_t key_end = p;
    if (plan->ambiguous)
        p += var_len_size(p - prefix);
    Py_ssize_t ns_start = p;
    if (dec(&self->ns, kb, klen, &p, 0, &e) < 0)
        return decode_failed(self, kg, &e);
    Py_ssize_t ns_end = p;
    if (ns_end > klen)         /* Python's slices clip */
        ns_end = klen;
    if (plan->ambiguous)
        p += var_len_size(p - ns_start);
    Py_ssize_t ukey_at = p;
    Node *col = &plan->col;
    if (plan->mode == M_MAP) {
        if (dec(&col->kids[0], kb, klen, &p, 0, &e) < 0)
            return decode_failed(self, kg, &e);
        if (p != klen)
            return raise_corrupt(self, "key group %ld: cannot decode the state bytes (the map key decodes to %zd of "
                                 "its %zd bytes)", kg, p, klen);
    } else if (p != klen) {
        return raise_corrupt(self, "key group %ld: cannot decode the state bytes (the key decodes to %zd of its %zd "
                             "bytes)", kg, p, klen);
    }
    int fresh;
    int32_t row;
    Py_ssize_t ka = key_end < klen ? key_end : klen;
    if (plan->ambiguous)
        row = find_row(self, plan, kb + prefix, ka - prefix, kb + (ns_start < ns_end ? ns_start : ns_end),
                       ns_start < ns_end ? ns_end - ns_start : 0, &fresh);
    else
        row = find_row(self, plan, kb + prefix, ns_end - prefix, NULL, 0, &fresh);
    if (row == -2 || (fresh && fill_row(self, row, kb, klen, prefix, ns_start, kg) < 0))
        return -1;
    if (plan->mode == M_VALUE) {
        plan->last_row = row;
        Py_ssize_t q = 0;
        if (dec(col, vb, vlen, &q, 1, &e) < 0)
            return decode_failed(self, kg, &e);
        if (q != vlen)
            return raise_corrupt(self, "key group %ld: cannot decode the state bytes (the value decodes to %zd of its "
                                 "%zd bytes)", kg, q, vlen);
        take_row(plan, row);
        return 0;
    }
    if (open_collection(self, plan, row, kg) < 0)
        return -1;
    if (plan->mode == M_MAP) {
        Node *entries = &col->kids[0];  /* (MAPC, (ukey, value)): kids[0] ukey, kids[1] value */
        Py_ssize_t q = ukey_at;
        if (dec(&col->kids[0], kb, klen, &q, 1, &e) < 0)
            return decode_failed(self, kg, &e);
        (void)entries;
        if (vlen < 1) {
            e.msg = "map value without its null flag";
            return decode_failed(self, kg, &e);
        }
        if (vb[0] > 1)
            return raise_corrupt(self, "key group %ld: cannot decode the state bytes (map value null flag %d)", kg,
                                 (int)vb[0]);
        if (vb[0]) {
            if (vlen > 2)  /* heap savepoints write a byte after the null flag, nothing more */
                return raise_corrupt(self, "key group %ld: cannot decode the state bytes (a null map value has %zd "
                                     "bytes after its null flag)", kg, vlen - 1);
            if (push_null(&col->kids[1]) < 0)
                return -1;
        } else {
            q = 1;
            if (dec(&col->kids[1], vb, vlen, &q, 1, &e) < 0)
                return decode_failed(self, kg, &e);
            if (q != vlen)
                return raise_corrupt(self, "key group %ld: cannot decode the state bytes (the map value decodes to "
                                     "%zd of its %zd bytes)", kg, q, vlen);
        }
        return 0;
    }
    if (plan->mode == M_LIST_RAW) {
        Node *el = &col->kids[0];
        if (buf_reserve(&el->data, (size_t)vlen) < 0)
            return -1;
        memcpy(el->data.p + el->data.len, vb, (size_t)vlen);
        el->data.len += (size_t)vlen;
        if (buf_i32(&el->off, (int32_t)el->data.len) < 0)
            return -1;
        return push_valid(el);
    }
    Py_ssize_t q = 0;
    while (q < vlen) {
        if (dec(&col->kids[0], vb, vlen, &q, 1, &e) < 0)
            return decode_failed(self, kg, &e);
        if (q < vlen) {
            if (vb[q] != LIST_DELIMITER)
                return raise_corrupt(self, "key group %ld: cannot decode the state bytes (list state element not "
                                     "followed by the ',' delimiter at byte %zd)", kg, q);
            q++;
            if (q == vlen)
                return raise_corrupt(self, "key group %ld: cannot decode the state bytes (the list ends with the ',' "
                                     "delimiter)", kg);
        }
    }
    return 0;
}

/* one key group: the framing of keyed._canonical_key_group (strict: it ends exactly at end) */
static int
scan(Decoder *self, const uint8_t *d, Py_ssize_t limit, Py_ssize_t pos, Py_ssize_t end, long kg)
{
    if (start_key_group(self) < 0)
        return -1;
    if (pos < 0 || pos + 2 > limit)
        return raise_corrupt(self, "key group %ld: cannot decode the state bytes (no state id at byte %zd)", kg, pos);
    Py_ssize_t sid = be16(d + pos);
    pos += 2;
    for (;;) {
        if (sid >= self->nstates)
            return raise_corrupt(self, "key group %ld: state id %zd but the backend has %zd states", kg, sid,
                                 self->nstates);
        WireEntry en;
        switch (wire_entry(d, limit, pos, self->prefix, &en)) {
        case WIRE_NO_KEY_LENGTH:
            return raise_corrupt(self, "key group %ld: cannot decode the state bytes (no key length at byte %zd)",
                                 kg, pos);
        case WIRE_BAD_KEY_LENGTH:
            return raise_corrupt(self, "key group %ld: invalid key length %zd at byte %zd", kg, en.klen, pos);
        case WIRE_NO_VALUE_LENGTH:
            return raise_corrupt(self, "key group %ld: cannot decode the state bytes (no value length at byte %zd)",
                                 kg, en.kstart + en.klen);
        case WIRE_BAD_VALUE_LENGTH:
            return raise_corrupt(self, "key group %ld: invalid value length %zd at byte %zd", kg, en.vlen,
                                 en.kstart + en.klen);
        case WIRE_SHORT_PREFIX:
            return raise_corrupt(self, "key group %ld: cannot decode the state bytes (a key shorter than its "
                                 "key-group prefix)", kg);
        default:
            break;
        }
        pos = en.vstart + en.vlen;
        if (en.stored != kg)
            return raise_corrupt(self, "key group %ld: an entry is prefixed with key group %ld", kg, en.stored);
        Plan *plan = &self->plans[sid];
        if (plan->mode != M_SKIP && plan->column >= 0) {
            if (entry(self, plan, d + en.kstart, en.klen, d + en.vstart, en.vlen, kg) < 0)
                return -1;
        }
        if (en.flag) {
            if (pos + 2 > limit)
                return raise_corrupt(self, "key group %ld: cannot decode the state bytes (no state id at byte %zd)",
                                     kg, pos);
            Py_ssize_t nxt = be16(d + pos);
            pos += 2;
            if (nxt == END_OF_KEY_GROUP) {
                if (pos != end)
                    return raise_corrupt(self, "key group %ld: the end-of-key-group mark is at byte %zd, but the key "
                                         "group's data ends at byte %zd", kg, pos - 2, end);
                return 0;
            }
            sid = nxt;
        }
    }
}

#endif