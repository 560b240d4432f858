/* fstate.savepoint._columnar, part 3 (included by _columnar.c only): the heap backend's native
 * layout and RocksDB's (key, value) pairs, decoded into the same columns as canonical key groups.
 *
 * Heap-native (keyed.native_key_group is the reference): per key group and state, u16 state id,
 * i32 count and count entries, each the namespace, the key and the whole value (a list: i32 count
 * and the elements; a map: i32 count and (user key, bool is-null, [value]) per entry). States
 * without a column are decoded and dropped (their SkipParts). Rows join by (key bytes +
 * namespace bytes) as in the canonical layout.
 *
 * RocksDB (rocksdb.iter_entries is the reference): the pairs of one state in one key group, each
 * exactly a canonical entry (key-group prefix, no flag bit). */

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

/* RocksDB: the (key, value) pairs (two lists of bytes) of state sid in key group kg */
static int
scan_pairs(Decoder *self, PyObject *keys, PyObject *values, Py_ssize_t sid, long kg, int continues)
{
    if (!continues && start_key_group(self) < 0)
        return -1;
    if (sid < 0 || sid >= self->nstates) {
        PyErr_Format(PyExc_ValueError, "bad state id %zd", sid);
        return -1;
    }
    Plan *plan = &self->plans[sid];
    Py_ssize_t n = PyList_GET_SIZE(keys);
    if (plan->column < 0 || PyList_GET_SIZE(values) != n) {
        PyErr_SetString(PyExc_ValueError, "pairs of a state without a column, or keys and values differ in number");
        return -1;
    }
    int prefix = self->prefix;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *k = PyList_GET_ITEM(keys, i), *v = PyList_GET_ITEM(values, i);
        if (!PyBytes_Check(k) || !PyBytes_Check(v)) {
            PyErr_SetString(PyExc_TypeError, "keys and values must be bytes");
            return -1;
        }
        const uint8_t *kb = (const uint8_t *)PyBytes_AS_STRING(k);
        Py_ssize_t klen = PyBytes_GET_SIZE(k);
        if (klen < prefix)
            return raise_corrupt(self, "key group %ld: cannot decode the state bytes (a key shorter than its "
                                 "key-group prefix)", kg);
        long stored = prefix == 1 ? kb[0] : ((long)kb[0] << 8) | kb[1];
        if (stored != kg)
            return raise_corrupt(self, "key group %ld: an entry is prefixed with key group %ld", kg, stored);
        if (entry(self, plan, kb, klen, (const uint8_t *)PyBytes_AS_STRING(v), PyBytes_GET_SIZE(v), kg) < 0)
            return -1;
    }
    return 0;
}

#endif
