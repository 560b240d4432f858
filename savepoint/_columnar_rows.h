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
    uint32_t idoff;            /* where the row's identity starts in ids (only read to prefetch it) */
} Slot;

/* an identity whose hash is known before its entry is decoded (scan's look-ahead) */
typedef struct {
    const uint8_t *a;
    Py_ssize_t n;
    uint32_t hash;
} Hint;

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
    Hint hint;                 /* the identity of the entry being decoded, when scan hashed it ahead (n < 0: none) */
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

#include "_columnar_identity.h"

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
    /* Looking up rows by hash (entries not in the rows' order) waits on memory: the entries two ahead
     * are hashed and their slots fetched, the next one's identity bytes too, while this one decodes. */
    Peek pk = {pos, sid, 0};
    Hint ahead[3];             /* this entry, the next, the one after */
    peek_entry(self, d, limit, &pk, &ahead[0]);
    peek_entry(self, d, limit, &pk, &ahead[1]);
    peek_entry(self, d, limit, &pk, &ahead[2]);
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
        prefetch_slot(self, &ahead[2]);
        prefetch_identity(self, &ahead[1]);
        if (plan->mode != M_SKIP && plan->column >= 0) {
            self->hint = ahead[0];
            int rc = entry(self, plan, d + en.kstart, en.klen, d + en.vstart, en.vlen, kg);
            self->hint.n = -1;
            if (rc < 0)
                return -1;
        }
        ahead[0] = ahead[1];
        ahead[1] = ahead[2];
        peek_entry(self, d, limit, &pk, &ahead[2]);
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