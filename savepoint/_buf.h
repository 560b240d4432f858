/* fstate.savepoint: the growable byte buffer of the compiled modules (_encoding.c writes pairs into it,
 * _columnar.c builds Arrow buffers in it, _sst.c frames and merges RocksDB pairs in it), and a copy
 * of a few bytes without a call into the C library. Header only (static inline).
 *
 * The raw allocator (PyMem_RawRealloc / PyMem_RawFree) serves every buffer: it needs no GIL, so a
 * module that releases the GIL while it fills a buffer uses the same one. Free with buf_free. */

#ifndef FSTATE_BUF_H
#define FSTATE_BUF_H

#include <Python.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    uint8_t *p;
    size_t len, cap;
} Buf;

/* n bytes from s to d: short runs (keys, small values) without a call into the C library */
static inline void
copy_bytes(uint8_t *d, const uint8_t *s, size_t n)
{
    if (n > 16) {
        memcpy(d, s, n);
    } else if (n >= 8) {
        uint64_t a, b;
        memcpy(&a, s, 8);
        memcpy(&b, s + n - 8, 8);
        memcpy(d, &a, 8);
        memcpy(d + n - 8, &b, 8);
    } else if (n >= 4) {
        uint32_t a, b;
        memcpy(&a, s, 4);
        memcpy(&b, s + n - 4, 4);
        memcpy(d, &a, 4);
        memcpy(d + n - 4, &b, 4);
    } else {
        for (size_t i = 0; i < n; i++)
            d[i] = s[i];
    }
}

/* room for `extra` more bytes: the capacity doubled (from 64) until they fit; -1 with MemoryError */
static int
buf_grow(Buf *b, size_t extra)
{
    if (extra > SIZE_MAX / 2 - b->len) {
        PyErr_NoMemory();
        return -1;
    }
    size_t need = b->len + extra, cap = b->cap ? b->cap : 64;
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

/* after it, b->p is never NULL (a memcpy to it is defined even for 0 bytes) */
static inline int
buf_reserve(Buf *b, size_t extra)
{
    return b->p != NULL && b->cap - b->len >= extra ? 0 : buf_grow(b, extra);
}

static inline int
buf_put(Buf *b, const void *src, size_t n)
{
    if (buf_reserve(b, n) < 0)
        return -1;
    copy_bytes(b->p + b->len, (const uint8_t *)src, n);
    b->len += n;
    return 0;
}

static inline void
buf_free(Buf *b)
{
    PyMem_RawFree(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
}

#endif
