/* fstate.savepoint._speedups, part 4 (included by _speedups.c only): where Flink places a key: Java's
 * String.hashCode and the key group of a hash (Flink's murmur step, then the remainder). The twins of
 * types/hashing.hash_string and key_group_for_hash, which are the reference: the same numbers for
 * every str and every int (tests/savepoint/test_hashing.py); a hash that is not an int is a
 * TypeError in both, a key that is not a str a TypeError here. */

#ifndef FSTATE_SPEEDUPS_HASH_H
#define FSTATE_SPEEDUPS_HASH_H

#include "_wire.h"

/* h = 31 h + unit over the UTF-16 code units of s, wrapping at 32 bits. A code point above 0xFFFF is
 * its surrogate pair; a lone surrogate stored in the str is one unit (Python's "surrogatepass"). */
static int32_t
java_string_hash_of(PyObject *s)
{
    Py_ssize_t n = PyUnicode_GET_LENGTH(s);
    const void *data = PyUnicode_DATA(s);
    uint32_t h = 0;
    switch (PyUnicode_KIND(s)) {
    case PyUnicode_1BYTE_KIND: {
        const Py_UCS1 *p = data;
        for (Py_ssize_t i = 0; i < n; i++)
            h = 31u * h + p[i];
        break;
    }
    case PyUnicode_2BYTE_KIND: {
        const Py_UCS2 *p = data;
        for (Py_ssize_t i = 0; i < n; i++)
            h = 31u * h + p[i];
        break;
    }
    default: {
        const Py_UCS4 *p = data;
        for (Py_ssize_t i = 0; i < n; i++) {
            uint32_t c = p[i];
            if (c > 0xFFFF) {
                c -= 0x10000;
                h = 31u * h + (0xD800u + (c >> 10));
                h = 31u * h + (0xDC00u + (c & 0x3FFu));
            } else {
                h = 31u * h + c;
            }
        }
        break;
    }
    }
    return (int32_t)h;
}

static PyObject *
py_java_string_hash(PyObject *Py_UNUSED(mod), PyObject *s)
{
    if (!PyUnicode_Check(s)) {
        PyErr_Format(PyExc_TypeError, "java_string_hash() needs a str, not %.100s", Py_TYPE(s)->tp_name);
        return NULL;
    }
    if (PyUnicode_READY(s) < 0)
        return NULL;
    return PyLong_FromLong(java_string_hash_of(s));
}

static uint32_t
rotl32(uint32_t x, int r)
{
    return (x << r) | (x >> (32 - r));
}

/* Flink's MathUtils.murmurHash(int): one MurmurHash3 round of the 4-byte code, made non-negative
 * (Integer.MIN_VALUE becomes 0) */
static long
flink_murmur(uint32_t code)
{
    uint32_t k = code * 0xCC9E2D51u;
    k = rotl32(k, 15) * 0x1B873593u;
    uint32_t h = rotl32(k, 13) * 5u + 0xE6546B64u;
    h ^= 4u;
    h ^= h >> 16;
    h *= 0x85EBCA6Bu;
    h ^= h >> 13;
    h *= 0xC2B2AE35u;
    h ^= h >> 16;
    if (h < 0x80000000u)
        return (long)h;
    return h == 0x80000000u ? 0 : (long)(0x100000000ull - h);   /* -(int32_t)h */
}

/* key_group(java_hash, max_parallelism): murmur of the hash's low 32 bits (any int, as `& 0xFFFFFFFF`
 * takes them), modulo max_parallelism. A max parallelism that is not a positive int of C long range
 * goes through Python's own % (the same result or error as the reference). */
static PyObject *
py_key_group(PyObject *Py_UNUSED(mod), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "key_group() takes 2 arguments (%zd given)", nargs);
        return NULL;
    }
    if (!PyLong_Check(args[0]) && !PyIndex_Check(args[0])) {
        PyErr_Format(PyExc_TypeError, "key_group() needs an int hash, not %.100s", Py_TYPE(args[0])->tp_name);
        return NULL;
    }
    unsigned long low = PyLong_AsUnsignedLongMask(args[0]);
    if (low == (unsigned long)-1 && PyErr_Occurred())
        return NULL;
    long h = flink_murmur((uint32_t)(low & 0xFFFFFFFFul));
    PyObject *m = args[1];
    if (PyLong_CheckExact(m)) {
        int overflow;
        long mp = PyLong_AsLongAndOverflow(m, &overflow);
        if (mp == -1 && PyErr_Occurred())
            return NULL;
        if (!overflow && mp > 0)
            return PyLong_FromLong(h % mp);
    }
    PyObject *ph = PyLong_FromLong(h);
    if (ph == NULL)
        return NULL;
    PyObject *r = PyNumber_Remainder(ph, m);
    Py_DECREF(ph);
    return r;
}

#endif
