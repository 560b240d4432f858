/* fstate.savepoint._encoding: the compiled twin of the keyed writer's two hot loops (the Python code is
 * the reference, savepoint/pair_encoding.py chooses):
 *
 *   encode_rows(columns, key_code, states, max_parallelism, ranges): the rows of one batch (the lists of
 *     a key column and one column per state) as the spill records writers/keyed_stream.py makes
 *     (">HHII" key group, state id, key length, value length, then the key and value bytes), by range
 *     of key groups: {range: bytes}, the same bytes in the same order as KeyedEncoding.pairs and
 *     KeyGroupSpill.add.
 *   encode_arrow(columns, key_code, states, max_parallelism, ranges): the same from the batch's Arrow
 *     arrays read in place (_encoding_arrow.h), for the columns whose Python values would be plain.
 *   key_group_blocks(records, lo, hi): the records of key groups lo..hi of one spill file as canonical
 *     key-group blocks [(key group, bytes)] in ascending order, as keyed.encode_key_group writes them.
 *
 * Both return None, never a guess, for anything they do not encode exactly as the Python code does (a
 * value of another Python type or out of its Java range, a null key, list element or map key, a key
 * that appears twice): the caller then runs the Python code on the same input, which writes it or
 * raises the reference error. */

#include "_speedups_hash.h"
#include "_buf.h"

#define T_BYTES 100   /* byte[]: a 4-byte length and the bytes (encoded here only, never decoded in C) */

/* ------------------------------------------------------------------------------------------ */
/* big-endian numbers and varints into a Buf (_buf.h) */

static inline int
buf_byte(Buf *b, uint8_t c)
{
    return buf_put(b, &c, 1);
}

static inline int
buf_be(Buf *b, uint64_t v, int width)
{
    uint8_t tmp[8];
    for (int i = 0; i < width; i++)
        tmp[i] = (uint8_t)(v >> (8 * (width - 1 - i)));
    return buf_put(b, tmp, (size_t)width);
}

static inline int
buf_varint(Buf *b, uint32_t v)
{
    while (v >= 0x80) {
        if (buf_byte(b, (uint8_t)((v & 0x7F) | 0x80)) < 0)
            return -1;
        v >>= 7;
    }
    return buf_byte(b, (uint8_t)v);
}

/* ------------------------------------------------------------------------------------------ */
/* one value: 0 written, 1 not encodable here (the caller falls back), -1 a Python error */

enum { ENC_OK = 0, ENC_DECLINE = 1, ENC_ERROR = -1 };

static int
long_in(PyObject *v, long long lo, long long hi, long long *out)
{
    if (!PyLong_CheckExact(v))
        return ENC_DECLINE;
    int overflow;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (x == -1 && PyErr_Occurred())
        return ENC_ERROR;
    if (overflow || x < lo || x > hi)
        return ENC_DECLINE;
    *out = x;
    return ENC_OK;
}

/* Flink's StringValue bytes: (UTF-16 units + 1) as a varint, then each unit as a varint */
static int
put_string(Buf *b, PyObject *s)
{
    Py_ssize_t n = PyUnicode_GET_LENGTH(s);
    int kind = PyUnicode_KIND(s);
    const void *data = PyUnicode_DATA(s);
    if (PyUnicode_IS_ASCII(s)) {
        if (buf_varint(b, (uint32_t)n + 1) < 0 || buf_put(b, data, (size_t)n) < 0)
            return ENC_ERROR;
        return ENC_OK;
    }
    Py_ssize_t units = n;
    if (kind == PyUnicode_4BYTE_KIND) {
        const Py_UCS4 *p = data;
        for (Py_ssize_t i = 0; i < n; i++)
            units += p[i] > 0xFFFF;
    }
    if (units >= 0x7FFFFFFF)
        return ENC_DECLINE;
    if (buf_varint(b, (uint32_t)units + 1) < 0)
        return ENC_ERROR;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        if (c > 0xFFFF) {
            c -= 0x10000;
            if (buf_varint(b, 0xD800u + (c >> 10)) < 0 || buf_varint(b, 0xDC00u + (c & 0x3FFu)) < 0)
                return ENC_ERROR;
        } else if (buf_varint(b, c) < 0) {
            return ENC_ERROR;
        }
    }
    return ENC_OK;
}

/* the bytes of scalar ``v`` of type ``code``; ``hash``: its Java hashCode, when not NULL */
static int
put_scalar(Buf *b, int code, PyObject *v, int32_t *hash)
{
    long long x;
    int r;
    uint8_t tmp[8];
    switch (code) {
    case T_STRING:
        if (!PyUnicode_CheckExact(v))
            return ENC_DECLINE;
        if (hash)
            *hash = java_string_hash_of(v);
        return put_string(b, v);
    case T_LONG:
        if ((r = long_in(v, INT64_MIN, INT64_MAX, &x)) != ENC_OK)
            return r;
        if (hash)
            *hash = (int32_t)(uint32_t)((uint64_t)x ^ ((uint64_t)x >> 32));
        return buf_be(b, (uint64_t)x, 8) < 0 ? ENC_ERROR : ENC_OK;
    case T_INT:
    case T_SHORT:
    case T_BYTE: {
        int width = code == T_INT ? 4 : code == T_SHORT ? 2 : 1;
        long long bound = code == T_INT ? INT32_MAX : code == T_SHORT ? INT16_MAX : INT8_MAX;
        if ((r = long_in(v, -bound - 1, bound, &x)) != ENC_OK)
            return r;
        if (hash)
            *hash = (int32_t)x;
        return buf_be(b, (uint64_t)x, width) < 0 ? ENC_ERROR : ENC_OK;
    }
    case T_BOOL:
        if (!PyBool_Check(v))
            return ENC_DECLINE;
        if (hash)
            *hash = v == Py_True ? 1231 : 1237;
        return buf_byte(b, v == Py_True) < 0 ? ENC_ERROR : ENC_OK;
    case T_DOUBLE: {
        if (!PyFloat_CheckExact(v))
            return ENC_DECLINE;
        double d = PyFloat_AS_DOUBLE(v);
        if (PyFloat_Pack8(d, (char *)tmp, 0) < 0)
            return ENC_ERROR;
        if (hash) {
            uint64_t bits = d != d ? 0x7FF8000000000000ull : be64(tmp);
            *hash = (int32_t)(uint32_t)(bits ^ (bits >> 32));
        }
        return buf_put(b, tmp, 8) < 0 ? ENC_ERROR : ENC_OK;
    }
    case T_FLOAT: {
        if (!PyFloat_CheckExact(v))
            return ENC_DECLINE;
        double d = PyFloat_AS_DOUBLE(v);
        if (PyFloat_Pack4(d, (char *)tmp, 0) < 0) {   /* too large for a float: struct's error, in Python */
            PyErr_Clear();
            return ENC_DECLINE;
        }
        if (hash)
            *hash = d != d ? 0x7FC00000 : (int32_t)be32(tmp);
        return buf_put(b, tmp, 4) < 0 ? ENC_ERROR : ENC_OK;
    }
    case T_BYTES: {
        if (!PyBytes_CheckExact(v) || hash)
            return ENC_DECLINE;
        Py_ssize_t n = PyBytes_GET_SIZE(v);
        if (n > INT32_MAX)
            return ENC_DECLINE;
        if (buf_be(b, (uint64_t)n, 4) < 0 || buf_put(b, PyBytes_AS_STRING(v), (size_t)n) < 0)
            return ENC_ERROR;
        return ENC_OK;
    }
    default:
        return ENC_DECLINE;
    }
}

/* ------------------------------------------------------------------------------------------ */
/* encode_rows */

typedef struct {
    int mode;            /* M_VALUE, M_LIST or M_MAP */
    int a, b;            /* value / element / map key code; map value code */
    const uint8_t *ns;   /* the namespace's bytes (every pair of the state has the same) */
    Py_ssize_t ns_len;
} StateSpec;

/* one record: header, key (composite + extra), value */
static int
put_record(Buf *out, long kg, long sid, const Buf *composite, const Buf *extra, const Buf *value)
{
    size_t klen = composite->len + (extra ? extra->len : 0);
    if (klen > UINT32_MAX || value->len > UINT32_MAX)
        return ENC_DECLINE;
    if (buf_be(out, (uint64_t)kg, 2) < 0 || buf_be(out, (uint64_t)sid, 2) < 0 || buf_be(out, klen, 4) < 0
        || buf_be(out, value->len, 4) < 0 || buf_put(out, composite->p, composite->len) < 0
        || (extra && buf_put(out, extra->p, extra->len) < 0) || buf_put(out, value->p, value->len) < 0)
        return ENC_ERROR;
    return ENC_OK;
}

/* a pair's key bytes: its key group (1 byte; 2 above max parallelism 128), a timer's timestamp with its
   sign bit flipped (when timestamp is given), the key's bytes, the state's namespace bytes */
static int
put_composite(Buf *composite, long kg, int prefix, const int64_t *timestamp, const Buf *key, const StateSpec *s)
{
    composite->len = 0;
    if ((prefix == 2 && buf_byte(composite, (uint8_t)(kg >> 8)) < 0) || buf_byte(composite, (uint8_t)kg) < 0
        || (timestamp != NULL && buf_be(composite, (uint64_t)*timestamp ^ 0x8000000000000000ull, 8) < 0)
        || buf_put(composite, key->p, key->len) < 0 || buf_put(composite, s->ns, (size_t)s->ns_len) < 0)
        return ENC_ERROR;
    return ENC_OK;
}

static int
encode_state(Buf *out, long kg, long sid, const StateSpec *s, PyObject *value, const Buf *composite, Buf *tmp,
             Buf *extra)
{
    int r;
    tmp->len = 0;
    if (s->mode == M_VALUE) {
        if ((r = put_scalar(tmp, s->a, value, NULL)) != ENC_OK)
            return r;
        return put_record(out, kg, sid, composite, NULL, tmp);
    }
    if (s->mode == M_LIST) {
        if (!PyList_CheckExact(value))
            return ENC_DECLINE;
        Py_ssize_t n = PyList_GET_SIZE(value);
        if (n == 0)
            return ENC_OK;
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *x = PyList_GET_ITEM(value, i);
            if (x == Py_None)
                return ENC_DECLINE;
            if (i && buf_byte(tmp, LIST_DELIMITER) < 0)
                return ENC_ERROR;
            if ((r = put_scalar(tmp, s->a, x, NULL)) != ENC_OK)
                return r;
        }
        return put_record(out, kg, sid, composite, NULL, tmp);
    }
    /* M_MAP: a list of (key, value) tuples, or a dict */
    PyObject *items = NULL;
    if (PyDict_CheckExact(value)) {
        items = PyDict_Items(value);
        if (items == NULL)
            return ENC_ERROR;
    } else if (PyList_CheckExact(value)) {
        Py_INCREF(value);
        items = value;
    } else {
        return ENC_DECLINE;
    }
    r = ENC_OK;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(items) && r == ENC_OK; i++) {
        PyObject *item = PyList_GET_ITEM(items, i);
        if (!PyTuple_CheckExact(item) || PyTuple_GET_SIZE(item) != 2) {
            r = ENC_DECLINE;
            break;
        }
        PyObject *uk = PyTuple_GET_ITEM(item, 0), *uv = PyTuple_GET_ITEM(item, 1);
        if (uk == Py_None) {
            r = ENC_DECLINE;
            break;
        }
        extra->len = 0;
        tmp->len = 0;
        if ((r = put_scalar(extra, s->a, uk, NULL)) != ENC_OK)
            break;
        if (buf_byte(tmp, uv == Py_None) < 0) {
            r = ENC_ERROR;
            break;
        }
        if (uv != Py_None && (r = put_scalar(tmp, s->b, uv, NULL)) != ENC_OK)
            break;
        r = put_record(out, kg, sid, composite, extra, tmp);
    }
    Py_DECREF(items);
    return r;
}

/* the records by range: {range: bytes} of the non-empty ones */
static PyObject *
records_dict(Buf *bufs, long ranges)
{
    PyObject *result = PyDict_New();
    if (result == NULL)
        return NULL;
    for (long i = 0; i < ranges; i++) {
        if (bufs[i].len == 0)
            continue;
        PyObject *index = PyLong_FromLong(i);
        PyObject *data = PyBytes_FromStringAndSize((const char *)bufs[i].p, (Py_ssize_t)bufs[i].len);
        if (index == NULL || data == NULL || PyDict_SetItem(result, index, data) < 0) {
            Py_XDECREF(index);
            Py_XDECREF(data);
            Py_DECREF(result);
            return NULL;
        }
        Py_DECREF(index);
        Py_DECREF(data);
    }
    return result;
}

#define M_TIMER 5   /* a timer state: the timestamps of a row (an int or a list of them), no value bytes */

/* the timers of one row: key = prefix, timestamp with its sign bit flipped, key bytes, namespace bytes */
static int
encode_timers(Buf *out, long kg, int prefix, long sid, const StateSpec *s, PyObject *value, const Buf *key,
              Buf *composite, Buf *empty)
{
    PyObject *single[1] = {value};
    PyObject **items = single;
    Py_ssize_t n = 1;
    if (PyList_CheckExact(value)) {
        items = ((PyListObject *)value)->ob_item;
        n = PyList_GET_SIZE(value);
    } else if (PyTuple_CheckExact(value)) {
        items = ((PyTupleObject *)value)->ob_item;
        n = PyTuple_GET_SIZE(value);
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        long long ts;
        int r = long_in(items[i], INT64_MIN, INT64_MAX, &ts);
        if (r != ENC_OK)
            return r;
        int64_t timestamp = (int64_t)ts;
        if (put_composite(composite, kg, prefix, &timestamp, key, s) != ENC_OK)
            return ENC_ERROR;
        if ((r = put_record(out, kg, sid, composite, NULL, empty)) != ENC_OK)
            return r;
    }
    return ENC_OK;
}

/* The arguments encode_rows and encode_arrow share: (columns: list, key_code, states: tuple, max
 * parallelism, ranges), checked to agree (a column per state after the keys'); 0, or -1 with the error
 * set naming ``name``. */
static int
parse_encode_args(PyObject *args, const char *name, PyObject **columns, int *key_code, PyObject **states,
                  long *max_parallelism, long *ranges)
{
    if (!PyArg_ParseTuple(args, "O!iO!ll", &PyList_Type, columns, key_code, &PyTuple_Type, states,
                          max_parallelism, ranges))
        return -1;
    if (PyList_GET_SIZE(*columns) != PyTuple_GET_SIZE(*states) + 1 || *max_parallelism <= 0
        || *max_parallelism > 32768 || *ranges <= 0 || *ranges > *max_parallelism) {
        PyErr_Format(PyExc_ValueError, "%s: columns, states, max parallelism or ranges do not agree", name);
        return -1;
    }
    return 0;
}

static PyObject *
py_encode_rows(PyObject *Py_UNUSED(mod), PyObject *args)
{
    PyObject *columns, *states;
    int key_code;
    long max_parallelism, ranges;
    if (parse_encode_args(args, "encode_rows", &columns, &key_code, &states, &max_parallelism, &ranges) < 0)
        return NULL;
    Py_ssize_t n_states = PyTuple_GET_SIZE(states);
    PyObject *keys = PyList_GET_ITEM(columns, 0);
    if (!PyList_CheckExact(keys)) {
        PyErr_SetString(PyExc_TypeError, "encode_rows: columns must be lists");
        return NULL;
    }
    Py_ssize_t n_rows = PyList_GET_SIZE(keys);
    StateSpec *specs = PyMem_Calloc((size_t)n_states + 1, sizeof(StateSpec));
    Buf *bufs = PyMem_Calloc((size_t)ranges, sizeof(Buf));
    Buf composite = {0}, tmp = {0}, extra = {0}, val = {0};
    PyObject *result = NULL;
    int r = ENC_OK;
    if (specs == NULL || bufs == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t s = 0; s < n_states; s++) {
        PyObject *spec = PyTuple_GET_ITEM(states, s), *column = PyList_GET_ITEM(columns, s + 1);
        char *ns;
        if (!PyTuple_Check(spec)
            || !PyArg_ParseTuple(spec, "iiiy#", &specs[s].mode, &specs[s].a, &specs[s].b, &ns, &specs[s].ns_len))
            goto done;
        specs[s].ns = (const uint8_t *)ns;
        if (!PyList_CheckExact(column) || PyList_GET_SIZE(column) != n_rows) {
            PyErr_SetString(PyExc_TypeError, "encode_rows: columns must be lists of one length");
            goto done;
        }
        if (specs[s].mode != M_VALUE && specs[s].mode != M_LIST && specs[s].mode != M_MAP && specs[s].mode != M_TIMER) {
            PyErr_SetString(PyExc_ValueError, "encode_rows: unknown state mode");
            goto done;
        }
    }
    int prefix = max_parallelism <= 128 ? 1 : 2;
    for (Py_ssize_t row = 0; row < n_rows && r == ENC_OK; row++) {
        PyObject *key = PyList_GET_ITEM(keys, row);
        if (key == Py_None) {
            r = ENC_DECLINE;
            break;
        }
        int32_t hash;
        tmp.len = 0;
        if ((r = put_scalar(&tmp, key_code, key, &hash)) != ENC_OK)
            break;
        long kg = flink_murmur((uint32_t)hash) % max_parallelism;
        Buf *out = &bufs[kg * ranges / max_parallelism];
        for (Py_ssize_t s = 0; s < n_states && r == ENC_OK; s++) {
            PyObject *value = PyList_GET_ITEM(PyList_GET_ITEM(columns, s + 1), row);
            if (value == Py_None)
                continue;
            if (specs[s].mode == M_TIMER) {
                val.len = 0;
                r = encode_timers(out, kg, prefix, (long)s, &specs[s], value, &tmp, &composite, &val);
                continue;
            }
            if (put_composite(&composite, kg, prefix, NULL, &tmp, &specs[s]) != ENC_OK) {
                r = ENC_ERROR;
                break;
            }
            r = encode_state(out, kg, (long)s, &specs[s], value, &composite, &val, &extra);
        }
    }
    if (r == ENC_ERROR)
        goto done;
    if (r == ENC_DECLINE) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    result = records_dict(bufs, ranges);
done:
    if (bufs != NULL)
        for (long i = 0; i < ranges; i++)
            buf_free(&bufs[i]);
    PyMem_Free(bufs);
    PyMem_Free(specs);
    buf_free(&composite);
    buf_free(&tmp);
    buf_free(&extra);
    buf_free(&val);
    return result;
}

#include "_encoding_blocks.h"
#include "_encoding_arrow.h"

static PyMethodDef module_methods[] = {
    {"encode_rows", py_encode_rows, METH_VARARGS,
     "encode_rows(columns, key_code, states, max_parallelism, ranges) -> {range: records} or None"},
    {"encode_arrow", py_encode_arrow, METH_VARARGS,
     "encode_arrow(columns, key_code, states, max_parallelism, ranges) -> {range: records} or None"},
    {"key_group_blocks", py_key_group_blocks, METH_VARARGS,
     "key_group_blocks(records, lo, hi) -> [(key group, block)] or None"},
    {NULL, NULL, 0, NULL}
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "_encoding",
    "Compiled encoders of the keyed writer (spill records from rows, key-group blocks from records).", -1,
    module_methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__encoding(void)
{
    PyObject *m = PyModule_Create(&moduledef);
    if (m == NULL)
        return NULL;
    if (PyModule_AddIntConstant(m, "ABI", 1) < 0 || PyModule_AddIntConstant(m, "BYTES", T_BYTES) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
