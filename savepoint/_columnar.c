/* fstate.savepoint._columnar: canonical key groups decoded straight into Arrow columnar buffers.
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
 *     (TTL, spec). key, namespace: the specs of the key and namespace (the same for every state);
 *     keep_namespace: whether the namespace column is filled (else it stays empty).
 *   .add(data, start, end, key_group) -> rows so far     decodes one key group's region
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

/* type codes (must match savepoint/columnar.py) */
enum {
    T_STRING = 1, T_LONG, T_INT, T_SHORT, T_BYTE, T_BOOL, T_DOUBLE, T_FLOAT, T_CHAR,
    T_ZERO, T_WINDOW, T_TUPLE, T_NULLABLE, T_TTL, T_RAW,
    T_LISTC, T_MAPC                   /* internal: a state's list / map column */
};
enum { M_SKIP = 0, M_VALUE, M_LIST, M_LIST_RAW, M_MAP };

#define LIST_DELIMITER 0x2C
#define END_OF_KEY_GROUP 0xFFFF
#define META_FOLLOWS 0x80

/* ------------------------------------------------------------------------------------------ */
/* growable buffers */

typedef struct { uint8_t *p; size_t len, cap; } Buf;

static int
buf_grow(Buf *b, size_t extra)
{
    size_t need = b->len + extra;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need)
        cap *= 2;
    uint8_t *p = PyMem_RawRealloc(b->p, cap);
    if (p == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    b->p = p;
    b->cap = cap;
    return 0;
}

static inline int
buf_reserve(Buf *b, size_t extra)
{
    return b->len + extra <= b->cap ? 0 : buf_grow(b, extra);
}

static inline int
buf_i32(Buf *b, int32_t v)
{
    if (buf_reserve(b, 4) < 0)
        return -1;
    memcpy(b->p + b->len, &v, 4);
    b->len += 4;
    return 0;
}

static inline int32_t
last_i32(const Buf *b)
{
    int32_t v;
    memcpy(&v, b->p + b->len - 4, 4);
    return v;
}

/* bit i of a bitmap that holds bits [0, i): appended */
static inline int
bit_push(Buf *b, Py_ssize_t i, int v)
{
    size_t byte = (size_t)i >> 3;
    if (byte >= b->len) {
        if (buf_reserve(b, 1) < 0)
            return -1;
        b->p[b->len++] = 0;
    }
    if (v)
        b->p[byte] |= (uint8_t)(1u << (i & 7));
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* columns: one node per Arrow array (wrappers NULLABLE and TTL store into their child) */

typedef struct Node {
    int code;
    Py_ssize_t padding;        /* T_NULLABLE */
    Py_ssize_t n;
    struct Node *kids;
    Py_ssize_t length, nulls;
    int has_valid;
    Buf valid, off, data;
} Node;

static inline Node *
storage(Node *t)
{
    while (t->code == T_NULLABLE || t->code == T_TTL)
        t = &t->kids[0];
    return t;
}

static int
fixed_width(int code)
{
    switch (code) {
    case T_LONG: case T_DOUBLE: return 8;
    case T_INT: case T_FLOAT: return 4;
    case T_SHORT: return 2;
    case T_BYTE: return 1;
    default: return 0;
    }
}

static int
has_offsets(int code)
{
    return code == T_STRING || code == T_CHAR || code == T_ZERO || code == T_RAW || code == T_LISTC ||
           code == T_MAPC;
}

static int
node_reset(Node *t)
{
    t->length = t->nulls = 0;
    t->has_valid = 0;
    t->valid.len = t->off.len = t->data.len = 0;
    if (has_offsets(t->code) && buf_i32(&t->off, 0) < 0)
        return -1;
    for (Py_ssize_t i = 0; i < t->n; i++)
        if (node_reset(&t->kids[i]) < 0)
            return -1;
    return 0;
}

static void
node_free(Node *t)
{
    if (t->kids != NULL) {
        for (Py_ssize_t i = 0; i < t->n; i++)
            node_free(&t->kids[i]);
        PyMem_Free(t->kids);
    }
    PyMem_RawFree(t->valid.p);
    PyMem_RawFree(t->off.p);
    PyMem_RawFree(t->data.p);
    memset(t, 0, sizeof(*t));
}

/* one more valid slot (the data was appended by the caller) */
static inline int
push_valid(Node *c)
{
    if (c->has_valid && bit_push(&c->valid, c->length, 1) < 0)
        return -1;
    c->length++;
    return 0;
}

static int push_null(Node *c);

/* a value for a slot whose parent is null: null, except the non-nullable fields of a window */
static int
push_placeholder(Node *c, int nullable)
{
    if (nullable)
        return push_null(c);
    if (buf_reserve(&c->data, 8) < 0)
        return -1;
    memset(c->data.p + c->data.len, 0, 8);
    c->data.len += 8;
    return push_valid(c);
}

static int
push_null(Node *c)
{
    c = storage(c);
    if (!c->has_valid) {
        size_t bytes = ((size_t)c->length + 7) >> 3;
        c->valid.len = 0;
        if (buf_reserve(&c->valid, bytes + 1) < 0)
            return -1;
        memset(c->valid.p, 0xFF, bytes);
        if (c->length & 7)
            c->valid.p[bytes - 1] = (uint8_t)((1u << (c->length & 7)) - 1);
        c->valid.len = bytes;
        c->has_valid = 1;
    }
    if (bit_push(&c->valid, c->length, 0) < 0)
        return -1;
    int w = fixed_width(c->code);
    if (w) {
        if (buf_reserve(&c->data, (size_t)w) < 0)
            return -1;
        memset(c->data.p + c->data.len, 0, (size_t)w);
        c->data.len += (size_t)w;
    } else if (c->code == T_BOOL) {
        if (bit_push(&c->data, c->length, 0) < 0)
            return -1;
    } else if (has_offsets(c->code)) {
        if (buf_i32(&c->off, last_i32(&c->off)) < 0)
            return -1;
    } else if (c->code == T_TUPLE || c->code == T_WINDOW) {
        for (Py_ssize_t i = 0; i < c->n; i++)
            if (push_placeholder(&c->kids[i], c->code == T_TUPLE) < 0)
                return -1;
    }
    c->nulls++;
    c->length++;
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* decoding one value (store = 0: bounds and validity checked, nothing stored) */

typedef struct {
    const char *msg;           /* the decoding error (static text) */
    Py_ssize_t at;
} Err;

#define FAIL(e, text) do { (e)->msg = (text); return -1; } while (0)

static inline uint16_t be16(const uint8_t *p) { return (uint16_t)((p[0] << 8) | p[1]); }

static inline uint32_t
be32(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}

static inline uint64_t be64(const uint8_t *p) { return ((uint64_t)be32(p) << 32) | be32(p + 4); }

static inline uint8_t *
put_utf8(uint8_t *o, uint32_t c)
{
    if (c < 0x80) {
        *o++ = (uint8_t)c;
    } else if (c < 0x800) {
        *o++ = (uint8_t)(0xC0 | (c >> 6));
        *o++ = (uint8_t)(0x80 | (c & 0x3F));
    } else if (c < 0x10000) {
        if (c >= 0xD800 && c <= 0xDFFF)
            c = 0xFFFD;        /* a lone surrogate */
        *o++ = (uint8_t)(0xE0 | (c >> 12));
        *o++ = (uint8_t)(0x80 | ((c >> 6) & 0x3F));
        *o++ = (uint8_t)(0x80 | (c & 0x3F));
    } else {
        *o++ = (uint8_t)(0xF0 | (c >> 18));
        *o++ = (uint8_t)(0x80 | ((c >> 12) & 0x3F));
        *o++ = (uint8_t)(0x80 | ((c >> 6) & 0x3F));
        *o++ = (uint8_t)(0x80 | (c & 0x3F));
    }
    return o;
}

/* one UTF-16 unit: a 7-bit varint that must fit 16 bits (binary.read_flink_string) */
static inline int
read_unit(const uint8_t *b, Py_ssize_t len, Py_ssize_t *ppos, uint32_t *unit, Err *e)
{
    Py_ssize_t pos = *ppos;
    if (pos >= len)
        FAIL(e, "truncated string");
    uint32_t c = b[pos++];
    if (c >= 0x80) {
        uint64_t u = c & 0x7F;
        int shift = 7, big = 0;
        for (;;) {
            if (pos >= len)
                FAIL(e, "truncated string");
            uint8_t x = b[pos++];
            if (shift <= 56)
                u |= (uint64_t)(x & 0x7F) << shift;
            else if (x & 0x7F)
                big = 1;
            if (x < 0x80)
                break;
            shift += 7;
        }
        if (big || u > 0xFFFF)
            FAIL(e, "a string's UTF-16 unit is above 0xFFFF");
        c = (uint32_t)u;
    }
    *unit = c;
    *ppos = pos;
    return 0;
}

static int
dec_string(Node *c, const uint8_t *b, Py_ssize_t len, Py_ssize_t *ppos, int store, Err *e)
{
    Py_ssize_t pos = *ppos;
    if (pos < 0 || pos >= len)
        FAIL(e, "string length past the end");
    uint64_t length = b[pos++];
    int huge = 0;
    if (length >= 0x80) {
        length &= 0x7F;
        int shift = 7;
        for (;;) {
            if (pos >= len)
                FAIL(e, "string length past the end");
            uint8_t x = b[pos++];
            if (shift <= 56)
                length |= (uint64_t)(x & 0x7F) << shift;
            else if (x & 0x7F)
                huge = 1;
            if (x < 0x80)
                break;
            shift += 7;
        }
    }
    if (!huge && length == 0) {
        *ppos = pos;
        return store ? push_null(c) : 0;
    }
    if (huge || length - 1 > (uint64_t)(len - pos))
        FAIL(e, "truncated string");
    Py_ssize_t n = (Py_ssize_t)(length - 1);
    const uint8_t *p = b + pos;
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        if (w & 0x8080808080808080ULL)
            break;
    }
    for (; i < n; i++)
        if (p[i] & 0x80)
            break;
    if (i == n) {              /* ASCII: the units are the bytes */
        if (store) {
            if (buf_reserve(&c->data, (size_t)n) < 0)
                return -1;
            memcpy(c->data.p + c->data.len, p, (size_t)n);
            c->data.len += (size_t)n;
        }
        pos += n;
    } else {
        /* at most 3 UTF-8 bytes per unit (a pair: 4 bytes for 2 units) */
        uint8_t *o = NULL;
        if (store) {
            if (buf_reserve(&c->data, (size_t)n * 3) < 0)
                return -1;
            o = c->data.p + c->data.len;
        }
        uint32_t pending = 0;  /* a high surrogate waiting for its low half */
        for (Py_ssize_t k = 0; k < n; k++) {
            uint32_t u;
            if (read_unit(b, len, &pos, &u, e) < 0)
                return -1;
            if (!store)
                continue;
            if (pending) {
                if (u >= 0xDC00 && u <= 0xDFFF) {
                    o = put_utf8(o, 0x10000 + ((pending - 0xD800) << 10) + (u - 0xDC00));
                    pending = 0;
                    continue;
                }
                o = put_utf8(o, pending);
                pending = 0;
            }
            if (u >= 0xD800 && u <= 0xDBFF)
                pending = u;
            else
                o = put_utf8(o, u);
        }
        if (store) {
            if (pending)
                o = put_utf8(o, pending);
            c->data.len = (size_t)(o - c->data.p);
        }
    }
    *ppos = pos;
    if (!store)
        return 0;
    if (c->data.len > INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "a string column of one batch exceeds 2 GiB");
        return -1;
    }
    if (buf_i32(&c->off, (int32_t)c->data.len) < 0)
        return -1;
    return push_valid(c);
}

static int
put_fixed(Node *c, const void *v, int w)
{
    if (buf_reserve(&c->data, (size_t)w) < 0)
        return -1;
    memcpy(c->data.p + c->data.len, v, (size_t)w);
    c->data.len += (size_t)w;
    return push_valid(c);
}

static int
dec(Node *t, const uint8_t *b, Py_ssize_t len, Py_ssize_t *ppos, int store, Err *e)
{
    Py_ssize_t pos = *ppos;
    switch (t->code) {
    case T_STRING:
        return dec_string(t, b, len, ppos, store, e);
    case T_LONG: case T_DOUBLE: {
        if (pos < 0 || pos + 8 > len)
            FAIL(e, "8-byte number past the end");
        *ppos = pos + 8;
        uint64_t u = be64(b + pos);
        return store ? put_fixed(t, &u, 8) : 0;
    }
    case T_INT: case T_FLOAT: {
        if (pos < 0 || pos + 4 > len)
            FAIL(e, "4-byte number past the end");
        *ppos = pos + 4;
        uint32_t u = be32(b + pos);
        return store ? put_fixed(t, &u, 4) : 0;
    }
    case T_SHORT: {
        if (pos < 0 || pos + 2 > len)
            FAIL(e, "2-byte number past the end");
        *ppos = pos + 2;
        uint16_t u = be16(b + pos);
        return store ? put_fixed(t, &u, 2) : 0;
    }
    case T_BYTE:
        if (pos < 0 || pos + 1 > len)
            FAIL(e, "byte past the end");
        *ppos = pos + 1;
        return store ? put_fixed(t, b + pos, 1) : 0;
    case T_BOOL:
        if (pos < 0 || pos >= len)
            FAIL(e, "boolean past the end");
        *ppos = pos + 1;
        if (!store)
            return 0;
        if (bit_push(&t->data, t->length, b[pos] != 0) < 0)
            return -1;
        return push_valid(t);
    case T_CHAR: {
        if (pos < 0 || pos + 2 > len)
            FAIL(e, "character past the end");
        *ppos = pos + 2;
        if (!store)
            return 0;
        if (buf_reserve(&t->data, 3) < 0)
            return -1;
        uint8_t *o = put_utf8(t->data.p + t->data.len, be16(b + pos));
        t->data.len = (size_t)(o - t->data.p);
        if (buf_i32(&t->off, (int32_t)t->data.len) < 0)
            return -1;
        return push_valid(t);
    }
    case T_ZERO:
        *ppos = pos + 1;
        return store ? push_null(t) : 0;
    case T_WINDOW: {
        if (pos < 0 || pos + 16 > len)
            FAIL(e, "time window past the end");
        *ppos = pos + 16;
        if (!store)
            return 0;
        uint64_t s = be64(b + pos), en = be64(b + pos + 8);
        if (put_fixed(&t->kids[0], &s, 8) < 0 || put_fixed(&t->kids[1], &en, 8) < 0)
            return -1;
        return push_valid(t);
    }
    case T_TUPLE:
        for (Py_ssize_t i = 0; i < t->n; i++)
            if (dec(&t->kids[i], b, len, &pos, store, e) < 0)
                return -1;
        *ppos = pos;
        return store ? push_valid(t) : 0;
    case T_NULLABLE:
        if (pos < 0 || pos >= len)
            FAIL(e, "null flag past the end");
        if (b[pos]) {
            *ppos = pos + 1 + t->padding;
            return store ? push_null(t) : 0;
        }
        pos += 1;
        if (dec(&t->kids[0], b, len, &pos, store, e) < 0)
            return -1;
        *ppos = pos;
        return 0;
    case T_TTL:
        pos += 8;
        if (dec(&t->kids[0], b, len, &pos, store, e) < 0)
            return -1;
        *ppos = pos;
        return 0;
    case T_RAW: {
        Py_ssize_t s = pos < len ? pos : len;
        *ppos = len > pos ? len : pos;
        if (!store)
            return 0;
        if (buf_reserve(&t->data, (size_t)(len - s)) < 0)
            return -1;
        memcpy(t->data.p + t->data.len, b + s, (size_t)(len - s));
        t->data.len += (size_t)(len - s);
        if (buf_i32(&t->off, (int32_t)t->data.len) < 0)
            return -1;
        return push_valid(t);
    }
    default:
        PyErr_Format(PyExc_SystemError, "fstate._columnar: unknown type code %d", t->code);
        return -1;
    }
}

/* ------------------------------------------------------------------------------------------ */
/* type specs from Python */

static int
parse_node(PyObject *spec, Node *t, int depth)
{
    memset(t, 0, sizeof(*t));
    if (depth > 32) {
        PyErr_SetString(PyExc_ValueError, "type spec nested too deeply");
        return -1;
    }
    if (PyLong_Check(spec)) {
        long c = PyLong_AsLong(spec);
        if (c == -1 && PyErr_Occurred())
            return -1;
        if (c < T_STRING || c > T_RAW || c == T_TUPLE || c == T_NULLABLE || c == T_TTL) {
            PyErr_Format(PyExc_ValueError, "bad type code %ld", c);
            return -1;
        }
        t->code = (int)c;
        if (c == T_WINDOW) {
            t->n = 2;
            t->kids = PyMem_Calloc(2, sizeof(Node));
            if (t->kids == NULL) {
                PyErr_NoMemory();
                return -1;
            }
            t->kids[0].code = t->kids[1].code = T_LONG;
        }
        return 0;
    }
    if (!PyTuple_Check(spec) || PyTuple_GET_SIZE(spec) < 2) {
        PyErr_SetString(PyExc_TypeError, "type spec must be an int or a tuple");
        return -1;
    }
    long c = PyLong_AsLong(PyTuple_GET_ITEM(spec, 0));
    if (c == -1 && PyErr_Occurred())
        return -1;
    PyObject *kids;
    if (c == T_TUPLE || c == T_LISTC || c == T_MAPC) {
        kids = PyTuple_GET_ITEM(spec, 1);
    } else if (c == T_NULLABLE && PyTuple_GET_SIZE(spec) == 3) {
        t->padding = PyLong_AsSsize_t(PyTuple_GET_ITEM(spec, 1));
        if (t->padding == -1 && PyErr_Occurred())
            return -1;
        if (t->padding < 0 || t->padding > (1 << 20)) {
            PyErr_SetString(PyExc_ValueError, "bad nullable padding");
            return -1;
        }
        kids = PyTuple_Pack(1, PyTuple_GET_ITEM(spec, 2));
    } else if (c == T_TTL) {
        kids = PyTuple_Pack(1, PyTuple_GET_ITEM(spec, 1));
    } else {
        PyErr_Format(PyExc_ValueError, "bad composite type code %ld", c);
        return -1;
    }
    if (kids == NULL)
        return -1;
    int owned = c == T_NULLABLE || c == T_TTL;
    int rc = -1;
    if (!PyTuple_Check(kids)) {
        PyErr_SetString(PyExc_TypeError, "children must be a tuple");
        goto done;
    }
    t->code = (int)c;
    t->n = PyTuple_GET_SIZE(kids);
    t->kids = PyMem_Calloc((size_t)(t->n ? t->n : 1), sizeof(Node));
    if (t->kids == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < t->n; i++)
        if (parse_node(PyTuple_GET_ITEM(kids, i), &t->kids[i], depth + 1) < 0)
            goto done;
    if ((c == T_LISTC && t->n != 1) || (c == T_MAPC && t->n != 2) || ((c == T_NULLABLE || c == T_TTL) && t->n != 1)) {
        PyErr_SetString(PyExc_ValueError, "wrong number of children");
        goto done;
    }
    rc = 0;
done:
    if (owned)
        Py_DECREF(kids);
    return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* the decoder */

typedef struct {
    int mode;
    int ambiguous;
    int column;                /* -1: not selected */
    Node col;                  /* VALUE: the value; LIST: (LISTC, elem); MAP: (MAPC, (ukey, value)) */
    Buf take;                  /* int32 per row: the state row, -1 none */
    Py_ssize_t count;          /* state rows */
    int identity;              /* take[r] == r so far */
    int32_t last_row;          /* the row of this state's previous entry in the key group */
} Plan;

typedef struct {
    uint32_t gen, hash;
    int32_t row;
} Slot;

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
    Py_ssize_t kg_first;       /* the first row of the key group */
} Decoder;

static int
raise_corrupt(Decoder *self, const char *fmt, ...)
{
    va_list va;
    va_start(va, fmt);
    PyObject *msg = PyUnicode_FromFormatV(fmt, va);
    va_end(va);
    if (msg == NULL)
        return -1;
    PyObject *exc = PyObject_CallFunctionObjArgs(self->corrupt, msg, self->source, NULL);
    Py_DECREF(msg);
    if (exc != NULL) {
        PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
        Py_DECREF(exc);
    }
    return -1;
}

static int
decode_failed(Decoder *self, long kg, Err *e)
{
    if (PyErr_Occurred())
        return -1;
    return raise_corrupt(self, "key group %ld: cannot decode the state bytes (%s)", kg, e->msg);
}

static inline uint64_t
mix(uint64_t h, uint64_t v)
{
    h ^= v;
    h *= 0x9E3779B97F4A7C15ULL;
    return h ^ (h >> 29);
}

static inline uint64_t
hash_bytes(uint64_t h, const uint8_t *p, Py_ssize_t n)
{
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h = mix(h, w);
    }
    uint64_t w = 0;
    memcpy(&w, p + i, (size_t)(n - i));
    return mix(h, w ^ ((uint64_t)n << 56));
}

static int
grow_slots(Decoder *self)
{
    size_t n = self->nslots ? self->nslots * 2 : 1024;
    Slot *s = PyMem_Calloc(n, sizeof(Slot));
    if (s == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    const uint32_t *hashes = (const uint32_t *)self->id_hash.p;
    uint32_t gen = 1;
    for (Py_ssize_t r = 0; r < self->hashed; r++) {
        uint32_t h = hashes[r];
        size_t i = h & (n - 1);
        while (s[i].gen == gen)
            i = (i + 1) & (n - 1);
        s[i].gen = gen;
        s[i].hash = h;
        s[i].row = (int32_t)(self->kg_first + r);
    }
    PyMem_Free(self->slots);
    self->slots = s;
    self->nslots = n;
    self->gen = gen;
    return 0;
}

static inline uint32_t
identity_hash(const uint8_t *p, Py_ssize_t n)
{
    uint64_t h = hash_bytes(0x243F6A8885A308D3ULL, p, n);
    return (uint32_t)(h ^ (h >> 32));
}

/* key-group row r (relative) into the hash table */
static int
insert_row(Decoder *self, Py_ssize_t r)
{
    if ((size_t)(self->hashed + 1) * 2 > self->nslots && grow_slots(self) < 0)
        return -1;
    const int64_t *off = (const int64_t *)self->id_start.p;
    uint32_t h = identity_hash(self->ids.p + off[r], (Py_ssize_t)(off[r + 1] - off[r]));
    if (buf_reserve(&self->id_hash, 4) < 0)
        return -1;
    memcpy(self->id_hash.p + self->id_hash.len, &h, 4);
    self->id_hash.len += 4;
    size_t mask = self->nslots - 1, i = h & mask;
    while (self->slots[i].gen == self->gen)
        i = (i + 1) & mask;
    self->slots[i].gen = self->gen;
    self->slots[i].hash = h;
    self->slots[i].row = (int32_t)(self->kg_first + r);
    self->hashed++;
    return 0;
}

/* short byte strings: word compares instead of a libc call (identities are a few bytes) */
static inline int
bytes_equal(const uint8_t *a, const uint8_t *b, Py_ssize_t n)
{
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t x, y;
        memcpy(&x, a + i, 8);
        memcpy(&y, b + i, 8);
        if (x != y)
            return 0;
    }
    for (; i < n; i++)
        if (a[i] != b[i])
            return 0;
    return 1;
}

/* memcmp's sign over n bytes */
static inline int
bytes_compare(const uint8_t *a, const uint8_t *b, Py_ssize_t n)
{
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t x, y;
        memcpy(&x, a + i, 8);
        memcpy(&y, b + i, 8);
        if (x != y) {
            x = __builtin_bswap64(x);
            y = __builtin_bswap64(y);
            return x < y ? -1 : 1;
        }
    }
    for (; i < n; i++)
        if (a[i] != b[i])
            return a[i] < b[i] ? -1 : 1;
    return 0;
}

static inline int
same_identity(Decoder *self, Py_ssize_t r, const uint8_t *a, Py_ssize_t n)
{
    const int64_t *off = (const int64_t *)self->id_start.p;
    return off[r + 1] - off[r] == n && bytes_equal(self->ids.p + off[r], a, n);
}

/* identity a (n bytes) after row r's (bytewise order) */
static inline int
after_identity(Decoder *self, Py_ssize_t r, const uint8_t *a, Py_ssize_t n)
{
    const int64_t *off = (const int64_t *)self->id_start.p;
    Py_ssize_t m = (Py_ssize_t)(off[r + 1] - off[r]);
    int c = bytes_compare(self->ids.p + off[r], a, m < n ? m : n);
    return c < 0 || (c == 0 && m < n);
}

/* The row of an identity (a, na) + (b, nb) in the current key group; *fresh = 1 when it is new.
 * Without hashing when the entries come in the usual order: a state's entries follow the rows in
 * the order the first state made them (sorted), or make new rows in increasing order. Otherwise
 * the rows are hashed (lazily) and looked up. -2: a Python error. */
static int32_t
find_row(Decoder *self, Plan *plan, const uint8_t *a, Py_ssize_t na, const uint8_t *b, Py_ssize_t nb, int *fresh)
{
    Py_ssize_t n = na + nb;
    if (nb) {                  /* an ambiguous key: the identity is key bytes + namespace bytes */
        self->scratch.len = 0;
        if (buf_reserve(&self->scratch, (size_t)n) < 0)
            return -2;
        memcpy(self->scratch.p, a, (size_t)na);
        memcpy(self->scratch.p + na, b, (size_t)nb);
        a = self->scratch.p;
    }
    Py_ssize_t kg_rows = self->rows - self->kg_first;
    *fresh = 0;
    if (plan->last_row >= 0) {
        Py_ssize_t r = plan->last_row - self->kg_first;
        if (same_identity(self, r, a, n))
            return plan->last_row;
        if (r + 1 < kg_rows && same_identity(self, r + 1, a, n))
            return plan->last_row + 1;
    } else if (kg_rows > 0 && same_identity(self, 0, a, n)) {
        return (int32_t)self->kg_first;
    }
    int ordered = kg_rows == 0 ||
                  (self->ordered && self->creator == plan && after_identity(self, kg_rows - 1, a, n));
    if (!ordered) {
        self->ordered = 0;
        while (self->hashed < kg_rows)
            if (insert_row(self, self->hashed) < 0)
                return -2;
        uint32_t h = identity_hash(a, n);
        size_t mask = self->nslots - 1, i = h & mask;
        for (;;) {
            Slot *s = &self->slots[i];
            if (s->gen != self->gen)
                break;
            if (s->hash == h && same_identity(self, s->row - self->kg_first, a, n))
                return s->row;
            i = (i + 1) & mask;
        }
    } else {
        self->creator = plan;
    }
    /* a new row: keep its identity */
    if (buf_reserve(&self->ids, (size_t)n) < 0 || buf_reserve(&self->id_start, 8) < 0)
        return -2;
    memcpy(self->ids.p + self->ids.len, a, (size_t)n);
    self->ids.len += (size_t)n;
    int64_t end = (int64_t)self->ids.len;
    memcpy(self->id_start.p + self->id_start.len, &end, 8);
    self->id_start.len += 8;
    *fresh = 1;
    self->rows++;
    if (!ordered && insert_row(self, kg_rows) < 0)
        return -2;
    return (int32_t)(self->rows - 1);
}

static int
start_key_group(Decoder *self)
{
    self->kg_first = self->rows;
    self->ids.len = 0;
    self->id_start.len = 0;
    self->id_hash.len = 0;
    self->hashed = 0;
    self->ordered = 1;
    self->creator = NULL;
    int64_t zero = 0;
    if (buf_reserve(&self->id_start, 8) < 0)
        return -1;
    memcpy(self->id_start.p, &zero, 8);
    self->id_start.len = 8;
    if (++self->gen == 0) {    /* wrapped: clear every slot once */
        memset(self->slots, 0, self->nslots * sizeof(Slot));
        self->gen = 1;
    }
    for (Py_ssize_t c = 0; c < self->ncols; c++)
        self->plans[self->cols[c]].last_row = -1;
    return 0;
}

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

static inline int
var_len_size(Py_ssize_t n)
{
    int size = 1;
    uint64_t u = (uint64_t)n >> 8;
    while (u) {
        size++;
        u >>= 8;
    }
    return size;
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
    if (row == -2)
        return -1;
    if (fresh) {
        Py_ssize_t q = prefix;
        if (dec(&self->key, kb, klen, &q, 1, &e) < 0)
            return decode_failed(self, kg, &e);
        q = ns_start;
        if (self->keep_ns && dec(&self->ns, kb, klen, &q, 1, &e) < 0)
            return decode_failed(self, kg, &e);
        if (new_row(self, row) < 0)
            return -1;
    }
    int32_t *take = (int32_t *)plan->take.p;
    int contiguous = plan->last_row == row;
    plan->last_row = row;
    if (plan->mode == M_VALUE) {
        Py_ssize_t q = 0;
        if (dec(col, vb, vlen, &q, 1, &e) < 0)
            return decode_failed(self, kg, &e);
        if (q != vlen)
            return raise_corrupt(self, "key group %ld: cannot decode the state bytes (the value decodes to %zd of its "
                                 "%zd bytes)", kg, q, vlen);
        int32_t j = (int32_t)plan->count++;
        if (j != row)
            plan->identity = 0;
        take[row] = j;
        return 0;
    }
    if (!contiguous) {
        if (take[row] != -1)
            return raise_corrupt(self, "key group %ld: a key of a %s state comes back after other keys",
                                 kg, plan->mode == M_MAP ? "map" : "list");
        int32_t j = (int32_t)plan->count++;
        if (j != row)
            plan->identity = 0;
        take[row] = j;
        /* a new list / map: its start offset (the end is the next start, or set at flush) */
        if (col->length > 0 && buf_i32(&col->off, (int32_t)storage(&col->kids[0])->length) < 0)
            return -1;
        col->length++;
    }
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
        if (vb[0]) {
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
    int prefix = self->prefix;
    for (;;) {
        if (sid >= self->nstates)
            return raise_corrupt(self, "key group %ld: state id %zd but the backend has %zd states", kg, sid,
                                 self->nstates);
        if (pos + 4 > limit)
            return raise_corrupt(self, "key group %ld: cannot decode the state bytes (no key length at byte %zd)",
                                 kg, pos);
        Py_ssize_t klen = (int32_t)be32(d + pos);
        pos += 4;
        Py_ssize_t kstart = pos;
        Py_ssize_t kend = pos + klen;
        if (klen <= 0 || kend > limit)
            return raise_corrupt(self, "key group %ld: invalid key length %zd at byte %zd", kg, klen, pos - 4);
        if (kend + 4 > limit)
            return raise_corrupt(self, "key group %ld: cannot decode the state bytes (no value length at byte %zd)",
                                 kg, kend);
        Py_ssize_t vlen = (int32_t)be32(d + kend);
        Py_ssize_t vstart = kend + 4;
        pos = vstart + vlen;
        if (vlen < 0 || pos > limit)
            return raise_corrupt(self, "key group %ld: invalid value length %zd at byte %zd", kg, vlen, kend);
        int first = d[kstart];
        int flag = first & META_FOLLOWS;
        long stored;
        if (prefix == 1) {
            stored = first & 0x7F;
        } else {
            if (klen < 2)
                return raise_corrupt(self, "key group %ld: cannot decode the state bytes (a key shorter than its "
                                     "key-group prefix)", kg);
            stored = ((long)(first & 0x7F) << 8) | d[kstart + 1];
        }
        if (stored != kg)
            return raise_corrupt(self, "key group %ld: an entry is prefixed with key group %ld", kg, stored);
        Plan *plan = &self->plans[sid];
        if (plan->mode != M_SKIP && plan->column >= 0) {
            if (entry(self, plan, d + kstart, klen, d + vstart, vlen, kg) < 0)
                return -1;
        }
        if (flag) {
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
        PyObject *vs, *us;
        int ambiguous;
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(plans, i), "iOOp", &p->mode, &vs, &us, &ambiguous))
            return -1;
        p->ambiguous = ambiguous;
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

static PyObject *
Decoder_add(Decoder *self, PyObject *args)
{
    PyObject *data;
    Py_ssize_t start, end;
    long kg;
    if (!PyArg_ParseTuple(args, "Onnl:add", &data, &start, &end, &kg))
        return NULL;
    if (self->plans == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Decoder not initialised");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    int rc = scan(self, view.buf, view.len, start, end, kg);
    PyBuffer_Release(&view);
    if (rc < 0) {
        reset_columns(self);   /* the batch in progress is dropped */
        return NULL;
    }
    return PyLong_FromSsize_t(self->rows);
}

static PyObject *
Decoder_flush(Decoder *self, PyObject *Py_UNUSED(ignored))
{
    if (self->plans == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Decoder not initialised");
        return NULL;
    }
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

static PyGetSetDef Decoder_getset[] = {
    {"rows", (getter)Decoder_get_rows, NULL, "rows decoded since the last flush", NULL},
    {NULL, NULL, NULL, NULL, NULL}
};

static PyMethodDef Decoder_methods[] = {
    {"add", (PyCFunction)Decoder_add, METH_VARARGS,
     "add(data, start, end, key_group) -> rows: decode one canonical key group's region"},
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
    "Canonical keyed state decoded into Arrow columnar buffers.", -1, NULL,
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
    if (PyModule_AddIntConstant(m, "ABI", 1) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
