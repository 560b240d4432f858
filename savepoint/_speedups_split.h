/* fstate.savepoint._speedups, part 5 (included by _speedups.c only): one large canonical key group
 * cut into pieces that decode, one after the other, to the rows of the whole key group in the same
 * order (readers read a key group larger than their piece size piece by piece, holding one piece's
 * bytes and rows at a time).
 *
 * A canonical key group holds each state's entries in a section of its own (state id, entries, the
 * last one flagged). A row joins the entries of one identity (key and namespace) across the
 * selected states, and the decoder makes the rows in the order the first selected section gives
 * them. So the pieces cut that section (the creator) at entry boundaries, and give every other
 * selected section's entry to the piece of its creator row. That keeps the rows and their order
 * when the other sections are aligned with the creator: each holds one entry per identity (VALUE
 * and LIST states, never MAP: the caller checks), all of them creator identities, in about the
 * creator's order (skipping some is fine; entries a few places apart may swap, except across a
 * cut). Sections of states without a column are cut by bytes (their
 * entries make nothing). Anything else - sections not aligned, a framing problem, a state id twice
 * - gives None: the caller decodes the whole key group, which reports what is wrong. */

#ifndef FSTATE_SPEEDUPS_SPLIT_H
#define FSTATE_SPEEDUPS_SPLIT_H

#include "_wire.h"

#include "_speedups_drop.h"

typedef struct {
    long sid;
    Py_ssize_t start, end;     /* its entries: from the first one's key length to the last one's value end */
    int selected;
} SplitSection;

/* the entry at pos of a section whose framing was checked */
static inline Py_ssize_t
split_entry(const uint8_t *d, Py_ssize_t limit, Py_ssize_t pos, int prefix, WireEntry *e)
{
    wire_entry(d, limit, pos, prefix, e);
    return e->vstart + e->vlen;
}

/* Sections of the key group d[pos..end): their count, or -1 (framing not as the decoder wants it,
 * a state id twice) / -2 (a Python error). *out: PyMem array the caller frees. */
static Py_ssize_t
split_sections(const uint8_t *d, Py_ssize_t pos, Py_ssize_t end, int prefix, SplitSection **out, SplitDrop *dr)
{
    Py_ssize_t since = pos;
    Py_ssize_t n = 0, cap = 8;
    SplitSection *s = PyMem_Malloc(cap * sizeof(SplitSection));
    *out = s;
    if (s == NULL) {
        PyErr_NoMemory();
        return -2;
    }
    if (pos < 0 || pos + 2 > end)
        return -1;
    long sid = be16(d + pos);
    pos += 2;
    for (;;) {
        for (Py_ssize_t i = 0; i < n; i++)
            if (s[i].sid == sid)
                return -1;
        if (n == cap) {
            cap *= 2;
            SplitSection *t = PyMem_Realloc(s, cap * sizeof(SplitSection));
            if (t == NULL) {
                PyErr_NoMemory();
                return -2;
            }
            *out = s = t;
        }
        s[n].sid = sid;
        s[n].start = pos;
        s[n].selected = 0;
        WireEntry e = {0};
        do {
            if (wire_entry(d, end, pos, prefix, &e) != WIRE_ENTRY_OK)
                return -1;
            pos = e.vstart + e.vlen;
            split_passed(dr, &since, pos);
        } while (!e.flag);
        s[n++].end = pos;
        if (pos + 2 > end)
            return -1;
        sid = be16(d + pos);
        pos += 2;
        if (sid == END_OF_KEY_GROUP)
            return pos == end ? n : -1;
    }
}

/* Cuts a section's entries into parts pieces of about equal bytes at entry boundaries: cut[0..parts]
 * (cut[k]: the first entry of piece k; cut[parts]: the section's end), last[k]: the key start of piece
 * k's last entry (-1: piece k has none). */
static void
split_even(const uint8_t *d, Py_ssize_t limit, int prefix, const SplitSection *s, Py_ssize_t parts,
           Py_ssize_t *cut, Py_ssize_t *last, SplitDrop *dr)
{
    Py_ssize_t pos = s->start, k = 0, len = s->end - s->start, since = pos;
    cut[0] = pos;
    last[0] = -1;
    while (pos < s->end) {
        /* the entry at pos starts piece k + 1 once it is past that piece's share of the bytes */
        while (k + 1 < parts && pos - s->start >= (Py_ssize_t)((double)len * (double)(k + 1) / (double)parts)) {
            cut[++k] = pos;
            last[k] = -1;
        }
        WireEntry e = {0};
        pos = split_entry(d, limit, pos, prefix, &e);
        last[k] = e.kstart;
        split_passed(dr, &since, pos);
    }
    while (k + 1 <= parts) {
        cut[++k] = s->end;
        if (k < parts)
            last[k] = -1;
    }
}

/* creator entries passed over while looking for an entry of another section, kept to match later
 * ones: Flink's heap backend writes the states of a key group in nearly, not exactly, the same key
 * order (entries of one hash bucket swap). The older half is dropped when it is full (keys the
 * other state does not hold; if one comes after all, the key group is not cut). */
#define SPLIT_WINDOW 256
/* rounds over the other selected sections while they move the creator's cuts */
#define SPLIT_ROUNDS 4

typedef struct {
    Py_ssize_t kstart, piece;
} SplitPassed;

/* the newest passed creator entry of identity id (klen key bytes): its piece, taken out of the
 * window; -1 none */
static Py_ssize_t
split_passed_piece(const uint8_t *d, int prefix, SplitPassed *passed, Py_ssize_t *npassed, const uint8_t *id,
                   Py_ssize_t klen)
{
    for (Py_ssize_t j = *npassed - 1; j >= 0; j--) {
        Py_ssize_t at = passed[j].kstart;
        if ((Py_ssize_t)be32(d + at - 4) == klen && memcmp(d + at + prefix, id, (size_t)(klen - prefix)) == 0) {
            Py_ssize_t piece = passed[j].piece;
            memmove(passed + j, passed + j + 1, (size_t)(*npassed - j - 1) * sizeof(SplitPassed));
            (*npassed)--;
            return piece;
        }
    }
    return -1;
}

/* the piece of the creator entry at pos under the creator's cuts ccut (the last of empty pieces) */
static inline Py_ssize_t
split_piece_at(const Py_ssize_t *ccut, Py_ssize_t parts, Py_ssize_t pos)
{
    Py_ssize_t k = 0;
    while (k + 1 < parts && pos >= ccut[k + 1])
        k++;
    return k;
}

/* last[k]: the key start of the last creator entry of piece k under the cuts ccut (-1: none) */
static void
split_lasts(const uint8_t *d, Py_ssize_t limit, int prefix, const SplitSection *c, const Py_ssize_t *ccut,
            Py_ssize_t parts, Py_ssize_t *last)
{
    for (Py_ssize_t k = 0; k < parts; k++)
        last[k] = -1;
    Py_ssize_t k = 0, pos = c->start;
    while (pos < c->end) {
        while (k + 1 < parts && pos >= ccut[k + 1])
            k++;
        WireEntry e = {0};
        pos = split_entry(d, limit, pos, prefix, &e);
        last[k] = e.kstart;
    }
}

/* Each entry of section s (selected, not the creator c) to the piece of its creator row (the
 * creator's cuts ccut): cut / last as split_even makes them. The creator row is looked for at the
 * creator's next entry (aligned sections: always there), then among the passed ones, then further
 * on. An entry whose row is in an earlier piece than the entry before it (two keys swapped across a
 * cut) moves the creator's cuts after both: 1 when it did (the other sections are cut again), 0,
 * or -1 when an entry has no creator row. */
static int
split_aligned(const uint8_t *d, Py_ssize_t limit, int prefix, const SplitSection *c, Py_ssize_t *ccut,
              const SplitSection *s, Py_ssize_t parts, Py_ssize_t *cut, Py_ssize_t *last, SplitDrop *dr)
{
    int moved = 0;
    SplitPassed passed[SPLIT_WINDOW];
    Py_ssize_t npassed = 0;
    Py_ssize_t cp = c->start, ck = 0, k = 0, pos = s->start, since = pos, csince = cp;
    cut[0] = pos;
    last[0] = -1;
    while (pos < s->end) {
        WireEntry e = {0}, ce = {0};
        Py_ssize_t next = split_entry(d, limit, pos, prefix, &e);
        const uint8_t *id = d + e.kstart + prefix;
        Py_ssize_t n = e.klen - prefix, piece = -1;
        int looked = 0;        /* the passed ones were looked at */
        while (piece < 0) {
            if (cp >= c->end) {
                piece = looked ? -1 : split_passed_piece(d, prefix, passed, &npassed, id, e.klen);
                if (piece < 0)
                    return -1;
                break;
            }
            while (ck + 1 < parts && cp >= ccut[ck + 1])
                ck++;
            Py_ssize_t cnext = split_entry(d, limit, cp, prefix, &ce);
            if (ce.klen == e.klen && memcmp(d + ce.kstart + prefix, id, (size_t)n) == 0) {
                piece = ck;
                cp = cnext;
                break;
            }
            if (!looked) {
                looked = 1;
                if ((piece = split_passed_piece(d, prefix, passed, &npassed, id, e.klen)) >= 0)
                    break;
            }
            if (npassed == SPLIT_WINDOW) {   /* the older half goes */
                memmove(passed, passed + SPLIT_WINDOW / 2, (size_t)(SPLIT_WINDOW / 2) * sizeof(SplitPassed));
                npassed = SPLIT_WINDOW / 2;
            }
            passed[npassed].kstart = ce.kstart;
            passed[npassed++].piece = ck;
            cp = cnext;
        }
        if (piece < k) {       /* every entry so far is of a creator row before cp: the cuts after piece go there */
            for (Py_ssize_t j = piece + 1; j < parts; j++)
                if (ccut[j] < cp)
                    ccut[j] = cp;
            for (Py_ssize_t j = 0; j < npassed; j++)
                passed[j].piece = split_piece_at(ccut, parts, passed[j].kstart - 4);
            ck = split_piece_at(ccut, parts, cp);
            k = piece;
            moved = 1;
        }
        while (k < piece) {    /* the pieces up to the creator row's begin here */
            cut[++k] = pos;
            last[k] = -1;
        }
        last[k] = e.kstart;
        pos = next;
        split_passed(dr, &since, pos);
        split_passed(dr, &csince, cp);
    }
    while (k + 1 <= parts) {
        cut[++k] = s->end;
        if (k < parts)
            last[k] = -1;
    }
    return moved;
}

/* key_group_pieces(data, pos, end, prefix, selected, piece_bytes[, mapped]) -> [((state id, start, stop,
 * last key), ...), ...] or None: the pieces of the canonical key group data[pos:end] (see above), each a
 * tuple of runs in section order: the entries data[start:stop] of a state, the last of them with
 * its key at last key (where the piece's framing flags it). None: one piece is enough (the key group
 * is at most piece_bytes), or it cannot be cut. mapped: data is a read-only mapped file, whose pages
 * the passes drop behind them (SplitDrop). */
static PyObject *
py_key_group_pieces(PyObject *Py_UNUSED(mod), PyObject *args)
{
    PyObject *data, *selected;
    Py_ssize_t pos, end, piece_bytes;
    int prefix, mapped = 0;
    if (!PyArg_ParseTuple(args, "OnniO!n|p:key_group_pieces", &data, &pos, &end, &prefix, &PyTuple_Type, &selected,
                          &piece_bytes, &mapped))
        return NULL;
    if ((prefix != 1 && prefix != 2) || piece_bytes <= 0) {
        PyErr_SetString(PyExc_ValueError, "key_group_pieces: prefix 1 or 2, piece_bytes > 0");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const uint8_t *d = view.buf;
    SplitDrop dr = {d, mapped};
    PyObject *result = NULL;
    SplitSection *s = NULL;
    Py_ssize_t *cut = NULL, *last = NULL;
    Py_ssize_t parts = pos >= 0 && end > pos ? (end - pos + piece_bytes - 1) / piece_bytes : 0;
    Py_ssize_t n = end > view.len || parts < 2 ? -1 : split_sections(d, pos, end, prefix, &s, &dr);
    if (n == -2)
        goto done;
    Py_ssize_t creator = -1, n_aligned = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(selected); j++)
            if (PyLong_AsLong(PyTuple_GET_ITEM(selected, j)) == s[i].sid)
                s[i].selected = 1;
        if (s[i].selected && creator < 0)
            creator = i;
        else if (s[i].selected)
            n_aligned++;
    }
    if (PyErr_Occurred())
        goto done;
    if (creator < 0) {         /* nothing to cut (or no sections): the whole key group */
        result = Py_NewRef(Py_None);
        goto done;
    }
    cut = PyMem_Malloc((size_t)(n * (parts + 1)) * sizeof(Py_ssize_t));
    last = PyMem_Malloc((size_t)(n * (parts + 1)) * sizeof(Py_ssize_t));
    if (cut == NULL || last == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t stride = parts + 1;
    split_even(d, end, prefix, &s[creator], parts, cut + creator * stride, last + creator * stride, &dr);
    for (Py_ssize_t i = 0; i < n; i++)
        if (i != creator && !s[i].selected)
            split_even(d, end, prefix, &s[i], parts, cut + i * stride, last + i * stride, &dr);
    /* the other selected sections, again while one moves the creator's cuts (a few rounds at most) */
    for (int round = 0, moved = 1; moved; round++) {
        if (round == SPLIT_ROUNDS) {
            result = Py_NewRef(Py_None);
            goto done;
        }
        moved = 0;
        for (Py_ssize_t i = 0; i < n; i++) {
            if (i == creator || !s[i].selected)
                continue;
            int rc = split_aligned(d, end, prefix, &s[creator], cut + creator * stride, &s[i], parts, cut + i * stride,
                                   last + i * stride, &dr);
            if (rc < 0) {
                result = Py_NewRef(Py_None);
                goto done;
            }
            if (rc > 0) {
                moved = 1;
                split_lasts(d, end, prefix, &s[creator], cut + creator * stride, parts, last + creator * stride);
            }
        }
        /* one selected section besides the creator: its own moves need no other round */
        if (moved && n_aligned == 1)
            moved = 0;
    }
    result = PyList_New(0);
    for (Py_ssize_t k = 0; result != NULL && k < parts; k++) {
        PyObject *piece = PyList_New(0);
        for (Py_ssize_t i = 0; piece != NULL && i < n; i++) {
            Py_ssize_t a = cut[i * stride + k], b = cut[i * stride + k + 1];
            if (a == b)
                continue;
            PyObject *run = Py_BuildValue("(lnnn)", s[i].sid, a, b, last[i * stride + k]);
            if (run == NULL || PyList_Append(piece, run) < 0)
                Py_CLEAR(piece);
            Py_XDECREF(run);
        }
        PyObject *runs = piece == NULL ? NULL : PyList_AsTuple(piece);
        Py_XDECREF(piece);
        if (runs == NULL || (PyTuple_GET_SIZE(runs) > 0 && PyList_Append(result, runs) < 0))
            Py_CLEAR(result);
        Py_XDECREF(runs);
    }
done:
    if (n == -1 && result == NULL && !PyErr_Occurred())
        result = Py_NewRef(Py_None);
    PyMem_Free(s);
    PyMem_Free(cut);
    PyMem_Free(last);
    PyBuffer_Release(&view);
    return result;
}

#endif
