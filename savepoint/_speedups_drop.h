/* fstate.savepoint._speedups: a pass over a mapped file drops the pages it has read behind it
 * (included by _speedups_split.h and _speedups_top.h). */

#ifndef FSTATE_SPEEDUPS_DROP_H
#define FSTATE_SPEEDUPS_DROP_H

#include <Python.h>
#include <stdint.h>

#ifndef _WIN32
#include <sys/mman.h>
#include <unistd.h>
#endif

/* A mapped file (the caller says so): the whole pages a pass has read behind it are dropped from
 * the process every few MB (the page cache keeps them; read again, they come back), so that a pass
 * over a large key group holds a few MB of it, not all. Never on memory of the process's own (its
 * bytes would be lost). */
typedef struct {
    const uint8_t *base;
    int on;
} SplitDrop;

#define SPLIT_DROP_EVERY ((Py_ssize_t)4 << 20)

static inline void
split_drop(SplitDrop *dr, Py_ssize_t from, Py_ssize_t to)
{
#if !defined(_WIN32) && defined(MADV_DONTNEED)
    if (!dr->on)
        return;
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t a = ((uintptr_t)(dr->base + from) + page - 1) / page * page;
    uintptr_t b = (uintptr_t)(dr->base + to) / page * page;
    if (b > a)
        madvise((void *)a, b - a, MADV_DONTNEED);
#else
    (void)dr; (void)from; (void)to;
#endif
}

/* a pass at pos: what it read since the last drop is dropped when it is large enough */
static inline void
split_passed(SplitDrop *dr, Py_ssize_t *since, Py_ssize_t pos)
{
    if (dr->on && pos - *since >= SPLIT_DROP_EVERY) {
        split_drop(dr, *since, pos);
        *since = pos;
    }
}

#endif
