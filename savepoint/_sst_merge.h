/* _sst.c: the Merger (one column family's tables merged as RocksDB reads them) and the module. */

#ifndef FSTATE_SST_MERGE_H
#define FSTATE_SST_MERGE_H

static inline int
buf_len(Buf *b, size_t n)
{
    if (n > UINT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "a key or value of 4 GiB or more");
        return -1;
    }
    uint32_t v = (uint32_t)n;
    return buf_put(b, &v, 4);
}

typedef struct {
    PyObject_HEAD
    PyObject *tables;
    Py_ssize_t n;
    Source *src;
    Source **heap;                 /* the sources at an entry, a min-heap by internal key (after seek) */
    Py_ssize_t heaped;
    int prefix;
    Buf key;                       /* the user key being resolved */
    Buf ops;                       /* its merge operands, newest first: (uint32 length, bytes)... */
    Buf out;                       /* the pairs of a read (kept: the next read reuses its memory) */
    Buf at;                        /* scratch: the operands' offsets in ops */
} Merger;

/* whether a's entry comes before b's: user key ascending, then sequence number descending */
static inline int
before(const Source *a, const Source *b)
{
    int c = compare(a->it.key, user_len(a), b->it.key, user_len(b));
    return c < 0 || (c == 0 && (trailer(a) >> 8) > (trailer(b) >> 8));
}

static void
sift_down(Merger *m, Py_ssize_t i)
{
    Source **h = m->heap;
    for (;;) {
        Py_ssize_t l = 2 * i + 1, r = l + 1, best = i;
        if (l < m->heaped && before(h[l], h[best]))
            best = l;
        if (r < m->heaped && before(h[r], h[best]))
            best = r;
        if (best == i)
            return;
        Source *t = h[i];
        h[i] = h[best];
        h[best] = t;
        i = best;
    }
}

/* the source at the smallest internal key, or NULL */
static inline Source *
merger_min(Merger *m)
{
    return m->heaped ? m->heap[0] : NULL;
}

/* the smallest source moved to its next entry, the heap mended */
static int
merger_advance(Merger *m)
{
    Source *s = m->heap[0];
    if (source_next(s) < 0)
        return -1;
    if (!s->valid)
        m->heap[0] = m->heap[--m->heaped];
    if (m->heaped > 1)
        sift_down(m, 0);
    return 0;
}

static inline long
key_group_of(const uint8_t *k, size_t n, int prefix)
{
    if (n >= (size_t)prefix)
        return prefix == 1 ? (long)k[0] : ((long)k[0] << 8) | k[1];
    return n ? (long)k[0] << 8 : 0;
}

/* the pair of the resolved key: the value `base` (NULL: none) followed by the operands */
static int
emit(Merger *m, Buf *out, const uint8_t *base, size_t base_len)
{
    if (m->ops.len == 0) {           /* a value alone: the common case */
        size_t need = 8 + m->key.len + base_len;
        if (m->key.len > UINT32_MAX || base_len > UINT32_MAX) {
            PyErr_SetString(PyExc_OverflowError, "a key or value of 4 GiB or more");
            return -1;
        }
        if (buf_reserve(out, need) < 0)
            return -1;
        uint8_t *o = out->p + out->len;
        uint32_t kl = (uint32_t)m->key.len, vl = (uint32_t)base_len;
        memcpy(o, &kl, 4);
        copy_bytes(o + 4, m->key.p, kl);
        memcpy(o + 4 + kl, &vl, 4);
        copy_bytes(o + 8 + kl, base, vl);
        out->len += need;
        return 0;
    }
    size_t total = base ? base_len : 0, count = 0;
    for (size_t at = 0; at < m->ops.len; count++) {
        uint32_t n = le32(m->ops.p + at);
        total += n + (base != NULL || count > 0);
        at += 4 + n;
    }
    if (buf_len(out, m->key.len) < 0 || buf_put(out, m->key.p, m->key.len) < 0 || buf_len(out, total) < 0
        || buf_reserve(out, total) < 0)
        return -1;
    if (base != NULL)
        buf_put(out, base, base_len);
    /* the operands oldest first: the offsets of the newest-first list, walked backwards */
    m->at.len = 0;
    if (buf_reserve(&m->at, count * sizeof(size_t)) < 0)
        return -1;
    size_t *at = (size_t *)m->at.p, i = 0;
    for (size_t pos = 0; pos < m->ops.len; pos += 4 + le32(m->ops.p + pos))
        at[i++] = pos;
    for (size_t j = count; j-- > 0;) {
        if (base != NULL || j + 1 < count)
            buf_put(out, ",", 1);
        buf_put(out, m->ops.p + at[j] + 4, le32(m->ops.p + at[j]));
    }
    return 0;
}

/* the visible pairs up to key group last_kg into out; with stop, only those of user keys before it.
 * With a budget (> 0), the read ends early, leaving keys for the next one (*cut set, m->key the first
 * key left out): at the start of a key group once out holds budget bytes (m->key: that key group's
 * prefix), or within a key group once that key group's pairs alone hold budget bytes (m->key: the key
 * the next read starts at). */
static int
merger_read(Merger *m, long last_kg, const uint8_t *stop, size_t stop_len, size_t budget, Buf *out, int *cut)
{
    Source *s = merger_min(m);
    long at_kg = -1;
    size_t kg_start = 0;       /* out's length when the key group at_kg began */
    if (cut != NULL)
        *cut = 0;
    while (s != NULL) {
        long kg = key_group_of(s->it.key, user_len(s), m->prefix);
        if (kg > last_kg)
            return 0;
        if (stop != NULL && compare(s->it.key, user_len(s), stop, stop_len) >= 0)
            return 0;
        if (budget) {
            int whole = kg != at_kg;   /* a key group begins: cut before it, whole */
            if (whole ? out->len >= budget : out->len - kg_start >= budget) {
                m->key.len = 0;
                uint8_t head[2] = {(uint8_t)(kg >> 8), (uint8_t)kg};
                if (whole ? buf_put(&m->key, m->prefix == 1 ? head + 1 : head, (size_t)m->prefix) < 0
                          : buf_put(&m->key, s->it.key, user_len(s)) < 0)
                    return -1;
                if (cut != NULL)
                    *cut = 1;
                return 0;
            }
            if (whole) {
                at_kg = kg;
                kg_start = out->len;
            }
        }
        m->key.len = m->ops.len = 0;
        if (buf_put(&m->key, s->it.key, user_len(s)) < 0)
            return -1;
        int resolved = 0;
        do {
            if (!resolved) {
                int type = (int)(trailer(s) & 0xff);
                if (type == 1) {               /* a value */
                    if (emit(m, out, s->it.val, s->it.vlen) < 0)
                        return -1;
                    resolved = 1;
                } else if (type == 0 || type == 7) {   /* a deletion, a single deletion */
                    if (m->ops.len && emit(m, out, NULL, 0) < 0)
                        return -1;
                    resolved = 1;
                } else if (type == 2) {        /* a merge operand */
                    if (buf_len(&m->ops, s->it.vlen) < 0 || buf_put(&m->ops, s->it.val, s->it.vlen) < 0)
                        return -1;
                } else {
                    return fail(Corrupt, s->t->path, "an entry of type %d, which this reader does not read", type);
                }
            }
            if (merger_advance(m) < 0)
                return -1;
        } while ((s = merger_min(m)) != NULL && compare(s->it.key, user_len(s), m->key.p, m->key.len) == 0);
        if (!resolved && m->ops.len && emit(m, out, NULL, 0) < 0)
            return -1;
    }
    return 0;
}

static PyObject *
Merger_new(PyTypeObject *type, PyObject *args, PyObject *Py_UNUSED(kwds))
{
    PyObject *tables;
    int prefix;
    if (!PyArg_ParseTuple(args, "O!i:Merger", &PyTuple_Type, &tables, &prefix))
        return NULL;
    if (prefix != 1 && prefix != 2) {
        PyErr_SetString(PyExc_ValueError, "the key-group prefix is 1 or 2 bytes");
        return NULL;
    }
    Merger *m = (Merger *)type->tp_alloc(type, 0);
    if (m == NULL)
        return NULL;
    m->n = PyTuple_GET_SIZE(tables);
    m->prefix = prefix;
    m->tables = Py_NewRef(tables);
    m->src = PyMem_Calloc((size_t)(m->n ? m->n : 1), sizeof(Source));
    m->heap = PyMem_Calloc((size_t)(m->n ? m->n : 1), sizeof(Source *));
    if (m->src == NULL || m->heap == NULL) {
        Py_DECREF(m);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < m->n; i++) {
        PyObject *t = PyTuple_GET_ITEM(tables, i);
        if (!PyObject_TypeCheck(t, &TableType)) {
            Py_DECREF(m);
            PyErr_SetString(PyExc_TypeError, "Merger takes a tuple of Tables");
            return NULL;
        }
        m->src[i].t = (Table *)t;
    }
    return (PyObject *)m;
}

static void
Merger_dealloc(Merger *m)
{
    for (Py_ssize_t i = 0; m->src != NULL && i < m->n; i++)
        iter_free(&m->src[i].it);
    PyMem_Free(m->src);
    PyMem_Free(m->heap);
    buf_free(&m->key);
    buf_free(&m->ops);
    buf_free(&m->out);
    buf_free(&m->at);
    Py_XDECREF(m->tables);
    Py_TYPE(m)->tp_free((PyObject *)m);
}

static PyObject *
Merger_seek(Merger *m, PyObject *arg)
{
    if (!PyBytes_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "seek takes bytes");
        return NULL;
    }
    m->heaped = 0;
    for (Py_ssize_t i = 0; i < m->n; i++) {
        if (source_seek(&m->src[i], (const uint8_t *)PyBytes_AS_STRING(arg), (size_t)PyBytes_GET_SIZE(arg)) < 0)
            return NULL;
        if (m->src[i].valid)
            m->heap[m->heaped++] = &m->src[i];
    }
    for (Py_ssize_t i = m->heaped / 2; i-- > 0;)
        sift_down(m, i);
    Py_RETURN_NONE;
}

/* the read's pairs as bytes; a buffer grown past READ_KEPT is not kept for the next read (a merger read
 * a key group at a time holds no more than its pieces) */
#define READ_KEPT ((size_t)16 << 20)

static PyObject *
read_out(Merger *m)
{
    PyObject *b = PyBytes_FromStringAndSize((const char *)m->out.p, (Py_ssize_t)m->out.len);
    if (m->out.cap > READ_KEPT)
        buf_free(&m->out);
    return b;
}

static PyObject *
Merger_read(Merger *m, PyObject *args)
{
    long last_kg;
    Py_buffer stop = {0};
    if (!PyArg_ParseTuple(args, "l|y*:read", &last_kg, &stop))
        return NULL;
    m->out.len = 0;
    int rc = merger_read(m, last_kg, stop.buf, (size_t)stop.len, 0, &m->out, NULL);
    if (stop.obj != NULL)
        PyBuffer_Release(&stop);
    return rc < 0 ? NULL : read_out(m);
}

static PyObject *
Merger_read_piece(Merger *m, PyObject *args)
{
    long last_kg;
    Py_ssize_t budget;
    if (!PyArg_ParseTuple(args, "ln:read_piece", &last_kg, &budget))
        return NULL;
    if (budget <= 0) {
        PyErr_SetString(PyExc_ValueError, "a piece of at least one byte");
        return NULL;
    }
    m->out.len = 0;
    int cut;
    if (merger_read(m, last_kg, NULL, 0, (size_t)budget, &m->out, &cut) < 0)
        return NULL;
    PyObject *next = cut ? PyBytes_FromStringAndSize((const char *)m->key.p, (Py_ssize_t)m->key.len)
                         : Py_NewRef(Py_None);
    PyObject *data = next != NULL ? read_out(m) : NULL;
    if (data == NULL) {
        Py_XDECREF(next);
        return NULL;
    }
    return Py_BuildValue("(NN)", data, next);
}

static PyMethodDef Merger_methods[] = {
    {"seek", (PyCFunction)Merger_seek, METH_O, "seek(user_key): every table at its first key >= user_key"},
    {"read", (PyCFunction)Merger_read, METH_VARARGS,
     "read(last_key_group, stop=None) -> bytes: the visible pairs up to that key group (uint32 length, key, "
     "uint32 length, value, ...); with stop (bytes), only those of user keys before it"},
    {"read_piece", (PyCFunction)Merger_read_piece, METH_VARARGS,
     "read_piece(last_key_group, budget) -> (bytes, cut or None): as read, ending early: before a key group "
     "once the pairs hold budget bytes (cut: its key-group prefix), or within a key group whose pairs alone "
     "hold budget bytes (cut: the key the next read starts at); None: it read up to last_key_group"},
    {NULL},
};

static PyTypeObject MergerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "fstate.savepoint._sst.Merger",
    .tp_basicsize = sizeof(Merger),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Merger((table, ...), prefix): one column family's tables merged as RocksDB reads them",
    .tp_new = Merger_new,
    .tp_dealloc = (destructor)Merger_dealloc,
    .tp_methods = Merger_methods,
};

#include "_sst_frame.h"

static struct PyModuleDef sst_module = {
    PyModuleDef_HEAD_INIT, "fstate.savepoint._sst", "RocksDB block-based table files read in C", -1, sst_methods,
};

PyMODINIT_FUNC
PyInit__sst(void)
{
    crc_init();
    if (PyType_Ready(&TableType) < 0 || PyType_Ready(&MergerType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&sst_module);
    if (m == NULL)
        return NULL;
    Unsupported = PyErr_NewException("fstate.savepoint._sst.Unsupported", PyExc_Exception, NULL);
    Corrupt = PyErr_NewException("fstate.savepoint._sst.Corrupt", PyExc_Exception, NULL);
    if (Unsupported == NULL || Corrupt == NULL || PyModule_AddObjectRef(m, "Unsupported", Unsupported) < 0
        || PyModule_AddObjectRef(m, "Corrupt", Corrupt) < 0 || PyModule_AddObjectRef(m, "Table", (PyObject *)&TableType) < 0
        || PyModule_AddObjectRef(m, "Merger", (PyObject *)&MergerType) < 0
        || PyModule_AddIntConstant(m, "ABI", 4) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}

#endif
