/* fstate.savepoint._encoding, part 3 (included by _encoding.c only): encode_arrow, encode_rows reading
 * the batch's Arrow arrays in place (the Arrow C data interface: each column's (schema, array)
 * capsules) instead of Python values, for the columns whose Python values would be plain: a key, value
 * and list states of strings, signed integers, booleans, floats and binaries, timers of int64 or lists
 * of them. A map state, an unexpected Arrow format (dictionary, views, ...), a null key or list element,
 * a value out of its Java range or a string that is not UTF-8: None, and the caller takes the next path
 * (encode_rows over the Python values, then the Python code). */

#ifndef FSTATE_ENCODING_ARROW_H
#define FSTATE_ENCODING_ARROW_H

struct ArrowSchema {
    const char *format;
    const char *name;
    const char *metadata;
    int64_t flags;
    int64_t n_children;
    struct ArrowSchema **children;
    struct ArrowSchema *dictionary;
    void (*release)(struct ArrowSchema *);
    void *private_data;
};

struct ArrowArray {
    int64_t length;
    int64_t null_count;
    int64_t offset;
    int64_t n_buffers;
    int64_t n_children;
    const void **buffers;
    struct ArrowArray **children;
    struct ArrowArray *dictionary;
    void (*release)(struct ArrowArray *);
    void *private_data;
};

/* what one array holds: a scalar kind, or a list of one */
enum { A_NONE = 0, A_UTF8, A_LARGE_UTF8, A_BINARY, A_LARGE_BINARY, A_I8, A_I16, A_I32, A_I64, A_BOOL, A_F32, A_F64,
       A_LIST, A_LARGE_LIST };

typedef struct ArrowCol {
    int kind;
    const struct ArrowArray *array;
    struct ArrowCol *child;   /* of a list */
} ArrowCol;

static int
arrow_kind(const char *format)
{
    static const struct { const char *format; int kind; } kinds[] = {
        {"u", A_UTF8}, {"U", A_LARGE_UTF8}, {"z", A_BINARY}, {"Z", A_LARGE_BINARY}, {"c", A_I8}, {"s", A_I16},
        {"i", A_I32}, {"l", A_I64}, {"b", A_BOOL}, {"f", A_F32}, {"g", A_F64}, {"+l", A_LIST}, {"+L", A_LARGE_LIST},
    };
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if (strcmp(format, kinds[i].format) == 0)
            return kinds[i].kind;
    return A_NONE;
}

/* a column of (schema, array): 0 understood (a list's child in ``child``), 1 not */
static int
arrow_col(ArrowCol *col, ArrowCol *child, const struct ArrowSchema *schema, const struct ArrowArray *array)
{
    col->kind = schema->dictionary ? A_NONE : arrow_kind(schema->format);
    col->array = array;
    col->child = NULL;
    if (col->kind == A_NONE)
        return 1;
    if (col->kind == A_LIST || col->kind == A_LARGE_LIST) {
        if (child == NULL || schema->n_children != 1 || array->n_children != 1)
            return 1;
        col->child = child;
        if (arrow_col(child, NULL, schema->children[0], array->children[0]))
            return 1;
    }
    return 0;
}

static inline int
arrow_null(const ArrowCol *c, int64_t i)
{
    const uint8_t *valid = c->array->buffers[0];
    if (c->array->null_count == 0 || valid == NULL)
        return 0;
    int64_t j = c->array->offset + i;
    return !((valid[j >> 3] >> (j & 7)) & 1);
}

/* the [start, end) range of element i of a variable-length array (strings, binaries, lists) */
static inline void
arrow_span(const ArrowCol *c, int64_t i, int64_t *start, int64_t *end)
{
    int64_t j = c->array->offset + i;
    if (c->kind == A_LARGE_UTF8 || c->kind == A_LARGE_BINARY || c->kind == A_LARGE_LIST) {
        const int64_t *o = c->array->buffers[1];
        *start = o[j];
        *end = o[j + 1];
    } else {
        const int32_t *o = c->array->buffers[1];
        *start = o[j];
        *end = o[j + 1];
    }
}

/* one UTF-8 code point at p (n bytes left): its length, 0 for bytes that are not UTF-8 */
static inline int
utf8_point(const uint8_t *p, int64_t n, uint32_t *cp)
{
    uint8_t b = p[0];
    if (b < 0x80) {
        *cp = b;
        return 1;
    }
    int len = b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC2 ? 2 : 0;
    if (len == 0 || b > 0xF4 || n < len)
        return 0;
    uint32_t c = b & (0x3F >> (len - 1));
    for (int k = 1; k < len; k++) {
        if ((p[k] & 0xC0) != 0x80)
            return 0;
        c = (c << 6) | (p[k] & 0x3F);
    }
    if ((len == 3 && (c < 0x800 || (c >= 0xD800 && c <= 0xDFFF))) || (len == 4 && (c < 0x10000 || c > 0x10FFFF)))
        return 0;
    *cp = c;
    return len;
}

/* a UTF-8 string as Flink's StringValue bytes (and Java's hashCode); ENC_DECLINE if not UTF-8 */
static int
put_utf8(Buf *b, const uint8_t *p, int64_t n, int32_t *hash)
{
    int64_t units = 0;
    int ascii = 1;
    for (int64_t i = 0; i < n;) {
        uint32_t c;
        int len = utf8_point(p + i, n - i, &c);
        if (len == 0)
            return ENC_DECLINE;
        ascii &= len == 1;
        units += c > 0xFFFF ? 2 : 1;
        i += len;
    }
    if (units >= 0x7FFFFFFF)
        return ENC_DECLINE;
    if (buf_varint(b, (uint32_t)units + 1) < 0)
        return ENC_ERROR;
    uint32_t h = 0;
    if (ascii) {
        if (buf_put(b, p, (size_t)n) < 0)
            return ENC_ERROR;
        if (hash)
            for (int64_t i = 0; i < n; i++)
                h = 31u * h + p[i];
    } else {
        for (int64_t i = 0; i < n;) {
            uint32_t c;
            i += utf8_point(p + i, n - i, &c);
            if (c > 0xFFFF) {
                uint32_t hi = 0xD800u + ((c - 0x10000) >> 10), lo = 0xDC00u + ((c - 0x10000) & 0x3FFu);
                h = 31u * (31u * h + hi) + lo;
                if (buf_varint(b, hi) < 0 || buf_varint(b, lo) < 0)
                    return ENC_ERROR;
            } else {
                h = 31u * h + c;
                if (buf_varint(b, c) < 0)
                    return ENC_ERROR;
            }
        }
    }
    if (hash)
        *hash = (int32_t)h;
    return ENC_OK;
}

/* element i (not null) of a scalar column as type ``code``: the Python path's bytes and hash, or
 * ENC_DECLINE where its Python value would not be of the code's natural Python type */
static int
arrow_put(Buf *b, int code, const ArrowCol *c, int64_t i, int32_t *hash)
{
    int64_t j = c->array->offset + i;
    const void *data = c->array->buffers[1];
    long long x;
    double d;
    uint8_t tmp[8];
    switch (c->kind) {
    case A_I8: x = ((const int8_t *)data)[j]; goto integer;
    case A_I16: x = ((const int16_t *)data)[j]; goto integer;
    case A_I32: x = ((const int32_t *)data)[j]; goto integer;
    case A_I64: x = ((const int64_t *)data)[j]; goto integer;
    case A_F32: d = ((const float *)data)[j]; goto real;
    case A_F64: d = ((const double *)data)[j]; goto real;
    case A_BOOL:
        if (code != T_BOOL)
            return ENC_DECLINE;
        x = (((const uint8_t *)data)[j >> 3] >> (j & 7)) & 1;
        if (hash)
            *hash = x ? 1231 : 1237;
        return buf_byte(b, (uint8_t)x) < 0 ? ENC_ERROR : ENC_OK;
    case A_UTF8:
    case A_LARGE_UTF8:
    case A_BINARY:
    case A_LARGE_BINARY: {
        int64_t start, end;
        arrow_span(c, i, &start, &end);
        const uint8_t *p = (const uint8_t *)c->array->buffers[2] + start;
        if (c->kind == A_UTF8 || c->kind == A_LARGE_UTF8)
            return code == T_STRING ? put_utf8(b, p, end - start, hash) : ENC_DECLINE;
        if (code != T_BYTES || hash || end - start > INT32_MAX)
            return ENC_DECLINE;
        if (buf_be(b, (uint64_t)(end - start), 4) < 0 || buf_put(b, p, (size_t)(end - start)) < 0)
            return ENC_ERROR;
        return ENC_OK;
    }
    default:
        return ENC_DECLINE;
    }
integer: {
        long long bound = code == T_LONG ? INT64_MAX : code == T_INT ? INT32_MAX : code == T_SHORT ? INT16_MAX
                          : code == T_BYTE ? INT8_MAX : 0;
        if (bound == 0 || x < -bound - 1 || x > bound)
            return ENC_DECLINE;
        int width = code == T_LONG ? 8 : code == T_INT ? 4 : code == T_SHORT ? 2 : 1;
        if (hash)
            *hash = code == T_LONG ? (int32_t)(uint32_t)((uint64_t)x ^ ((uint64_t)x >> 32)) : (int32_t)x;
        return buf_be(b, (uint64_t)x, width) < 0 ? ENC_ERROR : ENC_OK;
    }
real:
    if (code == T_DOUBLE) {
        if (PyFloat_Pack8(d, (char *)tmp, 0) < 0)
            return ENC_ERROR;
        if (hash) {
            uint64_t bits = d != d ? 0x7FF8000000000000ull : be64(tmp);
            *hash = (int32_t)(uint32_t)(bits ^ (bits >> 32));
        }
        return buf_put(b, tmp, 8) < 0 ? ENC_ERROR : ENC_OK;
    }
    if (code == T_FLOAT) {
        if (PyFloat_Pack4(d, (char *)tmp, 0) < 0) {
            PyErr_Clear();
            return ENC_DECLINE;
        }
        if (hash)
            *hash = d != d ? 0x7FC00000 : (int32_t)be32(tmp);
        return buf_put(b, tmp, 4) < 0 ? ENC_ERROR : ENC_OK;
    }
    return ENC_DECLINE;
}

static int
arrow_state(Buf *out, long kg, int prefix, long sid, const StateSpec *s, const ArrowCol *c, int64_t row,
            const Buf *key, Buf *composite, Buf *val)
{
    int r;
    val->len = 0;
    if (s->mode == M_TIMER) {
        const ArrowCol *items = c;
        int64_t start = row, end = row + 1;
        if (c->kind == A_LIST || c->kind == A_LARGE_LIST) {
            arrow_span(c, row, &start, &end);
            items = c->child;
        }
        for (int64_t i = start; i < end; i++) {
            if (items->kind != A_I64 || arrow_null(items, i))
                return ENC_DECLINE;
            int64_t ts = ((const int64_t *)items->array->buffers[1])[items->array->offset + i];
            if (put_composite(composite, kg, prefix, &ts, key, s) != ENC_OK)
                return ENC_ERROR;
            if ((r = put_record(out, kg, sid, composite, NULL, val)) != ENC_OK)
                return r;
        }
        return ENC_OK;
    }
    if (put_composite(composite, kg, prefix, NULL, key, s) != ENC_OK)
        return ENC_ERROR;
    if (s->mode == M_VALUE) {
        if ((r = arrow_put(val, s->a, c, row, NULL)) != ENC_OK)
            return r;
        return put_record(out, kg, sid, composite, NULL, val);
    }
    if (s->mode != M_LIST || (c->kind != A_LIST && c->kind != A_LARGE_LIST))
        return ENC_DECLINE;
    int64_t start, end;
    arrow_span(c, row, &start, &end);
    if (start == end)
        return ENC_OK;
    for (int64_t i = start; i < end; i++) {
        if (arrow_null(c->child, i))
            return ENC_DECLINE;
        if (i > start && buf_byte(val, LIST_DELIMITER) < 0)
            return ENC_ERROR;
        if ((r = arrow_put(val, s->a, c->child, i, NULL)) != ENC_OK)
            return r;
    }
    return put_record(out, kg, sid, composite, NULL, val);
}

static PyObject *
py_encode_arrow(PyObject *Py_UNUSED(mod), PyObject *args)
{
    PyObject *columns, *states;
    int key_code;
    long max_parallelism, ranges;
    if (parse_encode_args(args, "encode_arrow", &columns, &key_code, &states, &max_parallelism, &ranges) < 0)
        return NULL;
    Py_ssize_t n_states = PyTuple_GET_SIZE(states), n_cols = PyList_GET_SIZE(columns);
    StateSpec *specs = PyMem_Calloc((size_t)n_states + 1, sizeof(StateSpec));
    ArrowCol *cols = PyMem_Calloc((size_t)n_cols * 2, sizeof(ArrowCol));
    Buf *bufs = PyMem_Calloc((size_t)ranges, sizeof(Buf));
    Buf composite = {0}, key = {0}, val = {0};
    PyObject *result = NULL;
    int r = ENC_OK;
    int64_t n_rows = -1;
    if (specs == NULL || cols == NULL || bufs == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n_cols; i++) {
        PyObject *pair = PyList_GET_ITEM(columns, i);
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
            PyErr_SetString(PyExc_TypeError, "encode_arrow: a column is a (schema, array) capsule pair");
            goto done;
        }
        const struct ArrowSchema *schema = PyCapsule_GetPointer(PyTuple_GET_ITEM(pair, 0), "arrow_schema");
        const struct ArrowArray *array = schema ? PyCapsule_GetPointer(PyTuple_GET_ITEM(pair, 1), "arrow_array") : NULL;
        if (array == NULL)
            goto done;
        if (n_rows < 0)
            n_rows = array->length;
        if (array->length != n_rows) {
            PyErr_SetString(PyExc_ValueError, "encode_arrow: columns of different lengths");
            goto done;
        }
        if (arrow_col(&cols[2 * i], &cols[2 * i + 1], schema, array))
            r = ENC_DECLINE;
    }
    for (Py_ssize_t s = 0; s < n_states; s++) {
        char *ns;
        PyObject *spec = PyTuple_GET_ITEM(states, s);
        if (!PyTuple_Check(spec)
            || !PyArg_ParseTuple(spec, "iiiy#", &specs[s].mode, &specs[s].a, &specs[s].b, &ns, &specs[s].ns_len))
            goto done;
        specs[s].ns = (const uint8_t *)ns;
        if (specs[s].mode != M_VALUE && specs[s].mode != M_LIST && specs[s].mode != M_TIMER)
            r = ENC_DECLINE;   /* a map: its Python values are dicts (a key given twice is kept once) */
    }
    int prefix = max_parallelism <= 128 ? 1 : 2;
    for (int64_t row = 0; row < n_rows && r == ENC_OK; row++) {
        if (arrow_null(&cols[0], row)) {
            r = ENC_DECLINE;
            break;
        }
        int32_t hash;
        key.len = 0;
        if ((r = arrow_put(&key, key_code, &cols[0], row, &hash)) != ENC_OK)
            break;
        long kg = flink_murmur((uint32_t)hash) % max_parallelism;
        Buf *out = &bufs[kg * ranges / max_parallelism];
        for (Py_ssize_t s = 0; s < n_states && r == ENC_OK; s++) {
            const ArrowCol *c = &cols[2 * (s + 1)];
            if (!arrow_null(c, row))
                r = arrow_state(out, kg, prefix, (long)s, &specs[s], c, row, &key, &composite, &val);
        }
    }
    if (r == ENC_ERROR)
        goto done;
    result = r == ENC_DECLINE ? Py_NewRef(Py_None) : records_dict(bufs, ranges);
done:
    if (bufs != NULL)
        for (long i = 0; i < ranges; i++)
            buf_free(&bufs[i]);
    PyMem_Free(bufs);
    PyMem_Free(cols);
    PyMem_Free(specs);
    buf_free(&composite);
    buf_free(&key);
    buf_free(&val);
    return result;
}

#endif
