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
 * read_flink_string(buf, pos) -> (str | None, new pos)
 *
 * ABI: bumped whenever this interface changes; _fastpath.py ignores a build with another number
 * (a stale build_ext --inplace), so rebuild after editing: pip install -e . (or python setup.py
 * build_ext --inplace).
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include "_wire.h"

/* plan modes beyond the shared ones of _wire.h (must match savepoint/_fastpath.py) */
enum { M_TIMER = M_MAP + 1, M_PY };

/* column kinds for rows() */
enum { C_PLAIN = 0, C_LIST, C_MAP };

static PyObject *StructError = NULL;   /* struct.error */

typedef struct TNode {
    int code;
    Py_ssize_t padding;        /* T_NULLABLE */
    Py_ssize_t n;              /* number of children */
    struct TNode *kids;
} TNode;

typedef struct {
    int mode;
    int ambiguous;
    int column;                /* rows(): output column, -1 when not selected */
    int column_kind;
    TNode key, ns, val, ukey;
    PyObject *func;            /* M_PY */
    PyObject *sid;             /* the state id as a Python int */
} Plan;

typedef struct {
    PyObject_HEAD
    Py_ssize_t nstates;
    Plan *plans;
    int prefix;
    PyObject *corrupt;         /* CorruptStateError */
    PyObject *source;
} Scanner;

/* ------------------------------------------------------------------------------------------ */
/* errors */

static void *
err_index(const char *what)
{
    PyErr_Format(PyExc_IndexError, "index out of range (%s)", what);
    return NULL;
}

static void *
err_struct(Py_ssize_t need, Py_ssize_t pos, Py_ssize_t len)
{
    PyErr_Format(StructError ? StructError : PyExc_ValueError,
                 "unpack_from requires a buffer of at least %zd bytes for unpacking %zd bytes at offset %zd "
                 "(actual buffer size is %zd)", pos + need, need, pos, len);
    return NULL;
}

/* raises the CorruptStateError handed to the Scanner; -1 */
#define corrupt(self, ...) wire_corrupt((self)->corrupt, (self)->source, __VA_ARGS__)

/* ------------------------------------------------------------------------------------------ */
/* Flink StringValue strings (_wire.h reads the varints); mirrors binary.read_flink_string,
 * including which inputs fail and with which exception */

static PyObject *
decode_string_units(const uint8_t *b, Py_ssize_t len, Py_ssize_t *ppos, Py_ssize_t n)
{
    Py_ssize_t pos = *ppos;
    Py_UCS4 *cps = PyMem_Malloc((size_t)(n ? n : 1) * sizeof(Py_UCS4));
    if (cps == NULL)
        return PyErr_NoMemory();
    /* first every unit (a unit above 0xFFFF is an error, as struct.pack('>H') makes it in Python,
     * after all units are read) */
    int bad_unit = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        uint32_t c;
        int rc = wire_unit(b, len, &pos, &c);
        if (rc < 0) {
            PyMem_Free(cps);
            return err_index("truncated string");
        }
        bad_unit |= rc;
        cps[i] = c;
    }
    if (bad_unit) {
        PyMem_Free(cps);
        PyErr_SetString(StructError ? StructError : PyExc_ValueError,
                        "'H' format requires 0 <= number <= 65535");
        return NULL;
    }
    /* join surrogate pairs, keep lone surrogates (Python's utf-16 'surrogatepass') */
    Py_ssize_t out = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_UCS4 u = cps[i];
        if (u >= 0xD800 && u <= 0xDBFF && i + 1 < n && cps[i + 1] >= 0xDC00 && cps[i + 1] <= 0xDFFF) {
            u = 0x10000 + ((u - 0xD800) << 10) + (cps[i + 1] - 0xDC00);
            i++;
        }
        cps[out++] = u;
    }
    PyObject *s = PyUnicode_FromKindAndData(PyUnicode_4BYTE_KIND, cps, out);
    PyMem_Free(cps);
    if (s != NULL)
        *ppos = pos;
    return s;
}

static PyObject *
decode_string(const uint8_t *b, Py_ssize_t len, Py_ssize_t *ppos)
{
    Py_ssize_t n;
    switch (wire_string_length(b, len, ppos, &n)) {
    case WIRE_STRING_NULL:
        Py_RETURN_NONE;
    case WIRE_NO_LENGTH:
        return err_index("string length");
    case WIRE_TRUNCATED:
        return err_index("truncated string");
    default:
        break;
    }
    const uint8_t *p = b + *ppos;
    if (is_ascii(p, n)) {
        PyObject *s = PyUnicode_New(n, 127);
        if (s == NULL)
            return NULL;
        memcpy(PyUnicode_DATA(s), p, (size_t)n);
        *ppos += n;
        return s;
    }
    return decode_string_units(b, len, ppos, n);
}

/* ------------------------------------------------------------------------------------------ */
/* values */

static PyObject *
decode(const TNode *t, const uint8_t *b, Py_ssize_t len, Py_ssize_t *ppos)
{
    Py_ssize_t pos = *ppos;
    switch (t->code) {
    case T_STRING:
        return decode_string(b, len, ppos);
    case T_LONG:
        if (pos + 8 > len)
            return err_struct(8, pos, len);
        *ppos = pos + 8;
        return PyLong_FromLongLong((long long)(int64_t)be64(b + pos));
    case T_INT:
        if (pos + 4 > len)
            return err_struct(4, pos, len);
        *ppos = pos + 4;
        return PyLong_FromLong((long)(int32_t)be32(b + pos));
    case T_SHORT:
        if (pos + 2 > len)
            return err_struct(2, pos, len);
        *ppos = pos + 2;
        return PyLong_FromLong((long)(int16_t)be16(b + pos));
    case T_BYTE:
        if (pos + 1 > len)
            return err_struct(1, pos, len);
        *ppos = pos + 1;
        return PyLong_FromLong((long)(int8_t)b[pos]);
    case T_BOOL:
        if (pos >= len)
            return err_index("boolean");
        *ppos = pos + 1;
        return PyBool_FromLong(b[pos] != 0);
    case T_DOUBLE: {
        if (pos + 8 > len)
            return err_struct(8, pos, len);
        uint64_t u = be64(b + pos);
        double d;
        memcpy(&d, &u, 8);
        *ppos = pos + 8;
        return PyFloat_FromDouble(d);
    }
    case T_FLOAT: {
        if (pos + 4 > len)
            return err_struct(4, pos, len);
        uint32_t u = be32(b + pos);
        float f;
        memcpy(&f, &u, 4);
        *ppos = pos + 4;
        return PyFloat_FromDouble((double)f);
    }
    case T_CHAR:
        if (pos + 2 > len)
            return err_struct(2, pos, len);
        *ppos = pos + 2;
        return PyUnicode_FromOrdinal(be16(b + pos));
    case T_ZERO:
        *ppos = pos + 1;
        Py_RETURN_NONE;
    case T_WINDOW: {
        if (pos + 16 > len)
            return err_struct(16, pos, len);
        PyObject *s = PyLong_FromLongLong((long long)(int64_t)be64(b + pos));
        PyObject *e = s ? PyLong_FromLongLong((long long)(int64_t)be64(b + pos + 8)) : NULL;
        if (e == NULL) {
            Py_XDECREF(s);
            return NULL;
        }
        *ppos = pos + 16;
        PyObject *tup = PyTuple_Pack(2, s, e);
        Py_DECREF(s);
        Py_DECREF(e);
        return tup;
    }
    case T_TUPLE: {
        PyObject *tup = PyTuple_New(t->n);
        if (tup == NULL)
            return NULL;
        for (Py_ssize_t i = 0; i < t->n; i++) {
            PyObject *v = decode(&t->kids[i], b, len, &pos);
            if (v == NULL) {
                Py_DECREF(tup);
                return NULL;
            }
            PyTuple_SET_ITEM(tup, i, v);
        }
        *ppos = pos;
        return tup;
    }
    case T_NULLABLE:
        if (pos < 0 || pos >= len)
            return err_index("null flag");
        if (b[pos]) {
            *ppos = pos + 1 + t->padding;
            Py_RETURN_NONE;
        }
        pos += 1;
        {
            PyObject *v = decode(&t->kids[0], b, len, &pos);
            if (v != NULL)
                *ppos = pos;
            return v;
        }
    case T_TTL: {
        pos += 8;
        PyObject *v = decode(&t->kids[0], b, len, &pos);
        if (v != NULL)
            *ppos = pos;
        return v;
    }
    case T_RAW:
        *ppos = len > pos ? len : pos;
        return PyBytes_FromStringAndSize((const char *)b + (pos < len ? pos : len), pos < len ? len - pos : 0);
    default:
        PyErr_Format(PyExc_SystemError, "fstate._speedups: unknown type code %d", t->code);
        return NULL;
    }
}

/* bytes of b[start:end] with Python's slice clipping */
static PyObject *
slice(const uint8_t *b, Py_ssize_t len, Py_ssize_t start, Py_ssize_t end)
{
    if (end > len)
        end = len;
    if (start > end)
        start = end;
    return PyBytes_FromStringAndSize((const char *)b + start, end - start);
}

/* ------------------------------------------------------------------------------------------ */
/* where decoded entries go */

typedef struct {
    PyObject *list;     /* entries(): the output list */
    PyObject *rows;     /* rows(): identity -> [key, ns, values]; table(): identity -> row tuple */
    Py_ssize_t width;
    PyObject *kg;
    int table;          /* table(): rows are the keyed table's tuples */
    int flatten;        /* table(): the key's fields as columns */
    int ns_mode;        /* table(): 0 no namespace columns, 1 window start and end, 2 the namespace */
} Sink;

/* obj.name(arg), its result dropped; -1 when it raised */
static int
call_method(PyObject *obj, const char *name, PyObject *arg)
{
    PyObject *r = PyObject_CallMethod(obj, name, "O", arg);
    Py_XDECREF(r);
    return r == NULL ? -1 : 0;
}

/* One state's value into its column slot, as keyed.rows_from_entries does: maps collect entries,
 * lists are extended, anything else replaces. Takes the reference of value. */
static int
merge(PyObject **slot, int kind, PyObject *value)
{
    PyObject *cur = *slot;
    int rc = 0;
    if (kind == C_MAP) {
        if (cur == Py_None) {
            PyObject *m = PyDict_New();
            if (m == NULL) {
                Py_DECREF(value);
                return -1;
            }
            *slot = m;
            Py_DECREF(cur);
            cur = m;
        }
        if (PyTuple_Check(value)) {
            if (PyTuple_GET_SIZE(value) < 2) {
                PyErr_SetString(PyExc_IndexError, "tuple index out of range");
                rc = -1;
            } else {
                rc = PyObject_SetItem(cur, PyTuple_GET_ITEM(value, 0), PyTuple_GET_ITEM(value, 1));
            }
        } else {
            rc = call_method(cur, "update", value);
        }
        Py_DECREF(value);
        return rc;
    }
    if (kind == C_LIST && cur != Py_None) {
        if (PyList_CheckExact(cur) && PyList_CheckExact(value)) {
            Py_ssize_t n = PyList_GET_SIZE(cur);
            rc = PyList_SetSlice(cur, n, n, value);
        } else {
            rc = call_method(cur, "extend", value);
        }
        Py_DECREF(value);
        return rc;
    }
    *slot = value;
    Py_DECREF(cur);
    return 0;
}

/* A new row of the keyed table (tables._keyed_output): key part, namespace part, None per state.
 * Takes the references of key and ns. */
static PyObject *
new_table_row(Sink *sink, PyObject *key, PyObject *ns)
{
    PyObject *keyt = NULL, *tup = NULL;
    Py_ssize_t nk = 1, nn = sink->ns_mode == 0 ? 0 : sink->ns_mode == 1 ? 2 : 1;
    if (sink->flatten) {
        keyt = PySequence_Tuple(key);
        if (keyt == NULL)
            goto done;
        nk = PyTuple_GET_SIZE(keyt);
    }
    tup = PyTuple_New(nk + nn + sink->width);
    if (tup == NULL)
        goto done;
    for (Py_ssize_t i = 0; i < nk; i++) {
        PyObject *x = keyt != NULL ? PyTuple_GET_ITEM(keyt, i) : key;
        Py_INCREF(x);
        PyTuple_SET_ITEM(tup, i, x);
    }
    if (sink->ns_mode == 1) {
        for (Py_ssize_t i = 0; i < 2; i++) {
            PyObject *x = ns == Py_None ? Py_NewRef(Py_None) : PySequence_GetItem(ns, i);
            if (x == NULL) {
                Py_CLEAR(tup);
                goto done;
            }
            PyTuple_SET_ITEM(tup, nk + i, x);
        }
    } else if (sink->ns_mode != 0) {
        PyTuple_SET_ITEM(tup, nk, Py_NewRef(ns));
    }
    for (Py_ssize_t i = nk + nn; i < nk + nn + sink->width; i++)
        PyTuple_SET_ITEM(tup, i, Py_NewRef(Py_None));
done:
    Py_XDECREF(keyt);
    Py_DECREF(key);
    Py_DECREF(ns);
    return tup;
}

/* an entry that fails: releases what was decoded of it (any may be NULL); -1 */
static int
drop_entry(PyObject *ident, PyObject *key, PyObject *ns, PyObject *value)
{
    Py_XDECREF(ident);
    Py_XDECREF(key);
    Py_XDECREF(ns);
    Py_XDECREF(value);
    return -1;
}

/* Takes the references of ident, key, ns and value. */
static int
emit(Sink *sink, Plan *plan, PyObject *ident, PyObject *key, PyObject *ns, PyObject *value)
{
    if (sink->list != NULL) {
        PyObject *tup = PyTuple_New(6);
        if (tup == NULL)
            goto fail;
        Py_INCREF(plan->sid);
        Py_INCREF(sink->kg);
        PyTuple_SET_ITEM(tup, 0, plan->sid);
        PyTuple_SET_ITEM(tup, 1, sink->kg);
        PyTuple_SET_ITEM(tup, 2, ident);
        PyTuple_SET_ITEM(tup, 3, key);
        PyTuple_SET_ITEM(tup, 4, ns);
        PyTuple_SET_ITEM(tup, 5, value);
        int rc = PyList_Append(sink->list, tup);
        Py_DECREF(tup);
        return rc;
    }
    int c = plan->column;
    PyObject *row = PyDict_GetItemWithError(sink->rows, ident);
    if (row == NULL && PyErr_Occurred())
        goto fail;
    if (sink->table) {
        /* the row tuple is filled in place: nothing outside this scan has seen it yet */
        if (row == NULL) {
            row = new_table_row(sink, key, ns);
            key = ns = NULL;
            if (row == NULL)
                goto fail;
            int rc = PyDict_SetItem(sink->rows, ident, row);
            Py_DECREF(row);
            if (rc < 0)
                goto fail;
        } else {
            Py_CLEAR(key);
            Py_CLEAR(ns);
        }
        Py_CLEAR(ident);
        if (!PyTuple_CheckExact(row) || PyTuple_GET_SIZE(row) < sink->width) {
            PyErr_SetString(PyExc_TypeError, "table rows must be tuples made by this scanner");
            Py_DECREF(value);
            return -1;
        }
        Py_ssize_t slot = PyTuple_GET_SIZE(row) - sink->width + c;
        return merge(&((PyTupleObject *)row)->ob_item[slot], plan->column_kind, value);
    }
    /* rows: the grouping of keyed.rows_from_entries */
    PyObject *vals;
    if (row == NULL) {
        vals = PyList_New(sink->width);
        if (vals == NULL)
            goto fail;
        for (Py_ssize_t i = 0; i < sink->width; i++)
            PyList_SET_ITEM(vals, i, Py_NewRef(Py_None));
        row = PyList_New(3);
        if (row == NULL) {
            Py_DECREF(vals);
            goto fail;
        }
        PyList_SET_ITEM(row, 0, key);
        PyList_SET_ITEM(row, 1, ns);
        PyList_SET_ITEM(row, 2, vals);
        key = ns = NULL;
        int rc = PyDict_SetItem(sink->rows, ident, row);
        Py_DECREF(row);
        if (rc < 0)
            goto fail;
    } else {
        Py_CLEAR(key);
        Py_CLEAR(ns);
        if (!PyList_CheckExact(row) || PyList_GET_SIZE(row) != 3 || !PyList_CheckExact(PyList_GET_ITEM(row, 2)) ||
            PyList_GET_SIZE(PyList_GET_ITEM(row, 2)) != sink->width) {
            PyErr_SetString(PyExc_TypeError, "rows must map to [key, namespace, values] made by this scanner");
            goto fail;
        }
        vals = PyList_GET_ITEM(row, 2);
    }
    Py_CLEAR(ident);
    return merge(&((PyListObject *)vals)->ob_item[c], plan->column_kind, value);

fail:
    return drop_entry(ident, key, ns, value);
}

/* ------------------------------------------------------------------------------------------ */
/* one entry */

/* key: the composite key (prefix, key, [len], namespace, [len], [user key]); identity, key, ns
 * and the position after the namespace */
static int
split_key(Plan *plan, int prefix, const uint8_t *kb, Py_ssize_t klen, PyObject **ident, PyObject **key,
          PyObject **ns, Py_ssize_t *after)
{
    Py_ssize_t p = prefix;
    *key = decode(&plan->key, kb, klen, &p);
    if (*key == NULL)
        return -1;
    Py_ssize_t key_end = p;
    if (plan->ambiguous)
        p += var_len_size(p - prefix);
    Py_ssize_t ns_start = p;
    *ns = decode(&plan->ns, kb, klen, &p);
    if (*ns == NULL) {
        Py_CLEAR(*key);
        return -1;
    }
    if (plan->ambiguous) {
        PyObject *a = slice(kb, klen, prefix, key_end);
        PyObject *b = a ? slice(kb, klen, ns_start, p) : NULL;
        if (b != NULL) {
            PyBytes_Concat(&a, b);   /* releases a on failure */
            Py_DECREF(b);
        } else {
            Py_XDECREF(a);
            a = NULL;
        }
        *ident = a;
        p += var_len_size(p - ns_start);
    } else {
        *ident = slice(kb, klen, prefix, p);
    }
    if (*ident == NULL) {
        Py_CLEAR(*key);
        Py_CLEAR(*ns);
        return -1;
    }
    *after = p;
    return 0;
}

/* keyed_codecs._exact_length: a stored key or value is exactly its serializer's bytes, a decode
 * that stops short (or runs past) means the bytes are damaged */
static int
exact(Py_ssize_t end, Py_ssize_t length, const char *what)
{
    if (end == length)
        return 0;
    PyErr_Format(PyExc_ValueError, "the %s decodes to %zd of its %zd bytes", what, end, length);
    return -1;
}

static int
decode_entry(Scanner *self, Plan *plan, Sink *sink, const uint8_t *kb, Py_ssize_t klen, int flag,
             const uint8_t *vb, Py_ssize_t vlen)
{
    PyObject *ident = NULL, *key = NULL, *ns = NULL, *value = NULL;
    Py_ssize_t p;
    int prefix = self->prefix;

    switch (plan->mode) {
    case M_TIMER: {
        p = prefix;
        if (p + 8 > klen)
            return err_struct(8, p, klen), -1;
        int64_t ts = (int64_t)(be64(kb + p) ^ 0x8000000000000000ULL);
        p += 8;
        key = decode(&plan->key, kb, klen, &p);
        if (key == NULL)
            return -1;
        ns = decode(&plan->ns, kb, klen, &p);
        if (ns == NULL)
            goto fail;
        if (exact(p, klen, "timer") < 0)
            goto fail;
        if (vlen) {
            PyErr_Format(PyExc_ValueError, "a timer entry has a %zd-byte value (timers store none)", vlen);
            goto fail;
        }
        ident = slice(kb, klen, prefix, p);
        if (ident == NULL)
            goto fail;
        value = PyLong_FromLongLong((long long)ts);
        if (value == NULL)
            goto fail;
        return emit(sink, plan, ident, key, ns, value);
    }
    case M_VALUE:
        if (split_key(plan, prefix, kb, klen, &ident, &key, &ns, &p) < 0)
            return -1;
        if (exact(p, klen, "key") < 0)
            goto fail;
        p = 0;
        value = decode(&plan->val, vb, vlen, &p);
        if (value == NULL || exact(p, vlen, "value") < 0)
            goto fail;
        return emit(sink, plan, ident, key, ns, value);
    case M_LIST:
    case M_LIST_RAW:
        if (split_key(plan, prefix, kb, klen, &ident, &key, &ns, &p) < 0)
            return -1;
        if (exact(p, klen, "key") < 0)
            goto fail;
        value = PyList_New(0);
        if (value == NULL)
            goto fail;
        if (plan->mode == M_LIST_RAW) {
            PyObject *raw = PyBytes_FromStringAndSize((const char *)vb, vlen);
            if (raw == NULL || PyList_Append(value, raw) < 0) {
                Py_XDECREF(raw);
                goto fail;
            }
            Py_DECREF(raw);
        } else {
            p = 0;
            while (p < vlen) {
                PyObject *v = decode(&plan->val, vb, vlen, &p);
                if (v == NULL)
                    goto fail;
                int rc = PyList_Append(value, v);
                Py_DECREF(v);
                if (rc < 0)
                    goto fail;
                if (p < vlen) {
                    if (vb[p] != LIST_DELIMITER) {
                        PyErr_Format(PyExc_ValueError,
                                     "list state element not followed by the ',' delimiter at byte %zd", p);
                        goto fail;
                    }
                    p++;
                    if (p == vlen) {
                        PyErr_SetString(PyExc_ValueError, "the list ends with the ',' delimiter");
                        goto fail;
                    }
                }
            }
            if (exact(p, vlen, "list") < 0)
                goto fail;
        }
        return emit(sink, plan, ident, key, ns, value);
    case M_MAP: {
        if (split_key(plan, prefix, kb, klen, &ident, &key, &ns, &p) < 0)
            return -1;
        PyObject *uk = decode(&plan->ukey, kb, klen, &p);
        if (uk == NULL)
            goto fail;
        if (exact(p, klen, "map key") < 0) {
            Py_DECREF(uk);
            goto fail;
        }
        if (vlen < 1) {
            Py_DECREF(uk);
            err_index("map value null flag");
            goto fail;
        }
        PyObject *uv;
        if (vb[0] > 1) {
            Py_DECREF(uk);
            PyErr_Format(PyExc_ValueError, "map value null flag %d", (int)vb[0]);
            goto fail;
        }
        if (vb[0]) {
            if (vlen > 2) {  /* heap savepoints write a byte after the null flag */
                Py_DECREF(uk);
                PyErr_Format(PyExc_ValueError, "a null map value has %zd bytes after its null flag", vlen - 1);
                goto fail;
            }
            uv = Py_None;
            Py_INCREF(uv);
        } else {
            Py_ssize_t q = 1;
            uv = decode(&plan->val, vb, vlen, &q);
            if (uv == NULL || exact(q, vlen, "map value") < 0) {
                Py_XDECREF(uv);
                Py_DECREF(uk);
                goto fail;
            }
        }
        value = PyTuple_New(2);
        if (value == NULL) {
            Py_DECREF(uk);
            Py_DECREF(uv);
            goto fail;
        }
        PyTuple_SET_ITEM(value, 0, uk);
        PyTuple_SET_ITEM(value, 1, uv);
        return emit(sink, plan, ident, key, ns, value);
    }
    case M_PY: {
        PyObject *kbytes = PyBytes_FromStringAndSize((const char *)kb, klen);
        if (kbytes == NULL)
            return -1;
        if (flag)
            ((unsigned char *)PyBytes_AS_STRING(kbytes))[0] &= 0x7F;
        PyObject *vbytes = PyBytes_FromStringAndSize((const char *)vb, vlen);
        if (vbytes == NULL) {
            Py_DECREF(kbytes);
            return -1;
        }
        PyObject *res = PyObject_CallFunctionObjArgs(plan->func, kbytes, vbytes, NULL);
        Py_DECREF(kbytes);
        Py_DECREF(vbytes);
        if (res == NULL)
            return -1;
        PyObject *seq = PySequence_Fast(res, "cannot unpack the decoded entry");
        Py_DECREF(res);
        if (seq == NULL)
            return -1;
        if (PySequence_Fast_GET_SIZE(seq) != 4) {
            PyErr_Format(PyExc_ValueError, "expected 4 values to unpack, got %zd", PySequence_Fast_GET_SIZE(seq));
            Py_DECREF(seq);
            return -1;
        }
        PyObject **items = PySequence_Fast_ITEMS(seq);
        for (int i = 0; i < 4; i++)
            Py_INCREF(items[i]);
        int rc = emit(sink, plan, items[0], items[1], items[2], items[3]);
        Py_DECREF(seq);
        return rc;
    }
    default:
        return 0;
    }

fail:
    return drop_entry(ident, key, ns, value);
}

/* ------------------------------------------------------------------------------------------ */
/* one key group: the framing of keyed._canonical_key_group, strict: every entry lies inside the
 * key group's region [pos, limit) and the end-of-key-group mark is its last two bytes */

static int
truncated(Scanner *self, long kg, Py_ssize_t limit)
{
    return corrupt(self, "key group %ld: its data ends at byte %zd, inside an entry", kg, limit);
}

static int
scan(Scanner *self, const uint8_t *d, Py_ssize_t limit, Py_ssize_t pos, long kg, Sink *sink)
{
    if (pos < 0 || pos + 2 > limit)
        return truncated(self, kg, limit);
    Py_ssize_t sid = be16(d + pos);
    pos += 2;
    for (;;) {
        if (sid >= self->nstates)
            return corrupt(self, "key group %ld: state id %zd but the backend has %zd states", kg, sid,
                           self->nstates);
        WireEntry en;
        switch (wire_entry(d, limit, pos, self->prefix, &en)) {
        case WIRE_NO_KEY_LENGTH:
        case WIRE_NO_VALUE_LENGTH:
            return truncated(self, kg, limit);
        case WIRE_BAD_KEY_LENGTH:
            return corrupt(self, "key group %ld: invalid key length %zd at byte %zd", kg, en.klen, pos);
        case WIRE_BAD_VALUE_LENGTH:
            return corrupt(self, "key group %ld: invalid value length %zd at byte %zd", kg, en.vlen,
                           en.kstart + en.klen);
        case WIRE_SHORT_PREFIX:
            return err_index("key-group prefix"), -1;
        default:
            break;
        }
        pos = en.vstart + en.vlen;
        if (en.stored != kg)
            return corrupt(self, "key group %ld: an entry is prefixed with key group %ld", kg, en.stored);
        Plan *plan = &self->plans[sid];
        if (plan->mode != M_SKIP) {
            if (decode_entry(self, plan, sink, d + en.kstart, en.klen, en.flag, d + en.vstart, en.vlen) < 0)
                return -1;
        }
        if (en.flag) {
            if (pos + 2 > limit)
                return truncated(self, kg, limit);
            Py_ssize_t nxt = be16(d + pos);
            pos += 2;
            if (nxt == END_OF_KEY_GROUP) {
                if (pos != limit)
                    return corrupt(self, "key group %ld: the end-of-key-group mark is at byte %zd, but the key "
                                   "group's data ends at byte %zd", kg, pos - 2, limit);
                return 0;
            }
            sid = nxt;
        }
    }
}

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

/* the buffer of data; end (the key group's region end) must lie inside it */
static int
get_data(PyObject *data, Py_buffer *view, Py_ssize_t end)
{
    if (PyObject_GetBuffer(data, view, PyBUF_SIMPLE) < 0)
        return -1;
    if (end < 0 || end > view->len) {
        PyErr_Format(PyExc_ValueError, "region end %zd is outside the buffer of %zd bytes", end, view->len);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

/* one key group of data[pos:end] into sink (its kg set here) */
static PyObject *
run_scan(Scanner *self, PyObject *data, Py_ssize_t pos, Py_ssize_t end, long kg, Sink *sink)
{
    Py_buffer view;
    if (get_data(data, &view, end) < 0)
        return NULL;
    sink->kg = PyLong_FromLong(kg);
    /* no cycles can form while scanning: spare the collector's passes over the growing rows */
    int gc_was_enabled = PyGC_Disable();
    int rc = sink->kg == NULL ? -1 : scan(self, view.buf, end, pos, kg, sink);
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
    if (self->plans == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Scanner not initialised");
        return NULL;
    }
    Sink sink = {out, NULL, 0, NULL, 0, 0, 0};
    return run_scan(self, data, pos, end, kg, &sink);
}

static PyObject *
grouped(Scanner *self, PyObject *data, Py_ssize_t pos, Py_ssize_t end, long kg, Py_ssize_t width, PyObject *rows, int table,
        int flatten, int ns_mode)
{
    if (self->plans == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Scanner not initialised");
        return NULL;
    }
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
    Sink sink = {NULL, rows, width, NULL, table, flatten, ns_mode};
    return run_scan(self, data, pos, end, kg, &sink);
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

static PyMethodDef Scanner_methods[] = {
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
    {NULL, NULL, 0, NULL}
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "_speedups",
    "Compiled decoders for fstate's hot loops (canonical keyed state, Flink strings).", -1, module_methods,
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
    if (PyModule_AddIntConstant(m, "ABI", 3) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
