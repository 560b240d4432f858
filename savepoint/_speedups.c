/* fstate.savepoint._speedups: the compiled fast path for the canonical keyed-state layout.
 *
 * Strict like the Python decoders: the entries of a key group end exactly at its region's end
 * (the end-of-key-group mark is its last two bytes), no entry crosses it, every key and value
 * decodes to exactly its stored length, a timer stores no value, a list value neither stops short
 * nor ends with a delimiter.
 *
 * The plain Python decoders in keyed.py / types/typeinfo.py are the reference; this module must
 * produce exactly what they produce (the same Entry tuples, the same rows) and fail where they fail,
 * with exceptions of the same kinds:
 *
 *   - framing errors Python reports as CorruptStateError are raised as that class (handed over by
 *     the Scanner's constructor) with the same message;
 *   - value decoding errors are raised as IndexError (Python's out-of-range indexing), struct.error
 *     (Python's struct.unpack_from) or ValueError (list delimiter, bad lengths), which the caller
 *     turns into CorruptStateError exactly as it does for the Python decoders.
 *
 * Nothing here trusts a length from the stream: every read is bounds-checked against the buffer.
 *
 * Files: this one (the Scanner type and the module) includes _speedups_values.h (plans, errors,
 * strings, values), _speedups_sink.h (where entries go), _speedups_skip.h (values walked, nothing
 * made), _speedups_scan.h (one entry, one key group), _speedups_top.h (measure_top: keys by their
 * bytes) and _speedups_hash.h (String.hashCode, key groups); all of them stand on _wire.h.
 *
 * Scanner(plans, prefix, corrupt_error, source)
 *     plans: one tuple per state id: (mode, key, namespace, value, user_key, ambiguous, func, column,
 *     column_kind). Type specs are an int code or (TUPLE, (spec, ...)) / (NULLABLE, padding, spec) /
 *     (TTL, spec). Modes: SKIP (state not selected: framing is checked, nothing decoded), VALUE,
 *     LIST, LIST_RAW, MAP, TIMER, PY (func(key bytes, value bytes) -> (identity, key, ns, value),
 *     the Python decoder of a state this module does not decode itself).
 *   .entries(data, pos, end, key_group, out_list)   appends (state id, kg, identity, key, ns, value)
 *   .rows(data, pos, end, key_group, width, rows)   groups into rows: {identity: [key, ns, values]}
 *   .table(data, pos, end, key_group, width, flatten, ns_mode, rows)
 *                                              the keyed table's row tuples: {identity: row}
 *   .measure_top(data, pos, end, key_group, thresholds, top[, deadline])
 *                                              measure() of a canonical key group, each key known by its
 *                                              bytes (_speedups_top.h): per state its totals, its number
 *                                              of keys and only the keys that may rank in top heaps of
 *                                              `top` past thresholds[state id] = (bytes, text, elements,
 *                                              text); None when a plan or a key is not for it
 *   .measure(data, pos, end, key_group, keys[, deadline[, native[, freeze]]])
 *                                              each entry's stored bytes (native: a heap-native key
 *                                              group, each entry's bytes as the canonical layout
 *                                              stores it) into keys[state id]
 *                                              ({key: [bytes, entries, elements, key]}; a key
 *                                              Python cannot hash under freeze(key)); returns each
 *                                              state's [entries, bytes, key bytes, value bytes, elements,
 *                                              TTL timestamps seen, oldest, newest, expired entries,
 *                                              expired bytes, expired list elements] (the TTL wrappers'
 *                                              last accesses; expired: <= deadline, when given)
 * read_flink_string(buf, pos) -> (str | None, new pos)
 * java_string_hash(s) -> int                 Java's String.hashCode of s (types/hashing.hash_string)
 * key_group(java_hash, max_parallelism) -> int   Flink's key group of a hash (hashing.key_group_for_hash)
 * key_group_pieces(data, pos, end, prefix, selected, piece_bytes) -> [runs, ...] | None
 *                                            a large canonical key group cut into pieces that decode to
 *                                            its rows in order (_speedups_split.h)
 *
 * ABI: bumped whenever this interface changes; _compiled.py ignores a build with another number
 * (a stale build_ext --inplace), so rebuild after editing: pip install -e . (or python setup.py
 * build_ext --inplace).
 */


#include "_speedups_values.h"   /* plans, errors, strings, values */
#include "_speedups_sink.h"     /* where entries go */
#include "_speedups_scan.h"     /* one entry, one key group */
#include "_speedups_top.h"      /* measure_top */
#include "_speedups_hash.h"     /* String.hashCode, key groups */
#include "_speedups_split.h"    /* a large key group in pieces */

/* ------------------------------------------------------------------------------------------ */
/* the Scanner type */

static void
free_node(TNode *t)
{
    if (t->kids != NULL) {
        for (Py_ssize_t i = 0; i < t->n; i++)
            free_node(&t->kids[i]);
        PyMem_Free(t->kids);
        t->kids = NULL;
    }
    t->n = 0;
}

static int
parse_node(PyObject *spec, TNode *t, int depth)
{
    memset(t, 0, sizeof(*t));
    if (spec == Py_None)
        return 0;                       /* unused slot */
    long c;
    int composite = wire_spec_head(spec, depth, &c, &t->padding);
    if (composite < 0)
        return -1;
    if (!composite) {
        t->code = (int)c;
        return 0;
    }
    if (c != T_TUPLE && c != T_NULLABLE && c != T_TTL) {
        PyErr_Format(PyExc_ValueError, "bad composite type code %ld", c);
        return -1;
    }
    t->code = (int)c;
    if (c == T_TUPLE) {
        PyObject *kids = PyTuple_GET_ITEM(spec, 1);
        if (!PyTuple_Check(kids)) {
            PyErr_SetString(PyExc_TypeError, "tuple fields must be a tuple");
            return -1;
        }
        t->n = PyTuple_GET_SIZE(kids);
        t->kids = PyMem_Calloc((size_t)(t->n ? t->n : 1), sizeof(TNode));
        if (t->kids == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        for (Py_ssize_t i = 0; i < t->n; i++) {
            if (parse_node(PyTuple_GET_ITEM(kids, i), &t->kids[i], depth + 1) < 0 ||
                t->kids[i].code == 0) {
                if (!PyErr_Occurred())
                    PyErr_SetString(PyExc_ValueError, "a tuple field has no type");
                free_node(t);
                return -1;
            }
        }
        return 0;
    }
    /* one child: the last element */
    PyObject *child = PyTuple_GET_ITEM(spec, PyTuple_GET_SIZE(spec) - 1);
    t->n = 1;
    t->kids = PyMem_Calloc(1, sizeof(TNode));
    if (t->kids == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    if (parse_node(child, &t->kids[0], depth + 1) < 0 || t->kids[0].code == 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "a wrapper type has no inner type");
        free_node(t);
        return -1;
    }
    return 0;
}

static void
Scanner_clear_plans(Scanner *self)
{
    for (Py_ssize_t i = 0; self->tables != NULL && i < self->nstates; i++)
        table_free(&self->tables[i]);
    PyMem_Free(self->tables);
    self->tables = NULL;
    if (self->plans == NULL)
        return;
    for (Py_ssize_t i = 0; i < self->nstates; i++) {
        Plan *p = &self->plans[i];
        free_node(&p->key);
        free_node(&p->ns);
        free_node(&p->val);
        free_node(&p->ukey);
        Py_CLEAR(p->func);
        Py_CLEAR(p->sid);
    }
    PyMem_Free(self->plans);
    self->plans = NULL;
    self->nstates = 0;
}

static void
Scanner_dealloc(Scanner *self)
{
    Scanner_clear_plans(self);
    Py_CLEAR(self->corrupt);
    Py_CLEAR(self->source);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int
needs_type(int code, const char *what)
{
    if (code == 0) {
        PyErr_Format(PyExc_ValueError, "plan lacks the %s type", what);
        return -1;
    }
    return 0;
}

static int
Scanner_init(Scanner *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"plans", "prefix", "corrupt_error", "source", NULL};
    PyObject *plans, *corrupt_cls, *source;
    int prefix;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!iOO", kwlist, &PyTuple_Type, &plans, &prefix,
                                     &corrupt_cls, &source))
        return -1;
    if (prefix != 1 && prefix != 2) {
        PyErr_SetString(PyExc_ValueError, "prefix must be 1 or 2");
        return -1;
    }
    Scanner_clear_plans(self);
    Py_ssize_t n = PyTuple_GET_SIZE(plans);
    self->plans = PyMem_Calloc((size_t)(n ? n : 1), sizeof(Plan));
    if (self->plans == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    self->nstates = n;
    self->prefix = prefix;
    Py_INCREF(corrupt_cls);
    Py_XSETREF(self->corrupt, corrupt_cls);
    Py_INCREF(source);
    Py_XSETREF(self->source, source);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *t = PyTuple_GET_ITEM(plans, i);
        Plan *p = &self->plans[i];
        int mode, ambiguous, column, column_kind;
        PyObject *ks, *ns, *vs, *us, *func;
        if (!PyTuple_Check(t) ||
            !PyArg_ParseTuple(t, "iOOOOpOii", &mode, &ks, &ns, &vs, &us, &ambiguous, &func, &column,
                              &column_kind)) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_TypeError, "a plan must be a tuple");
            return -1;
        }
        if (mode < M_SKIP || mode > M_PY) {
            PyErr_Format(PyExc_ValueError, "bad plan mode %d", mode);
            return -1;
        }
        p->mode = mode;
        p->ambiguous = ambiguous;
        p->column = column;
        p->column_kind = column_kind;
        p->sid = PyLong_FromSsize_t(i);
        if (p->sid == NULL)
            return -1;
        if (parse_node(ks, &p->key, 0) < 0 || parse_node(ns, &p->ns, 0) < 0 || parse_node(vs, &p->val, 0) < 0 ||
            parse_node(us, &p->ukey, 0) < 0)
            return -1;
        switch (mode) {
        case M_PY:
            if (!PyCallable_Check(func)) {
                PyErr_SetString(PyExc_TypeError, "a PY plan needs a callable");
                return -1;
            }
            Py_INCREF(func);
            p->func = func;
            break;
        case M_VALUE:
        case M_LIST:
            if (needs_type(p->val.code, "value") < 0)
                return -1;
            /* fall through */
        case M_LIST_RAW:
        case M_TIMER:
            if (needs_type(p->key.code, "key") < 0 || needs_type(p->ns.code, "namespace") < 0)
                return -1;
            break;
        case M_MAP:
            if (needs_type(p->key.code, "key") < 0 || needs_type(p->ns.code, "namespace") < 0 ||
                needs_type(p->val.code, "value") < 0 || needs_type(p->ukey.code, "user key") < 0)
                return -1;
            break;
        default:
            break;
        }
    }
    return 0;
}

/* one key group of data[pos:end] into sink (its kg set here) */
static PyObject *
run_scan(Scanner *self, PyObject *data, Py_ssize_t pos, Py_ssize_t end, long kg, Sink *sink, int native)
{
    Py_buffer view;
    if (get_data(data, &view, end) < 0)
        return NULL;
    sink->kg = PyLong_FromLong(kg);
    /* no cycles can form while scanning: spare the collector's passes over the growing rows */
    int gc_was_enabled = PyGC_Disable();
    int rc = sink->kg == NULL ? -1
             : native ? scan_native(self, view.buf, end, pos, kg, sink) : scan(self, view.buf, end, pos, kg, sink);
    if (gc_was_enabled)
        PyGC_Enable();
    Py_CLEAR(sink->kg);
    PyBuffer_Release(&view);
    if (rc < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *
Scanner_entries(Scanner *self, PyObject *args)
{
    PyObject *data, *out;
    Py_ssize_t pos, end;
    long kg;
    if (!PyArg_ParseTuple(args, "OnnlO!:entries", &data, &pos, &end, &kg, &PyList_Type, &out))
        return NULL;
    long long unused;
    if (scanner_ready(self, "entries", NULL, NULL, NULL, &unused) < 0)
        return NULL;
    Sink sink = {out, NULL, 0, NULL, 0, 0, 0, NULL, NULL, NULL, 0, 0, NULL, 0, 0, NULL};
    return run_scan(self, data, pos, end, kg, &sink, 0);
}

static PyObject *
grouped(Scanner *self, PyObject *data, Py_ssize_t pos, Py_ssize_t end, long kg, Py_ssize_t width, PyObject *rows, int table,
        int flatten, int ns_mode)
{
    long long unused;
    if (scanner_ready(self, "grouped", NULL, NULL, NULL, &unused) < 0)
        return NULL;
    if (width < 0 || ns_mode < 0 || ns_mode > 2) {
        PyErr_SetString(PyExc_ValueError, "bad width or namespace mode");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < self->nstates; i++) {
        Plan *p = &self->plans[i];
        if (p->mode != M_SKIP && (p->column < 0 || p->column >= width)) {
            PyErr_Format(PyExc_ValueError, "state %zd has no column", i);
            return NULL;
        }
    }
    Sink sink = {NULL, rows, width, NULL, table, flatten, ns_mode, NULL, NULL, NULL, 0, 0, NULL, 0, 0, NULL};
    return run_scan(self, data, pos, end, kg, &sink, 0);
}

static PyObject *
Scanner_rows(Scanner *self, PyObject *args)
{
    PyObject *data, *rows;
    Py_ssize_t pos, end, width;
    long kg;
    if (!PyArg_ParseTuple(args, "OnnlnO!:rows", &data, &pos, &end, &kg, &width, &PyDict_Type, &rows))
        return NULL;
    return grouped(self, data, pos, end, kg, width, rows, 0, 0, 0);
}

static PyObject *
Scanner_table(Scanner *self, PyObject *args)
{
    PyObject *data, *rows;
    Py_ssize_t pos, end, width;
    long kg;
    int flatten, ns_mode;
    if (!PyArg_ParseTuple(args, "OnnlnpiO!:table", &data, &pos, &end, &kg, &width, &flatten, &ns_mode, &PyDict_Type,
                          &rows))
        return NULL;
    return grouped(self, data, pos, end, kg, width, rows, 1, flatten, ns_mode);
}

static PyObject *
Scanner_measure(Scanner *self, PyObject *args)
{
    PyObject *data, *keys, *deadline = Py_None, *freeze = Py_None;
    Py_ssize_t pos, end;
    long kg;
    int native = 0;
    if (!PyArg_ParseTuple(args, "OnnlO!|OpO:measure", &data, &pos, &end, &kg, &PyList_Type, &keys, &deadline,
                          &native, &freeze))
        return NULL;
    long long limit;
    if (scanner_ready(self, "measure", keys, "dicts of keys", deadline, &limit) < 0)
        return NULL;
    for (Py_ssize_t i = 0; i < self->nstates; i++) {
        if (!PyDict_CheckExact(PyList_GET_ITEM(keys, i))) {
            PyErr_SetString(PyExc_TypeError, "measure(): keys must be a list of dicts, one a state");
            return NULL;
        }
    }
    size_t states = (size_t)(self->nstates ? self->nstates : 1);
    long long *totals = PyMem_Calloc(states * TOTALS, sizeof(long long));
    long long *ttl = PyMem_Calloc(states * TTL_FIELDS, sizeof(long long));
    if (totals == NULL || ttl == NULL) {
        PyMem_Free(totals);
        PyMem_Free(ttl);
        return PyErr_NoMemory();
    }
    Sink sink = {NULL, NULL, 0, NULL, 0, 0, 0, keys, totals, self->plans, 0, 0, ttl, deadline != Py_None, limit,
                 freeze == Py_None ? NULL : freeze};
    ttl_stamps.on = 1;
    ttl_stamps.n = 0;
    PyObject *done = run_scan(self, data, pos, end, kg, &sink, native);
    ttl_stamps.on = 0;
    ttl_stamps.n = 0;
    PyObject *out = done == NULL ? NULL : PyList_New(self->nstates);
    Py_XDECREF(done);
    for (Py_ssize_t i = 0; out != NULL && i < self->nstates; i++) {
        long long *t = totals + TOTALS * i, *x = ttl + TTL_FIELDS * i;
        PyObject *row = Py_BuildValue("[LLLLLLLLLLL]", t[0], t[1], t[2], t[3], t[4], x[0], x[1], x[2], x[3], x[4],
                                      x[5]);
        if (row == NULL)
            Py_CLEAR(out);
        else
            PyList_SET_ITEM(out, i, row);
    }
    PyMem_Free(totals);
    PyMem_Free(ttl);
    return out;
}

static PyMethodDef Scanner_methods[] = {
    {"measure_top", (PyCFunction)Scanner_measure_top, METH_VARARGS,
     "measure_top(data, pos, end, key_group, thresholds, top[, deadline]): measure() of one canonical key group "
     "without its keys: per state its 11 totals, its number of keys and [[bytes, entries, elements, key], ...] of "
     "the keys that may rank past (bytes, text, elements, text) in top heaps of top keys; None when a plan or a "
     "key is not for it"},
    {"measure", (PyCFunction)Scanner_measure, METH_VARARGS,
     "measure(data, pos, end, key_group, keys[, deadline[, native[, freeze]]]): each entry of one canonical "
     "(native: heap-native) key group into "
     "keys[state id] (key -> [bytes, entries, elements, key]; a key Python cannot hash under freeze(key)); "
     "the states' [entries, bytes, key bytes, value "
     "bytes, elements, TTL timestamps, oldest, newest, expired entries, expired bytes, expired elements] "
     "(expired: last access <= deadline, counted when a deadline is given)"},
    {"entries", (PyCFunction)Scanner_entries, METH_VARARGS,
     "entries(data, pos, end, key_group, out): append the entries of one canonical key group to out"},
    {"rows", (PyCFunction)Scanner_rows, METH_VARARGS,
     "rows(data, pos, end, key_group, width, rows): group the entries of one key group into rows"},
    {"table", (PyCFunction)Scanner_table, METH_VARARGS,
     "table(data, pos, end, key_group, width, flatten, ns_mode, rows): the keyed table's row tuples of one key "
     "group, by identity"},
    {NULL, NULL, 0, NULL}
};

static PyTypeObject ScannerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "fstate.savepoint._speedups.Scanner",
    .tp_basicsize = sizeof(Scanner),
    .tp_dealloc = (destructor)Scanner_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Decoder of canonical key groups for a fixed set of state plans.",
    .tp_methods = Scanner_methods,
    .tp_init = (initproc)Scanner_init,
    .tp_new = PyType_GenericNew,
};

/* ------------------------------------------------------------------------------------------ */
/* module */

static PyObject *
py_read_flink_string(PyObject *Py_UNUSED(mod), PyObject *args)
{
    PyObject *data;
    Py_ssize_t pos;
    if (!PyArg_ParseTuple(args, "On:read_flink_string", &data, &pos))
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    PyObject *s = decode_string(view.buf, view.len, &pos);
    PyBuffer_Release(&view);
    if (s == NULL)
        return NULL;
    PyObject *res = Py_BuildValue("(Nn)", s, pos);
    return res;
}

static PyMethodDef module_methods[] = {
    {"read_flink_string", py_read_flink_string, METH_VARARGS,
     "read_flink_string(buf, pos) -> (str or None, new pos): a Flink StringValue string"},
    {"java_string_hash", py_java_string_hash, METH_O,
     "java_string_hash(s) -> int: Java's String.hashCode of s (over its UTF-16 code units)"},
    {"key_group", (PyCFunction)(void (*)(void))py_key_group, METH_FASTCALL,
     "key_group(java_hash, max_parallelism) -> int: the key group Flink gives a key of this hashCode"},
    {"key_group_pieces", py_key_group_pieces, METH_VARARGS,
     "key_group_pieces(data, pos, end, prefix, selected, piece_bytes) -> [((state id, start, stop, last key), ...), "
     "...] or None: a canonical key group cut into pieces of about piece_bytes that decode to its rows in order"},
    {NULL, NULL, 0, NULL}
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "_speedups",
    "Compiled decoders for fstate's hot loops (canonical keyed state, Flink strings, key groups).", -1, module_methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    if (PyType_Ready(&ScannerType) < 0)
        return NULL;
    PyObject *struct_mod = PyImport_ImportModule("struct");
    if (struct_mod == NULL)
        return NULL;
    StructError = PyObject_GetAttrString(struct_mod, "error");
    Py_DECREF(struct_mod);
    if (StructError == NULL)
        return NULL;
    PyObject *m = PyModule_Create(&moduledef);
    if (m == NULL)
        return NULL;
    Py_INCREF(&ScannerType);
    if (PyModule_AddObject(m, "Scanner", (PyObject *)&ScannerType) < 0) {
        Py_DECREF(&ScannerType);
        Py_DECREF(m);
        return NULL;
    }
    if (PyModule_AddIntConstant(m, "ABI", 9) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
