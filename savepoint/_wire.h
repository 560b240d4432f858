/* fstate.savepoint: what the two compiled decoders (_speedups.c: rows, _columnar.c: Arrow buffers)
 * share about Flink's bytes: the type codes and plan modes, big-endian reads, the 7-bit varints of
 * Flink StringValue strings, the framing of one canonical entry, and raising the caller's
 * CorruptStateError. Header only (static inline): each extension includes it once.
 *
 * The helpers report problems as return codes, never as Python errors, so that each decoder keeps
 * its own exceptions and messages (the rows decoder mirrors Python's IndexError / struct.error, the
 * columnar one reports CorruptStateError). */

#ifndef FSTATE_WIRE_H
#define FSTATE_WIRE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* type codes (must match savepoint/_fastpath.py and savepoint/columnar.py) */
enum {
    T_STRING = 1, T_LONG, T_INT, T_SHORT, T_BYTE, T_BOOL, T_DOUBLE, T_FLOAT, T_CHAR,
    T_ZERO,       /* VoidNamespace, GlobalWindow, Void, Tuple0: None, one byte, not read */
    T_WINDOW,     /* TimeWindow: (start, end) */
    T_TUPLE,      /* Tuple: a tuple of its fields */
    T_NULLABLE,   /* NullableSerializer: null flag (+ padding) or the value */
    T_TTL,        /* TTL wrapper: 8-byte timestamp skipped, then the value */
    T_RAW         /* an opaque value: the rest of the buffer as bytes */
};

/* plan modes both decoders know (the same numbers in both Python modules) */
enum { M_SKIP = 0, M_VALUE, M_LIST, M_LIST_RAW, M_MAP };

#define LIST_DELIMITER 0x2C
#define END_OF_KEY_GROUP 0xFFFF
#define META_FOLLOWS 0x80

/* ------------------------------------------------------------------------------------------ */
/* big-endian primitives */

static inline uint16_t be16(const uint8_t *p) { return (uint16_t)((p[0] << 8) | p[1]); }

static inline uint32_t
be32(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}

static inline uint64_t be64(const uint8_t *p) { return ((uint64_t)be32(p) << 32) | be32(p + 4); }

/* ------------------------------------------------------------------------------------------ */
/* Flink StringValue strings: a 7-bit varint of (length + 1), 0 for null, then every UTF-16 code
 * unit as a 7-bit varint (binary.read_flink_string is the reference) */

/* A 7-bit varint (low groups first) at *ppos. *wide: it has bits past the 64th. -1: the data ends
 * before (or inside) it; *ppos is then unchanged. */
static inline int
wire_varint(const uint8_t *b, Py_ssize_t len, Py_ssize_t *ppos, uint64_t *value, int *wide)
{
    Py_ssize_t pos = *ppos;
    if (pos < 0 || pos >= len)
        return -1;
    uint64_t v = b[pos++];
    *wide = 0;
    if (v >= 0x80) {
        v &= 0x7F;
        int shift = 7;
        for (;;) {
            if (pos >= len)
                return -1;
            uint8_t x = b[pos++];
            if (shift <= 56)
                v |= (uint64_t)(x & 0x7F) << shift;
            else if (x & 0x7F)
                *wide = 1;
            if (x < 0x80)
                break;
            shift += 7;
        }
    }
    *value = v;
    *ppos = pos;
    return 0;
}

enum { WIRE_STRING_OK = 0, WIRE_STRING_NULL, WIRE_NO_LENGTH, WIRE_TRUNCATED };

/* The length of a string at *ppos: WIRE_STRING_OK with *n units following (*ppos moved past the
 * length), WIRE_STRING_NULL (*ppos moved past it), WIRE_NO_LENGTH (the data ends inside the length)
 * or WIRE_TRUNCATED (more units than bytes left: every unit takes at least one byte). */
static inline int
wire_string_length(const uint8_t *b, Py_ssize_t len, Py_ssize_t *ppos, Py_ssize_t *n)
{
    Py_ssize_t pos = *ppos;
    uint64_t length;
    int huge;
    if (wire_varint(b, len, &pos, &length, &huge) < 0)
        return WIRE_NO_LENGTH;
    if (!huge && length == 0) {
        *ppos = pos;
        return WIRE_STRING_NULL;
    }
    if (huge || length - 1 > (uint64_t)(len - pos))
        return WIRE_TRUNCATED;
    *n = (Py_ssize_t)(length - 1);
    *ppos = pos;
    return WIRE_STRING_OK;
}

/* One UTF-16 unit at *ppos: 0, or 1 when it does not fit 16 bits (*ppos moved past it either way),
 * or -1 when the data ends inside it. */
static inline int
wire_unit(const uint8_t *b, Py_ssize_t len, Py_ssize_t *ppos, uint32_t *unit)
{
    uint64_t u;
    int wide;
    if (wire_varint(b, len, ppos, &u, &wide) < 0)
        return -1;
    *unit = (uint32_t)u;
    return wide || u > 0xFFFF;
}

/* whether n bytes are all below 0x80 (a string whose units are its bytes): word reads, the last
 * one overlapping */
static inline int
is_ascii(const uint8_t *p, Py_ssize_t n)
{
    uint64_t acc = 0, w;
    if (n >= 8) {
        Py_ssize_t i = 0;
        for (; i + 8 <= n; i += 8) {
            memcpy(&w, p + i, 8);
            acc |= w;
        }
        memcpy(&w, p + n - 8, 8);
        return ((acc | w) & 0x8080808080808080ULL) == 0;
    }
    if (n >= 4) {
        uint32_t a, z;
        memcpy(&a, p, 4);
        memcpy(&z, p + n - 4, 4);
        return ((a | z) & 0x80808080u) == 0;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        acc |= p[i];
    return (acc & 0x80) == 0;
}

/* ------------------------------------------------------------------------------------------ */
/* the canonical layout (keyed._canonical_key_group is the reference) */

/* the bytes of the variable-length size a composite key stores after an ambiguous part of n bytes */
static inline Py_ssize_t
var_len_size(Py_ssize_t n)
{
    Py_ssize_t size = 1;
    uint64_t u = (uint64_t)n >> 8;
    while (u) {
        size++;
        u >>= 8;
    }
    return size;
}

/* one entry's frame: i32 key length, key, i32 value length, value */
typedef struct {
    Py_ssize_t kstart, klen, vstart, vlen;
    int flag;                  /* META_FOLLOWS: a u16 state id (or the end mark) follows the value */
    long stored;               /* the key group of the key's prefix */
} WireEntry;

enum { WIRE_ENTRY_OK = 0, WIRE_NO_KEY_LENGTH, WIRE_BAD_KEY_LENGTH, WIRE_NO_VALUE_LENGTH, WIRE_BAD_VALUE_LENGTH,
       WIRE_SHORT_PREFIX };

/* The entry at pos (its state id read by the caller), inside d[..limit); WIRE_ENTRY_OK or the
 * problem. The fields set before a problem say where it is (kstart - 4: the key length, kstart +
 * klen: the value length). */
static inline int
wire_entry(const uint8_t *d, Py_ssize_t limit, Py_ssize_t pos, int prefix, WireEntry *e)
{
    e->kstart = pos + 4;
    if (pos + 4 > limit)
        return WIRE_NO_KEY_LENGTH;
    e->klen = (int32_t)be32(d + pos);
    Py_ssize_t kend = e->kstart + e->klen;
    if (e->klen <= 0 || kend > limit)
        return WIRE_BAD_KEY_LENGTH;
    if (kend + 4 > limit)
        return WIRE_NO_VALUE_LENGTH;
    e->vlen = (int32_t)be32(d + kend);
    e->vstart = kend + 4;
    if (e->vlen < 0 || e->vstart + e->vlen > limit)
        return WIRE_BAD_VALUE_LENGTH;
    int first = d[e->kstart];
    e->flag = first & META_FOLLOWS;
    if (prefix == 1) {
        e->stored = first & 0x7F;
    } else {
        if (e->klen < 2)
            return WIRE_SHORT_PREFIX;
        e->stored = ((long)(first & 0x7F) << 8) | d[e->kstart + 1];
    }
    return WIRE_ENTRY_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* type specs from Python: an int code, or a tuple (code, ...) */

/* The head of a type spec at nesting depth: 0 for a scalar (*code: its checked code), 1 for a
 * tuple (*code: its first item, checked by the caller; a NULLABLE's padding read and checked into
 * *padding), -1 with a Python error. */
static int
wire_spec_head(PyObject *spec, int depth, long *code, Py_ssize_t *padding)
{
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
        *code = c;
        return 0;
    }
    if (!PyTuple_Check(spec) || PyTuple_GET_SIZE(spec) < 2) {
        PyErr_SetString(PyExc_TypeError, "type spec must be an int or a tuple");
        return -1;
    }
    long c = PyLong_AsLong(PyTuple_GET_ITEM(spec, 0));
    if (c == -1 && PyErr_Occurred())
        return -1;
    if (c == T_NULLABLE) {     /* (NULLABLE, padding, spec) */
        if (PyTuple_GET_SIZE(spec) != 3) {
            PyErr_Format(PyExc_ValueError, "bad composite type code %ld", c);
            return -1;
        }
        *padding = PyLong_AsSsize_t(PyTuple_GET_ITEM(spec, 1));
        if (*padding == -1 && PyErr_Occurred())
            return -1;
        if (*padding < 0 || *padding > (1 << 20)) {
            PyErr_SetString(PyExc_ValueError, "bad nullable padding");
            return -1;
        }
    }
    *code = c;
    return 1;
}

/* ------------------------------------------------------------------------------------------ */
/* errors */

/* raises corrupt_cls(message, source) (the CorruptStateError handed to a decoder); always -1 */
static int
wire_corrupt(PyObject *corrupt_cls, PyObject *source, const char *fmt, ...)
{
    va_list va;
    va_start(va, fmt);
    PyObject *msg = PyUnicode_FromFormatV(fmt, va);
    va_end(va);
    if (msg == NULL)
        return -1;
    PyObject *exc = PyObject_CallFunctionObjArgs(corrupt_cls, msg, source, NULL);
    Py_DECREF(msg);
    if (exc != NULL) {
        PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
        Py_DECREF(exc);
    }
    return -1;
}

#endif
