/* fstate.savepoint._columnar, part 1 (included by _columnar.c only): Arrow buffers, the column
 * tree (one node per Arrow array) and the decoding of one value into it. */

#ifndef FSTATE_COLUMNAR_VALUES_H
#define FSTATE_COLUMNAR_VALUES_H

#include "_wire.h"
#include "_buf.h"   /* Buf, buf_reserve */

/* internal type codes beyond the shared ones of _wire.h: a state's list / map column */
enum { T_LISTC = T_RAW + 1, T_MAPC };

/* ------------------------------------------------------------------------------------------ */
/* growable buffers (Buf: _buf.h) */

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

static int
dec_string(Node *c, const uint8_t *b, Py_ssize_t len, Py_ssize_t *ppos, int store, Err *e)
{
    Py_ssize_t pos = *ppos, n;
    switch (wire_string_length(b, len, &pos, &n)) {
    case WIRE_STRING_NULL:
        *ppos = pos;
        return store ? push_null(c) : 0;
    case WIRE_NO_LENGTH:
        FAIL(e, "string length past the end");
    case WIRE_TRUNCATED:
        FAIL(e, "truncated string");
    default:
        break;
    }
    const uint8_t *p = b + pos;
    if (is_ascii(p, n)) {      /* ASCII: the units are the bytes */
        if (store) {
            if (buf_reserve(&c->data, (size_t)n) < 0)
                return -1;
            copy_bytes(c->data.p + c->data.len, p, (size_t)n);  /* keys and short values: no libc call */
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
            int rc = wire_unit(b, len, &pos, &u);
            if (rc < 0)
                FAIL(e, "truncated string");
            if (rc > 0)
                FAIL(e, "a string's UTF-16 unit is above 0xFFFF");
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
    copy_bytes(c->data.p + c->data.len, (const uint8_t *)v, (size_t)w);
    c->data.len += (size_t)w;
    return push_valid(c);
}

static int dec_any(Node *t, const uint8_t *b, Py_ssize_t len, Py_ssize_t *ppos, int store, Err *e);

/* one value of type t at *ppos into t's column (store = 0: checked and skipped); the common
 * scalars inline, the rest in dec_any */
static inline int
dec(Node *t, const uint8_t *b, Py_ssize_t len, Py_ssize_t *ppos, int store, Err *e)
{
    if (t->code == T_STRING)
        return dec_string(t, b, len, ppos, store, e);
    if (t->code == T_LONG) {
        Py_ssize_t pos = *ppos;
        if (pos < 0 || pos + 8 > len)
            FAIL(e, "8-byte number past the end");
        *ppos = pos + 8;
        uint64_t u = be64(b + pos);
        return store ? put_fixed(t, &u, 8) : 0;
    }
    return dec_any(t, b, len, ppos, store, e);
}

static int
dec_any(Node *t, const uint8_t *b, Py_ssize_t len, Py_ssize_t *ppos, int store, Err *e)
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
    long c;
    int composite = wire_spec_head(spec, depth, &c, &t->padding);
    if (composite < 0)
        return -1;
    if (!composite) {
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
    PyObject *kids;
    if (c == T_TUPLE || c == T_LISTC || c == T_MAPC) {
        kids = PyTuple_GET_ITEM(spec, 1);
    } else if (c == T_NULLABLE) {
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

#endif