/* fstate.savepoint._columnar: key groups (canonical, heap-native) and RocksDB pairs decoded straight
 * into Arrow columnar buffers (parts: _columnar_values.h, _columnar_rows.h, _columnar_identity.h,
 * _columnar_native.h).
 *
 * The plain Python decoders (keyed.py, keyed_codecs.py, types/) are the reference: the rows built
 * from these buffers equal the reference rows of the strict path (keys, namespaces and values must
 * decode to exactly their stored bytes, a key group must end exactly where its region ends), and
 * every decoding error is raised as the CorruptStateError handed to the constructor, with the
 * message keyed.iter_entries gives ("key group N: ...").
 *
 * No Python object is made per row or value: every column is a tree of growable buffers
 * (validity bitmap, int32 offsets, data) that flush() hands over as bytes, and columnar.py wraps
 * them with pyarrow.Array.from_buffers.
 *
 * Decoder(plans, selected, key, namespace, keep_namespace, prefix, corrupt_error, source)
 *     plans: one tuple per state id: (mode, value spec, user key spec, ambiguous); modes SKIP (framing
 *     checked, nothing decoded), VALUE, LIST, LIST_RAW, MAP. selected: the state ids that get a
 *     column, in column order. Specs: an int code, (TUPLE, (spec, ...)), (NULLABLE, padding, spec),
 *     (TTL, spec). A fifth item (heap-native only, states without a column): the parts an entry is
    skipped by (_columnar_native.h). key, namespace: the specs of the key and namespace (the same for every state);
 *     keep_namespace: whether the namespace column is filled (else it stays empty).
 *   .add(data, start, end, key_group) -> rows so far     decodes one key group's region
 *   .add_native(data, start, end, key_group, blocks, continues)   heap-native state blocks
 *   .add_pairs_from(cursors, last_key_group, max_rows) -> more    RocksDB pairs pulled from rocksdict
 *     iterators, one per state: ((state id, cursor), ...) in state id order; they stop after the key
 *     group that brings the batch to max_rows rows (more: call again after the flush). A cursor call
 *     that raises leaves its exception, and .failed_cursor its index.
 *   .add_packed(((state id, bytes, start), ...), max_rows) -> positions or None    RocksDB pairs read
 *     from the table files (_sst.c), packed one buffer a state: uint32 key length, key, uint32 value
 *     length, value; they stop after the key group that brings the batch to max_rows rows (positions:
 *     each buffer's offset to start from after the flush)
 *   .flush() -> (rows, key column, namespace column, [(state column, take or None), ...])
 *     a column: (length, null count, validity bytes or None, (buffers...), (children...));
 *     take: (int32 indices bytes, validity bytes or None) giving the state row of each row (None: the
 *     state rows are the rows).
 *
 * Rows are joined across states within a key group by the raw identity bytes (serialized key and
 * namespace), in order of first appearance, as keyed.rows_from_entries does. Entries of one state
 * with the same identity next to each other extend the same list / map (a value: the last wins);
 * a list or map identity that comes back after another one is reported as corrupt (no writer does
 * that). Flink strings (StringValue: UTF-16 units as 7-bit varints) become UTF-8; surrogate pairs
 * are joined; a lone surrogate (which UTF-8 cannot hold) becomes U+FFFD.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include "_columnar_values.h"
#include "_columnar_rows.h"
#include "_columnar_native.h"


/* ------------------------------------------------------------------------------------------ */
/* handing the buffers over */

/* A finished buffer handed to Python without a copy: the memory moves into a Chunk (a read-only
 * buffer object that pyarrow.py_buffer wraps), and the column gets fresh memory of the same
 * capacity (untouched, so the next batch does not grow it again). */
typedef struct {
    PyObject_HEAD
    uint8_t *p;
    Py_ssize_t len;
    size_t cap;
} Chunk;

/* Memory of dropped chunks, kept for the next batches (fresh memory costs a page fault per 4 KiB
 * page on first touch). Used with the GIL held. */
#define POOL_SIZE 32
static struct { uint8_t *p; size_t cap; } pool[POOL_SIZE];
static int pool_len = 0;

static void
Chunk_dealloc(Chunk *self)
{
    if (self->p != NULL && pool_len < POOL_SIZE && self->cap >= 4096) {
        pool[pool_len].p = self->p;
        pool[pool_len].cap = self->cap;
        pool_len++;
    } else {
        PyMem_RawFree(self->p);
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* memory of at least cap bytes, from the pool when it has some */
static uint8_t *
pool_take(size_t *cap)
{
    for (int i = pool_len - 1; i >= 0; i--) {
        if (pool[i].cap >= *cap && pool[i].cap <= *cap * 4) {
            uint8_t *p = pool[i].p;
            *cap = pool[i].cap;
            pool[i] = pool[--pool_len];
            return p;
        }
    }
    return PyMem_RawMalloc(*cap);
}

static int
Chunk_getbuffer(Chunk *self, Py_buffer *view, int flags)
{
    return PyBuffer_FillInfo(view, (PyObject *)self, self->p, self->len, 1, flags);
}

static PyBufferProcs Chunk_as_buffer = {(getbufferproc)Chunk_getbuffer, NULL};

static PyTypeObject ChunkType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "fstate.savepoint._columnar.Chunk",
    .tp_basicsize = sizeof(Chunk),
    .tp_dealloc = (destructor)Chunk_dealloc,
    .tp_as_buffer = &Chunk_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A column buffer decoded by the columnar decoder (read-only).",
};

static PyObject *
buf_bytes(Buf *b)
{
    if (b->p == NULL && buf_grow(b, 8) < 0)   /* Arrow wants a real pointer, even for 0 bytes */
        return NULL;
    Chunk *c = PyObject_New(Chunk, &ChunkType);
    if (c == NULL)
        return NULL;
    size_t cap = b->cap;
    uint8_t *fresh = pool_take(&cap);
    if (fresh == NULL) {
        c->p = NULL;
        Py_DECREF(c);
        return PyErr_NoMemory();
    }
    c->p = b->p;
    c->len = (Py_ssize_t)b->len;
    c->cap = b->cap;
    b->p = fresh;
    b->cap = cap;
    b->len = 0;
    return (PyObject *)c;
}

static PyObject *
describe(Node *t)
{
    t = storage(t);
    PyObject *valid = NULL, *bufs = NULL, *kids = NULL;
    if (t->code == T_LISTC || t->code == T_MAPC) {
        /* the end of the last list / map */
        if (t->length > 0 && buf_i32(&t->off, (int32_t)storage(&t->kids[0])->length) < 0)
            return NULL;
    }
    if (t->has_valid && t->nulls) {
        valid = buf_bytes(&t->valid);
        if (valid == NULL)
            return NULL;
    } else {
        valid = Py_NewRef(Py_None);
    }
    if (has_offsets(t->code) && t->code != T_LISTC && t->code != T_MAPC)
        bufs = Py_BuildValue("(NN)", buf_bytes(&t->off), buf_bytes(&t->data));
    else if (t->code == T_LISTC || t->code == T_MAPC)
        bufs = Py_BuildValue("(N)", buf_bytes(&t->off));
    else if (t->code == T_TUPLE || t->code == T_WINDOW)
        bufs = PyTuple_New(0);
    else
        bufs = Py_BuildValue("(N)", buf_bytes(&t->data));
    if (bufs == NULL)
        goto fail;
    kids = PyTuple_New(t->n);
    if (kids == NULL)
        goto fail;
    for (Py_ssize_t i = 0; i < t->n; i++) {
        PyObject *k = describe(&t->kids[i]);
        if (k == NULL)
            goto fail;
        PyTuple_SET_ITEM(kids, i, k);
    }
    return Py_BuildValue("(nnNNN)", t->length, t->has_valid ? t->nulls : (Py_ssize_t)0, valid, bufs, kids);
fail:
    Py_XDECREF(valid);
    Py_XDECREF(bufs);
    Py_XDECREF(kids);
    return NULL;
}

/* (indices, validity or None) of a state's take, or None when its state rows are the rows */
static PyObject *
describe_take(Plan *p, Py_ssize_t rows)
{
    if (p->identity && p->count == rows)
        return Py_NewRef(Py_None);
    int32_t *take = (int32_t *)p->take.p;
    Buf valid = {NULL, 0, 0};
    int any_null = 0;
    for (Py_ssize_t r = 0; r < rows; r++) {
        int ok = take[r] >= 0;
        if (!ok) {
            take[r] = 0;
            any_null = 1;
        }
        if (bit_push(&valid, r, ok) < 0) {
            PyMem_RawFree(valid.p);
            return NULL;
        }
    }
    PyObject *v = any_null ? buf_bytes(&valid) : Py_NewRef(Py_None);
    PyMem_RawFree(valid.p);
    if (v == NULL)
        return NULL;
    return Py_BuildValue("(NN)", buf_bytes(&p->take), v);
}

/* ------------------------------------------------------------------------------------------ */
/* the Decoder type */

static void
Decoder_clear(Decoder *self)
{
    if (self->plans != NULL) {
        for (Py_ssize_t i = 0; i < self->nstates; i++) {
            node_free(&self->plans[i].col);
            skip_free(&self->plans[i]);
            PyMem_RawFree(self->plans[i].take.p);
        }
        PyMem_Free(self->plans);
        self->plans = NULL;
    }
    PyMem_Free(self->cols);
    self->cols = NULL;
    node_free(&self->key);
    node_free(&self->ns);
    PyMem_Free(self->slots);
    self->slots = NULL;
    self->nslots = 0;
    PyMem_RawFree(self->ids.p);
    PyMem_RawFree(self->id_start.p);
    PyMem_RawFree(self->id_hash.p);
    PyMem_RawFree(self->scratch.p);
    memset(&self->scratch, 0, sizeof(Buf));
    memset(&self->ids, 0, sizeof(Buf));
    memset(&self->id_start, 0, sizeof(Buf));
    memset(&self->id_hash, 0, sizeof(Buf));
    self->nstates = self->ncols = 0;
}

static void
Decoder_dealloc(Decoder *self)
{
    Decoder_clear(self);
    Py_CLEAR(self->corrupt);
    Py_CLEAR(self->source);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int
reset_columns(Decoder *self)
{
    self->rows = 0;
    self->kg_first = 0;
    if (node_reset(&self->key) < 0 || node_reset(&self->ns) < 0)
        return -1;
    for (Py_ssize_t c = 0; c < self->ncols; c++) {
        Plan *p = &self->plans[self->cols[c]];
        if (node_reset(&p->col) < 0)
            return -1;
        p->take.len = 0;
        p->count = 0;
        p->identity = 1;
    }
    return 0;
}

static int
Decoder_init(Decoder *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"plans", "selected", "key", "namespace", "keep_namespace", "prefix", "corrupt_error",
                             "source", NULL};
    PyObject *plans, *selected, *key, *ns, *corrupt_cls, *source;
    int prefix, keep_ns;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!O!OOpiOO", kwlist, &PyTuple_Type, &plans, &PyTuple_Type,
                                     &selected, &key, &ns, &keep_ns, &prefix, &corrupt_cls, &source))
        return -1;
    if (prefix != 1 && prefix != 2) {
        PyErr_SetString(PyExc_ValueError, "prefix must be 1 or 2");
        return -1;
    }
    Decoder_clear(self);
    Py_INCREF(corrupt_cls);
    Py_XSETREF(self->corrupt, corrupt_cls);
    Py_INCREF(source);
    Py_XSETREF(self->source, source);
    self->prefix = prefix;
    self->keep_ns = keep_ns;
    self->failed_cursor = -1;
    self->hint.n = -1;
    Py_ssize_t n = PyTuple_GET_SIZE(plans);
    self->plans = PyMem_Calloc((size_t)(n ? n : 1), sizeof(Plan));
    Py_ssize_t nc = PyTuple_GET_SIZE(selected);
    self->cols = PyMem_Calloc((size_t)(nc ? nc : 1), sizeof(int));
    if (self->plans == NULL || self->cols == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    self->nstates = n;
    if (parse_node(key, &self->key, 0) < 0 || parse_node(ns, &self->ns, 0) < 0)
        return -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        Plan *p = &self->plans[i];
        p->column = -1;
        PyObject *vs, *us, *skip = Py_None;
        int ambiguous;
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(plans, i), "iOOp|O", &p->mode, &vs, &us, &ambiguous, &skip))
            return -1;
        p->ambiguous = ambiguous;
        if (skip != Py_None && parse_skip(p, skip) < 0)
            return -1;
        if (p->mode < M_SKIP || p->mode > M_MAP) {
            PyErr_Format(PyExc_ValueError, "bad plan mode %d", p->mode);
            return -1;
        }
        PyObject *spec = NULL;
        if (p->mode == M_VALUE)
            spec = Py_NewRef(vs);
        else if (p->mode == M_LIST)
            spec = Py_BuildValue("(i(O))", T_LISTC, vs);
        else if (p->mode == M_LIST_RAW)
            spec = Py_BuildValue("(i(i))", T_LISTC, T_RAW);
        else if (p->mode == M_MAP)
            spec = Py_BuildValue("(i(OO))", T_MAPC, us, vs);
        if (p->mode != M_SKIP) {
            if (spec == NULL)
                return -1;
            int rc = parse_node(spec, &p->col, 0);
            Py_DECREF(spec);
            if (rc < 0)
                return -1;
        }
    }
    for (Py_ssize_t c = 0; c < nc; c++) {
        Py_ssize_t sid = PyLong_AsSsize_t(PyTuple_GET_ITEM(selected, c));
        if (sid == -1 && PyErr_Occurred())
            return -1;
        if (sid < 0 || sid >= n || self->plans[sid].mode == M_SKIP || self->plans[sid].column >= 0) {
            PyErr_Format(PyExc_ValueError, "bad selected state %zd", sid);
            return -1;
        }
        self->plans[sid].column = (int)c;
        self->cols[c] = (int)sid;
    }
    self->ncols = nc;
    if (grow_slots(self) < 0)
        return -1;
    return reset_columns(self);
}

/* whether Decoder_init has run (else a RuntimeError) */
static int
ready(Decoder *self)
{
    if (self->plans != NULL)
        return 1;
    PyErr_SetString(PyExc_RuntimeError, "Decoder not initialised");
    return 0;
}

/* after an add: the rows so far, or NULL when it failed (the batch in progress is dropped) */
static PyObject *
added(Decoder *self, int rc)
{
    if (rc < 0) {
        reset_columns(self);
        return NULL;
    }
    return PyLong_FromSsize_t(self->rows);
}

static PyObject *
Decoder_add(Decoder *self, PyObject *args)
{
    PyObject *data;
    Py_ssize_t start, end;
    long kg;
    if (!PyArg_ParseTuple(args, "Onnl:add", &data, &start, &end, &kg))
        return NULL;
    if (!ready(self))
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    int rc = scan(self, view.buf, view.len, start, end, kg);
    PyBuffer_Release(&view);
    return added(self, rc);
}

static PyObject *
Decoder_add_native(Decoder *self, PyObject *args)
{
    PyObject *data;
    Py_ssize_t start, end, blocks;
    long kg;
    int continues;
    if (!PyArg_ParseTuple(args, "Onnlnp:add_native", &data, &start, &end, &kg, &blocks, &continues))
        return NULL;
    if (!ready(self))
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    int rc = end < 0 || end > view.len ? (PyErr_SetString(PyExc_ValueError, "end past the data"), -1)
                                       : scan_native(self, view.buf, start, end, kg, blocks, continues);
    PyBuffer_Release(&view);
    return added(self, rc);
}

static PyObject *
Decoder_add_pairs_from(Decoder *self, PyObject *args)
{
    PyObject *cursors;
    long last_kg;
    Py_ssize_t max_rows;
    if (!PyArg_ParseTuple(args, "O!ln:add_pairs_from", &PyTuple_Type, &cursors, &last_kg, &max_rows))
        return NULL;
    if (!ready(self))
        return NULL;
    int more;
    if (pairs_from(self, cursors, last_kg, max_rows, &more) < 0) {
        reset_columns(self);   /* the batch in progress is dropped */
        return NULL;
    }
    return PyBool_FromLong(more);
}

static PyObject *
Decoder_add_packed(Decoder *self, PyObject *args)
{
    PyObject *parts, *positions;
    Py_ssize_t max_rows;
    if (!PyArg_ParseTuple(args, "O!n:add_packed", &PyTuple_Type, &parts, &max_rows))
        return NULL;
    if (!ready(self))
        return NULL;
    if (pairs_packed(self, parts, max_rows, &positions) < 0) {
        reset_columns(self);   /* the batch in progress is dropped */
        return NULL;
    }
    return positions != NULL ? positions : Py_NewRef(Py_None);
}

static PyObject *
Decoder_flush(Decoder *self, PyObject *Py_UNUSED(ignored))
{
    if (!ready(self))
        return NULL;
    PyObject *cols = PyList_New(self->ncols);
    PyObject *key = NULL, *ns = NULL, *res = NULL;
    if (cols == NULL)
        return NULL;
    for (Py_ssize_t c = 0; c < self->ncols; c++) {
        Plan *p = &self->plans[self->cols[c]];
        PyObject *item = Py_BuildValue("(NN)", describe(&p->col), describe_take(p, self->rows));
        if (item == NULL)
            goto done;
        PyList_SET_ITEM(cols, c, item);
    }
    key = describe(&self->key);
    ns = key ? describe(&self->ns) : NULL;
    if (ns == NULL)
        goto done;
    res = Py_BuildValue("(nOOO)", self->rows, key, ns, cols);
done:
    Py_XDECREF(key);
    Py_XDECREF(ns);
    Py_DECREF(cols);
    if (reset_columns(self) < 0)
        Py_CLEAR(res);
    return res;
}

static PyObject *
Decoder_get_rows(Decoder *self, void *Py_UNUSED(closure))
{
    return PyLong_FromSsize_t(self->rows);
}

static PyObject *
Decoder_get_failed_cursor(Decoder *self, void *Py_UNUSED(closure))
{
    return PyLong_FromSsize_t(self->failed_cursor);
}

static PyGetSetDef Decoder_getset[] = {
    {"rows", (getter)Decoder_get_rows, NULL, "rows decoded since the last flush", NULL},
    {"failed_cursor", (getter)Decoder_get_failed_cursor, NULL,
     "the index of the cursor whose call raised in the last add_pairs_from, or -1", NULL},
    {NULL, NULL, NULL, NULL, NULL}
};

static PyMethodDef Decoder_methods[] = {
    {"add", (PyCFunction)Decoder_add, METH_VARARGS,
     "add(data, start, end, key_group) -> rows: decode one canonical key group's region"},
    {"add_native", (PyCFunction)Decoder_add_native, METH_VARARGS,
     "add_native(data, start, end, key_group, blocks, continues) -> rows: heap-native state blocks filling "
     "data[start:end] (continues: of the key group last added)"},
    {"add_packed", (PyCFunction)Decoder_add_packed, METH_VARARGS,
     "add_packed(((state id, bytes, start), ...), max_rows) -> positions or None: RocksDB pairs packed by "
     "_sst.Merger.read, one buffer a state in state id order, key group by key group; stops after the key group "
     "that reaches max_rows rows (positions: where to start again)"},
    {"add_pairs_from", (PyCFunction)Decoder_add_pairs_from, METH_VARARGS,
     "add_pairs_from(cursors, last_key_group, max_rows) -> more: RocksDB pairs up to last_key_group pulled from "
     "((state id, cursor), ...), key group by key group; stops after the key group that reaches max_rows rows "
     "(more: the cursors have pairs left)"},
    {"flush", (PyCFunction)Decoder_flush, METH_NOARGS,
     "flush() -> (rows, key column, namespace column, [(state column, take), ...]); starts a new batch"},
    {NULL, NULL, 0, NULL}
};

static PyTypeObject DecoderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "fstate.savepoint._columnar.Decoder",
    .tp_basicsize = sizeof(Decoder),
    .tp_dealloc = (destructor)Decoder_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Decoder of canonical key groups into Arrow buffers.",
    .tp_methods = Decoder_methods,
    .tp_getset = Decoder_getset,
    .tp_init = (initproc)Decoder_init,
    .tp_new = PyType_GenericNew,
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "_columnar",
    "Canonical keyed state decoded into Arrow columnar buffers.", -1, NULL, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__columnar(void)
{
    if (PyType_Ready(&DecoderType) < 0 || PyType_Ready(&ChunkType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&moduledef);
    if (m == NULL)
        return NULL;
    Py_INCREF(&DecoderType);
    if (PyModule_AddObject(m, "Decoder", (PyObject *)&DecoderType) < 0) {
        Py_DECREF(&DecoderType);
        Py_DECREF(m);
        return NULL;
    }
    if (PyModule_AddIntConstant(m, "ABI", 5) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
