/* fstate.savepoint._columnar, part 3 (included by _columnar.c only): the heap backend's native
 * layout and RocksDB's (key, value) pairs, decoded into the same columns as canonical key groups.
 *
 * Heap-native (keyed.native_key_group is the reference): per key group and state, u16 state id,
 * i32 count and count entries, each the namespace, the key and the whole value (a list: i32 count
 * and the elements; a map: i32 count and (user key, bool is-null, [value]) per entry). States
 * without a column are decoded and dropped (their SkipParts). Rows join by (key bytes +
 * namespace bytes) as in the canonical layout.
 *
 * RocksDB (rocksdb.iter_entries is the reference): (key, value) pairs pulled from one rocksdict
 * iterator per column family (no Python code runs per pair), each pair exactly a canonical entry
 * (key-group prefix, no flag bit). */

#ifndef FSTATE_COLUMNAR_NATIVE_H
#define FSTATE_COLUMNAR_NATIVE_H

#include "_columnar_values.h"
#include "_columnar_rows.h"

static void
skip_free(Plan *p)
{
    for (Py_ssize_t i = 0; i < p->nskip; i++) {
        node_free(&p->skip[i].a);
        node_free(&p->skip[i].b);
    }
    PyMem_Free(p->skip);
    p->skip = NULL;
    p->nskip = 0;
}

/* spec: a tuple of (SKIP_PLAIN, spec) / (SKIP_LIST, element spec) / (SKIP_MAP, key spec, value spec) */
static int
parse_skip(Plan *p, PyObject *spec)
{
    if (!PyTuple_Check(spec)) {
        PyErr_SetString(PyExc_TypeError, "a skip spec must be a tuple");
        return -1;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(spec);
    p->skip = PyMem_Calloc((size_t)(n ? n : 1), sizeof(SkipPart));
    if (p->skip == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    p->nskip = n;
    for (Py_ssize_t i = 0; i < n; i++) {
        SkipPart *s = &p->skip[i];
        PyObject *item = PyTuple_GET_ITEM(spec, i), *a, *b = NULL;
        if (!PyArg_ParseTuple(item, "iO|O", &s->kind, &a, &b))
            return -1;
        if (s->kind < SKIP_PLAIN || s->kind > SKIP_MAP || (s->kind == SKIP_MAP) != (b != NULL)) {
            PyErr_SetString(PyExc_ValueError, "bad skip part");
            return -1;
        }
        if (parse_node(a, &s->a, 0) < 0 || (b != NULL && parse_node(b, &s->b, 0) < 0))
            return -1;
    }
    return 0;
}

/* an i32 count of a heap-native list (at most one more than the bytes left, as ListType's
 * decoder allows) or map (at most the bytes left) */
static int
read_count(const uint8_t *d, Py_ssize_t limit, Py_ssize_t *ppos, int is_map, int32_t *n, Err *e)
{
    Py_ssize_t pos = *ppos;
    if (pos < 0 || pos + 4 > limit)
        FAIL(e, "collection size past the end");
    *n = (int32_t)be32(d + pos);
    pos += 4;
    if (*n < 0 || *n > limit - pos + (is_map ? 0 : 1))
        FAIL(e, is_map ? "invalid map size" : "invalid list size");
    *ppos = pos;
    return 0;
}

/* the map entries of a heap-native map value (into kids[0] / kids[1], or checked only) */
static int
map_entries(Node *k, Node *v, const uint8_t *d, Py_ssize_t limit, Py_ssize_t *ppos, int32_t n, int store, Err *e)
{
    for (int32_t i = 0; i < n; i++) {
        if (dec(k, d, limit, ppos, store, e) < 0)
            return -1;
        if (*ppos >= limit)
            FAIL(e, "map value null flag past the end");
        if (d[(*ppos)++]) {
            if (store && push_null(v) < 0)
                return -1;
        } else if (dec(v, d, limit, ppos, store, e) < 0) {
            return -1;
        }
    }
    return 0;
}

static int
skip_entry(Plan *p, const uint8_t *d, Py_ssize_t limit, Py_ssize_t *ppos, Err *e)
{
    for (Py_ssize_t i = 0; i < p->nskip; i++) {
        SkipPart *s = &p->skip[i];
        int32_t n;
        if (s->kind == SKIP_PLAIN) {
            if (dec(&s->a, d, limit, ppos, 0, e) < 0)
                return -1;
        } else if (read_count(d, limit, ppos, s->kind == SKIP_MAP, &n, e) < 0) {
            return -1;
        } else if (s->kind == SKIP_LIST) {
            for (int32_t j = 0; j < n; j++)
                if (dec(&s->a, d, limit, ppos, 0, e) < 0)
                    return -1;
        } else if (map_entries(&s->a, &s->b, d, limit, ppos, n, 0, e) < 0) {
            return -1;
        }
    }
    return 0;
}

/* one heap-native entry of a state with a column */
static int
native_entry(Decoder *self, Plan *plan, const uint8_t *d, Py_ssize_t limit, Py_ssize_t *ppos, long kg)
{
    Err e = {NULL, 0};
    Py_ssize_t pos = *ppos, ns_start = pos;
    if (dec(&self->ns, d, limit, &pos, 0, &e) < 0)
        return decode_failed(self, kg, &e);
    Py_ssize_t key_start = pos;
    if (dec(&self->key, d, limit, &pos, 0, &e) < 0)
        return decode_failed(self, kg, &e);
    int fresh;
    int32_t row = find_row(self, plan, d + key_start, pos - key_start, d + ns_start, key_start - ns_start, &fresh);
    if (row == -2 || (fresh && fill_row(self, row, d, limit, key_start, ns_start, kg) < 0))
        return -1;
    Node *col = &plan->col;
    if (plan->mode == M_VALUE) {
        plan->last_row = row;
        if (dec(col, d, limit, &pos, 1, &e) < 0)
            return decode_failed(self, kg, &e);
        take_row(plan, row);
        *ppos = pos;
        return 0;
    }
    int32_t n;
    if (read_count(d, limit, &pos, plan->mode == M_MAP, &n, &e) < 0)
        return decode_failed(self, kg, &e);
    if (open_collection(self, plan, row, kg) < 0)   /* an entry right after one of the same key extends it */
        return -1;
    if (plan->mode == M_MAP) {
        if (map_entries(&col->kids[0], &col->kids[1], d, limit, &pos, n, 1, &e) < 0)
            return decode_failed(self, kg, &e);
    } else {
        for (int32_t i = 0; i < n; i++)
            if (dec(&col->kids[0], d, limit, &pos, 1, &e) < 0)
                return decode_failed(self, kg, &e);
    }
    *ppos = pos;
    return 0;
}

/* blocks state blocks of one key group in d[pos:end] (the i32 key group before them is checked by
 * the caller), which they must fill exactly; continues: more blocks of the key group last added */
static int
scan_native(Decoder *self, const uint8_t *d, Py_ssize_t pos, Py_ssize_t end, long kg, Py_ssize_t blocks,
            int continues)
{
    if (!continues) {
        if (start_key_group(self) < 0)
            return -1;
        for (Py_ssize_t i = 0; i < self->nstates; i++)
            self->plans[i].native_seen = 0;
    }
    Err e = {NULL, 0};
    for (Py_ssize_t b = 0; b < blocks; b++) {
        if (pos < 0 || pos + 6 > end)
            return raise_corrupt(self, "key group %ld: cannot decode the state bytes (no state block at byte %zd)",
                                 kg, pos);
        Py_ssize_t sid = be16(d + pos);
        int32_t count = (int32_t)be32(d + pos + 2);
        pos += 6;
        if (sid >= self->nstates)
            return raise_corrupt(self, "key group %ld: state id %zd but the backend has %zd states", kg, sid,
                                 self->nstates);
        Plan *plan = &self->plans[sid];
        if (plan->native_seen)  /* each state's block once per key group, as the Python decoder checks */
            return raise_corrupt(self, "key group %ld: a second block of state id %zd", kg, sid);
        plan->native_seen = 1;
        if (count < 0 || count > end - pos)
            return raise_corrupt(self, "key group %ld: invalid entry count %d", kg, (int)count);
        if (count && plan->column < 0 && plan->skip == NULL)
            return raise_corrupt(self, "key group %ld: state %zd has entries the columnar decoder cannot skip", kg,
                                 sid);
        for (int32_t i = 0; i < count; i++) {
            if (plan->column >= 0) {
                if (native_entry(self, plan, d, end, &pos, kg) < 0)
                    return -1;
            } else if (skip_entry(plan, d, end, &pos, &e) < 0) {
                return decode_failed(self, kg, &e);
            }
        }
    }
    if (pos != end)
        return raise_corrupt(self, "key group %ld: its data ends at byte %zd, the next key group starts at byte %zd",
                             kg, pos, end);
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* RocksDB: pairs pulled from the column families' cursors */

/* One column family being read: a rocksdict iterator (RdictIter) with key() (bytes, or None past
 * the end), value(), next() and status(), positioned at its next pair. */
typedef struct {
    Py_ssize_t index;                     /* in the call's tuple of cursors */
    Plan *plan;
    PyObject *cursor;
    PyObject *key_m, *value_m, *next_m;   /* its bound methods */
    PyObject *at;                         /* the key it is at, NULL when done (ended or past the range) */
    long kg;                              /* at's key group */
} Cursor;

/* the key group of a RocksDB key: its prefix; a key shorter than the prefix (only a 1-byte key of a
 * 2-byte prefix can come after the first key group's prefix) gets the first key group it sorts in */
static inline long
pair_key_group(const uint8_t *kb, Py_ssize_t klen, int prefix)
{
    if (klen >= prefix)
        return prefix == 1 ? (long)kb[0] : ((long)kb[0] << 8) | kb[1];
    return klen ? (long)kb[0] << 8 : 0;
}

/* a call of one of cursor i's methods; on an error, failed_cursor names it */
static PyObject *
cursor_call(Decoder *self, Cursor *c, PyObject *method)
{
    PyObject *res = PyObject_CallNoArgs(method);
    if (res == NULL)
        self->failed_cursor = c->index;
    return res;
}

/* moves cursor c to the key it is at (after next()): c->at and c->kg, or done (NULL) at the end
 * (its status checked) or past last_kg */
static int
cursor_read(Decoder *self, Cursor *c, long last_kg)
{
    Py_CLEAR(c->at);
    PyObject *k = cursor_call(self, c, c->key_m);
    if (k == NULL)
        return -1;
    if (k == Py_None) {
        Py_DECREF(k);
        PyObject *st = PyObject_CallMethod(c->cursor, "status", NULL);   /* an error ends an iteration too */
        if (st == NULL) {
            self->failed_cursor = c->index;
            return -1;
        }
        Py_DECREF(st);
        return 0;
    }
    if (!PyBytes_Check(k)) {
        Py_DECREF(k);
        PyErr_SetString(PyExc_TypeError, "a cursor's keys and values must be bytes");
        return -1;
    }
    const uint8_t *kb = (const uint8_t *)PyBytes_AS_STRING(k);
    Py_ssize_t klen = PyBytes_GET_SIZE(k);
    long kg = pair_key_group(kb, klen, self->prefix);
    if (kg > last_kg) {
        Py_DECREF(k);
        return 0;
    }
    if (klen < self->prefix) {
        Py_DECREF(k);
        return raise_corrupt(self, "key group %ld: cannot decode the state bytes (a key shorter than its "
                             "key-group prefix)", kg);
    }
    c->at = k;
    c->kg = kg;
    return 0;
}

/* the pairs of cursor c in key group c->kg (c->at is the first); it stops at the next key group's */
static int
cursor_key_group(Decoder *self, Cursor *c, long last_kg)
{
    long kg = c->kg;
    while (c->at != NULL && c->kg == kg) {
        PyObject *v = cursor_call(self, c, c->value_m);
        if (v == NULL)
            return -1;
        if (!PyBytes_Check(v)) {
            Py_DECREF(v);
            PyErr_SetString(PyExc_TypeError, "a cursor's keys and values must be bytes");
            return -1;
        }
        int rc = entry(self, c->plan, (const uint8_t *)PyBytes_AS_STRING(c->at), PyBytes_GET_SIZE(c->at),
                       (const uint8_t *)PyBytes_AS_STRING(v), PyBytes_GET_SIZE(v), kg);
        Py_DECREF(v);
        if (rc < 0)
            return -1;
        PyObject *done = cursor_call(self, c, c->next_m);
        if (done == NULL)
            return -1;
        Py_DECREF(done);
        if (cursor_read(self, c, last_kg) < 0)
            return -1;
    }
    return 0;
}

static void
cursors_free(Cursor *cs, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_XDECREF(cs[i].key_m);
        Py_XDECREF(cs[i].value_m);
        Py_XDECREF(cs[i].next_m);
        Py_XDECREF(cs[i].at);
    }
    PyMem_Free(cs);
}

/* cs[i] from cursors[i], a (state id, cursor) */
static int
cursors_open(Decoder *self, Cursor *cs, PyObject *cursors, long last_kg)
{
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(cursors); i++) {
        Cursor *c = &cs[i];
        c->index = i;
        Py_ssize_t sid;
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(cursors, i), "nO:cursor", &sid, &c->cursor))
            return -1;
        if (sid < 0 || sid >= self->nstates || self->plans[sid].column < 0) {
            PyErr_Format(PyExc_ValueError, "pairs of state %zd, which has no column", sid);
            return -1;
        }
        c->plan = &self->plans[sid];
        c->key_m = PyObject_GetAttrString(c->cursor, "key");
        c->value_m = c->key_m ? PyObject_GetAttrString(c->cursor, "value") : NULL;
        c->next_m = c->value_m ? PyObject_GetAttrString(c->cursor, "next") : NULL;
        if (c->next_m == NULL || cursor_read(self, c, last_kg) < 0)
            return -1;
    }
    return 0;
}

/* RocksDB (rocksdb.iter_entries is the reference): the pairs of the cursors up to key group last_kg,
 * key group by key group, each cursor's pairs of a key group in turn (state id order). It stops
 * after a key group that brings the batch to max_rows rows: *more = 1 (the cursors stay at the
 * first pair not read). */
static int
pairs_from(Decoder *self, PyObject *cursors, long last_kg, Py_ssize_t max_rows, int *more)
{
    self->failed_cursor = -1;
    *more = 0;
    Py_ssize_t n = PyTuple_GET_SIZE(cursors);
    Cursor *cs = PyMem_Calloc((size_t)(n ? n : 1), sizeof(Cursor));
    if (cs == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    int rc = cursors_open(self, cs, cursors, last_kg);
    while (rc == 0) {
        long kg = -1;
        for (Py_ssize_t i = 0; i < n; i++) {
            Cursor *c = &cs[i];
            if (c->at != NULL && (kg < 0 || c->kg < kg))
                kg = c->kg;
        }
        if (kg < 0)
            break;
        if ((rc = start_key_group(self)) < 0)
            break;
        for (Py_ssize_t i = 0; i < n && rc == 0; i++) {
            Cursor *c = &cs[i];
            if (c->at != NULL && c->kg == kg)
                rc = cursor_key_group(self, c, last_kg);
        }
        if (rc == 0 && self->rows >= max_rows) {
            for (Py_ssize_t i = 0; i < n; i++)
                *more |= cs[i].at != NULL;
            break;
        }
    }
    cursors_free(cs, n);
    return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* RocksDB: pairs read from the table files in C (_sst.c's Merger.read), packed in one buffer per
 * column family: uint32 key length, key, uint32 value length, value (native byte order) */

typedef struct {
    Plan *plan;
    const uint8_t *p;
    Py_ssize_t pos, n;
    const uint8_t *k, *v;
    Py_ssize_t klen, vlen;
    long kg;
    int at;                               /* k, v hold a pair */
} Packed;

static int
packed_read(Decoder *self, Packed *c)
{
    c->at = 0;
    if (c->pos == c->n)
        return 0;
    uint32_t klen, vlen;
    if (c->n - c->pos < 4 || (memcpy(&klen, c->p + c->pos, 4), c->n - c->pos - 4 < (Py_ssize_t)klen + 4)
        || (memcpy(&vlen, c->p + c->pos + 4 + klen, 4), c->n - c->pos - 8 - (Py_ssize_t)klen < (Py_ssize_t)vlen)) {
        PyErr_SetString(PyExc_ValueError, "a packed pair buffer that ends inside a pair");
        return -1;
    }
    c->k = c->p + c->pos + 4;
    c->klen = klen;
    c->v = c->k + klen + 4;
    c->vlen = vlen;
    c->pos += 8 + (Py_ssize_t)klen + (Py_ssize_t)vlen;
    c->kg = pair_key_group(c->k, c->klen, self->prefix);
    if (c->klen < self->prefix)
        return raise_corrupt(self, "key group %ld: cannot decode the state bytes (a key shorter than its "
                             "key-group prefix)", c->kg);
    c->at = 1;
    return 0;
}

/* the pairs of the buffers ((state id, bytes, start), ...) in state id order, from their starts, key
 * group by key group, each buffer's pairs of a key group in turn (rocksdb.iter_entries' order). It
 * stops after a key group that brings the batch to max_rows rows: *positions = the buffers' offsets
 * of their first pairs not read (a new tuple), else None (every pair read). */
static int
pairs_packed(Decoder *self, PyObject *parts, Py_ssize_t max_rows, PyObject **positions)
{
    *positions = NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(parts);
    Packed *cs = PyMem_Calloc((size_t)(n ? n : 1), sizeof(Packed));
    if (cs == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    int rc = 0;
    for (Py_ssize_t i = 0; i < n && rc == 0; i++) {
        Py_ssize_t sid, start;
        PyObject *data;
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(parts, i), "nO!n:packed", &sid, &PyBytes_Type, &data, &start)) {
            rc = -1;
        } else if (sid < 0 || sid >= self->nstates || self->plans[sid].column < 0) {
            PyErr_Format(PyExc_ValueError, "pairs of state %zd, which has no column", sid);
            rc = -1;
        } else if (start < 0 || start > PyBytes_GET_SIZE(data)) {
            PyErr_SetString(PyExc_ValueError, "a start past the packed pairs");
            rc = -1;
        } else {
            cs[i].plan = &self->plans[sid];
            cs[i].p = (const uint8_t *)PyBytes_AS_STRING(data);
            cs[i].n = PyBytes_GET_SIZE(data);
            cs[i].pos = start;
            rc = packed_read(self, &cs[i]);
        }
    }
    int more = 0;
    while (rc == 0) {
        long kg = -1;
        for (Py_ssize_t i = 0; i < n; i++)
            if (cs[i].at && (kg < 0 || cs[i].kg < kg))
                kg = cs[i].kg;
        if (kg < 0 || (rc = start_key_group(self)) < 0)
            break;
        for (Py_ssize_t i = 0; i < n && rc == 0; i++) {
            Packed *c = &cs[i];
            while (rc == 0 && c->at && c->kg == kg) {
                rc = entry(self, c->plan, c->k, c->klen, c->v, c->vlen, kg);
                if (rc == 0)
                    rc = packed_read(self, c);
            }
        }
        if (rc == 0 && self->rows >= max_rows) {
            for (Py_ssize_t i = 0; i < n; i++)
                more |= cs[i].at;
            break;
        }
    }
    if (rc == 0 && more) {
        *positions = PyTuple_New(n);
        for (Py_ssize_t i = 0; *positions != NULL && i < n; i++) {
            /* the pair at hand is not read yet: its offset */
            Py_ssize_t at = cs[i].at ? (Py_ssize_t)(cs[i].k - 4 - cs[i].p) : cs[i].n;
            PyObject *o = PyLong_FromSsize_t(at);
            if (o == NULL)
                Py_CLEAR(*positions);
            else
                PyTuple_SET_ITEM(*positions, i, o);
        }
        if (*positions == NULL)
            rc = -1;
    }
    PyMem_Free(cs);
    return rc;
}

#endif
