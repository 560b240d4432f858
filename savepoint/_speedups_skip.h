/* fstate.savepoint._speedups, part 3a (included by _speedups_scan.h only): skip(), decode() without
 * its objects: the same checks, errors and TTL timestamps, for measure_top() (_speedups_top.h). */

#ifndef FSTATE_SPEEDUPS_SKIP_H
#define FSTATE_SPEEDUPS_SKIP_H

#include "_speedups_sink.h"

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

/* ------------------------------------------------------------------------------------------ */
/* skip: decode() without its objects (the same checks, errors and TTL timestamps). odd (keys only,
 * else NULL) is set when the bytes read are not the only encoding of the value they decode to. */

static Py_ssize_t
varint_size(uint64_t v)
{
    Py_ssize_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static int
skip_string(const uint8_t *b, Py_ssize_t len, Py_ssize_t *ppos, int *odd)
{
    Py_ssize_t start = *ppos, n;
    switch (wire_string_length(b, len, ppos, &n)) {
    case WIRE_STRING_NULL:
        if (odd != NULL && *ppos - start != 1)
            *odd = 1;
        return 0;
    case WIRE_NO_LENGTH:
        return err_index("string length"), -1;
    case WIRE_TRUNCATED:
        return err_index("truncated string"), -1;
    default:
        break;
    }
    if (odd != NULL && *ppos - start != varint_size((uint64_t)n + 1))
        *odd = 1;
    Py_ssize_t pos = *ppos;
    if (is_ascii(b + pos, n)) {
        *ppos = pos + n;
        return 0;
    }
    int bad_unit = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t at = pos;
        uint32_t c;
        int rc = wire_unit(b, len, &pos, &c);
        if (rc < 0)
            return err_index("truncated string"), -1;
        bad_unit |= rc;
        if (odd != NULL && !rc && pos - at != varint_size(c))
            *odd = 1;
    }
    if (bad_unit) {
        PyErr_SetString(StructError ? StructError : PyExc_ValueError, "'H' format requires 0 <= number <= 65535");
        return -1;
    }
    *ppos = pos;
    return 0;
}

static int
skip_fixed(Py_ssize_t need, Py_ssize_t len, Py_ssize_t *ppos)
{
    if (*ppos + need > len)
        return err_struct(need, *ppos, len), -1;
    *ppos += need;
    return 0;
}

static int
skip(const TNode *t, const uint8_t *b, Py_ssize_t len, Py_ssize_t *ppos, int *odd)
{
    Py_ssize_t pos = *ppos;
    switch (t->code) {
    case T_STRING:
        return skip_string(b, len, ppos, odd);
    case T_LONG:
    case T_WINDOW:
        return skip_fixed(t->code == T_LONG ? 8 : 16, len, ppos);
    case T_INT:
        return skip_fixed(4, len, ppos);
    case T_SHORT:
    case T_CHAR:
        return skip_fixed(2, len, ppos);
    case T_BYTE:
        return skip_fixed(1, len, ppos);
    case T_BOOL:
        if (pos >= len)
            return err_index("boolean"), -1;
        if (odd != NULL && b[pos] > 1)
            *odd = 1;
        *ppos = pos + 1;
        return 0;
    case T_DOUBLE:
    case T_FLOAT: {
        Py_ssize_t width = t->code == T_DOUBLE ? 8 : 4;
        if (skip_fixed(width, len, ppos) < 0)
            return -1;
        if (odd != NULL) {  /* NaN is unequal to itself, -0.0 equal to 0.0 */
            double d;
            if (width == 8) {
                uint64_t u = be64(b + pos);
                memcpy(&d, &u, 8);
            } else {
                uint32_t u = be32(b + pos);
                float f;
                memcpy(&f, &u, 4);
                d = f;
            }
            if (d != d || d == 0.0)
                *odd = 1;
        }
        return 0;
    }
    case T_ZERO:
        if (odd != NULL)
            *odd = 1;
        *ppos = pos + 1;
        return 0;
    case T_TUPLE:
        for (Py_ssize_t i = 0; i < t->n; i++)
            if (skip(&t->kids[i], b, len, &pos, odd) < 0)
                return -1;
        *ppos = pos;
        return 0;
    case T_NULLABLE:
        if (pos < 0 || pos >= len)
            return err_index("null flag"), -1;
        if (b[pos]) {
            if (odd != NULL) {
                if (b[pos] != 1 || pos + 1 + t->padding > len)
                    *odd = 1;
                for (Py_ssize_t i = pos + 1; !*odd && i < pos + 1 + t->padding; i++)
                    *odd = b[i] != 0;
            }
            *ppos = pos + 1 + t->padding;
            return 0;
        }
        pos += 1;
        if (skip(&t->kids[0], b, len, &pos, odd) < 0)
            return -1;
        *ppos = pos;
        return 0;
    case T_TTL:
        if (odd != NULL)
            *odd = 1;
        if (ttl_stamps.on && pos >= 0 && pos + 8 <= len && record_stamp((long long)(int64_t)be64(b + pos)) < 0)
            return -1;
        pos += 8;
        if (skip(&t->kids[0], b, len, &pos, odd) < 0)
            return -1;
        *ppos = pos;
        return 0;
    case T_RAW:
        *ppos = len > pos ? len : pos;
        return 0;
    default:
        PyErr_Format(PyExc_SystemError, "fstate._speedups: unknown type code %d", t->code);
        return -1;
    }
}

#endif
