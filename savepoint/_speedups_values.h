/* fstate.savepoint._speedups, part 1 (included by _speedups.c only): the plan of a state and its
 * type tree, the Scanner object, the exceptions Python's decoders raise, Flink strings and the
 * decoding of one value into Python objects. */

#ifndef FSTATE_SPEEDUPS_VALUES_H
#define FSTATE_SPEEDUPS_VALUES_H

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
    struct KeyTable *tables;   /* measure_top(): each state's keys, kept from one call to the next */
    int tables_busy;
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
/* TTL timestamps: while measure() runs, every TTL wrapper decoded records its last-access timestamp
 * (the entry being decoded: its value's, its list elements', its map value's), and measure_entry
 * takes them (the GIL serialises every scan, and measure() switches this on only for its scan) */

typedef struct {
    int on;
    long long *stamps;
    Py_ssize_t n, cap;
} TtlStamps;

static TtlStamps ttl_stamps = {0, NULL, 0, 0};

static int
record_stamp(long long stamp)
{
    if (ttl_stamps.n == ttl_stamps.cap) {
        Py_ssize_t cap = ttl_stamps.cap ? 2 * ttl_stamps.cap : 64;
        long long *grown = PyMem_Realloc(ttl_stamps.stamps, (size_t)cap * sizeof(long long));
        if (grown == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        ttl_stamps.stamps = grown;
        ttl_stamps.cap = cap;
    }
    ttl_stamps.stamps[ttl_stamps.n++] = stamp;
    return 0;
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
        if (ttl_stamps.on && pos >= 0 && pos + 8 <= len && record_stamp((long long)(int64_t)be64(b + pos)) < 0)
            return NULL;
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

#endif
