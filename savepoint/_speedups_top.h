/* fstate.savepoint._speedups, part 4 (included by _speedups.c only): Scanner.measure_top(), the
 * measuring pass of `fstate sizes` without a Python object per entry. Each entry of a canonical key
 * group is walked (skip(), _speedups_skip.h: decode()'s checks and errors, nothing made), its
 * bytes, entry and elements (a list's elements counted from its delimited layout, a map entry is
 * one) added to its key, which is known by its serialized bytes; at the key group's end only the keys that can rank
 * in the state's top heaps (readers/sizes_measure.TopKeys: their thresholds handed in) become
 * Python objects. A key whose bytes are not its identity (a string with a padded varint, a boolean
 * byte other than 0 or 1, a NaN or -0.0, a null flag other than 1 or padded with other than zeros,
 * a TTL wrapper or an unread byte) makes the call give up (None): measure() does the key group.
 *
 * A state whose keys come once each in a key group (VALUE and LIST states of string keys without a
 * namespace) needs no table: its best `top` keys by each measure are kept as the entries come
 * (Best), so the pass holds O(top) per state whatever the key group's size. Over a mapped file (the
 * caller says so) the pages behind the pass are dropped every few MB (_speedups_drop.h). */

#ifndef FSTATE_SPEEDUPS_TOP_H
#define FSTATE_SPEEDUPS_TOP_H

#include "_speedups_scan.h"
#include "_speedups_drop.h"

/* ------------------------------------------------------------------------------------------ */
/* one state's keys of one key group, by their bytes, in the order they first appear */

typedef struct {
    Py_ssize_t off, len;       /* the key's bytes in the scanned buffer */
    uint64_t hash;
    long long bytes, entries, elements;
} KeyAcc;

typedef struct KeyTable {
    KeyAcc *items;
    Py_ssize_t n, cap;
    int32_t *slots;            /* open addressing: an index into items, -1 empty */
    size_t mask;
} KeyTable;

/* one state's best keys of one key group by one measure, kept as its entries come: a min-heap of at
 * most `top` keys, the weakest (smaller value, or the same value and a greater key text) at v[0] */
typedef struct {
    KeyAcc *v;
    Py_ssize_t size, cap;
} Best;

typedef struct TopPass {
    const uint8_t *base;       /* the scanned buffer */
    KeyTable *tables;          /* one a state id */
    /* per state id: whether its keys come once each in a key group (VALUE and LIST states of string
     * keys without a namespace: no table, only the best keys as they come, in best[2 * id + measure]) */
    const char *streamed;
    Best *best;
    Py_ssize_t top;
    SplitDrop drop;            /* a mapped buffer: the pages behind the pass dropped */
    Py_ssize_t since;
    int odd;                   /* a key's bytes are not its identity: give up */
    int failed;                /* a Python error while ordering keys */
} TopPass;

static uint64_t
key_hash(const uint8_t *p, Py_ssize_t n)
{
    uint64_t h = 0x9e3779b97f4a7c15ULL ^ (uint64_t)n, w;
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8) {
        memcpy(&w, p + i, 8);
        h = (h ^ w) * 0xff51afd7ed558ccdULL;
        h ^= h >> 32;
    }
    if (i < n) {
        w = 0;
        memcpy(&w, p + i, (size_t)(n - i));
        h = (h ^ w) * 0xc4ceb9fe1a85ec53ULL;
    }
    return h ^ (h >> 29);
}

static int
table_grow(KeyTable *t)
{
    size_t size = t->slots == NULL ? 1024 : 2 * (t->mask + 1);
    int32_t *slots = PyMem_Malloc(size * sizeof(int32_t));
    if (slots == NULL)
        return PyErr_NoMemory(), -1;
    for (size_t i = 0; i < size; i++)
        slots[i] = -1;
    for (Py_ssize_t k = 0; k < t->n; k++) {
        size_t i = (size_t)t->items[k].hash & (size - 1);
        while (slots[i] >= 0)
            i = (i + 1) & (size - 1);
        slots[i] = (int32_t)k;
    }
    PyMem_Free(t->slots);
    t->slots = slots;
    t->mask = size - 1;
    return 0;
}

static int
table_add(KeyTable *t, const uint8_t *base, Py_ssize_t off, Py_ssize_t len, long long bytes, long long elements)
{
    if (t->slots == NULL || (size_t)(t->n + 1) * 2 > t->mask + 1)
        if (table_grow(t) < 0)
            return -1;
    uint64_t h = key_hash(base + off, len);
    size_t i = (size_t)h & t->mask;
    for (;;) {
        int32_t k = t->slots[i];
        if (k < 0)
            break;
        KeyAcc *a = &t->items[k];
        if (a->hash == h && a->len == len && memcmp(base + a->off, base + off, (size_t)len) == 0) {
            a->bytes += bytes;
            a->entries += 1;
            a->elements += elements;
            return 0;
        }
        i = (i + 1) & t->mask;
    }
    if (t->n == t->cap) {
        if (t->cap >= INT32_MAX / 2) {
            PyErr_SetString(PyExc_OverflowError, "measure_top(): over 2**30 keys in one key group");
            return -1;
        }
        Py_ssize_t cap = t->cap ? 2 * t->cap : 512;
        KeyAcc *grown = PyMem_Realloc(t->items, (size_t)cap * sizeof(KeyAcc));
        if (grown == NULL)
            return PyErr_NoMemory(), -1;
        t->items = grown;
        t->cap = cap;
    }
    t->slots[i] = (int32_t)t->n;
    t->items[t->n++] = (KeyAcc){off, len, h, bytes, 1, elements};
    return 0;
}

static int key_text_order(const uint8_t *base, const KeyAcc *a, const KeyAcc *b);

/* a key's value by one measure: 0 its bytes, 1 its elements */
static inline long long
acc_value(const KeyAcc *a, int m)
{
    return m ? a->elements : a->bytes;
}

/* whether key a is weaker than key b by one measure (TopKeys' order: a smaller value, or the same
 * value and a greater key text): 1, 0, or -1 (an error, or a key the wire layout does not read as a
 * string: tp->failed or tp->odd set) */
static int
best_weaker(TopPass *tp, const KeyAcc *a, const KeyAcc *b, int m)
{
    long long x = acc_value(a, m), y = acc_value(b, m);
    if (x != y)
        return x < y;
    int c = key_text_order(tp->base, a, b);
    if (c == -2)
        return tp->failed = 1, -1;
    if (c == 2)
        return tp->odd = 1, -1;
    return c > 0;
}

/* a placed into the hole at i of b's heap, the hole moved toward the root (up) or the leaves until
 * the heap's order holds; -1 on an error (the hole filled with a) */
static int
best_sift(TopPass *tp, Best *b, Py_ssize_t i, const KeyAcc *a, int m, int up)
{
    KeyAcc *v = b->v;
    for (;;) {
        Py_ssize_t j;
        const KeyAcc *lower, *upper;  /* v[j] moves into the hole when lower is weaker than upper */
        if (up) {
            if (i == 0)
                break;
            j = (i - 1) / 2;
            lower = a;
            upper = &v[j];
        } else {
            j = 2 * i + 1;
            if (j >= b->size)
                break;
            if (j + 1 < b->size) {
                int r = best_weaker(tp, &v[j + 1], &v[j], m);
                if (r < 0)
                    return v[i] = *a, -1;
                j += r;
            }
            lower = &v[j];
            upper = a;
        }
        int w = best_weaker(tp, lower, upper, m);
        if (w < 0)
            return v[i] = *a, -1;
        if (!w)
            break;
        v[i] = v[j];
        i = j;
    }
    v[i] = *a;
    return 0;
}

/* a key (its only entry of the key group) offered to one measure's best keys; -1 on an error */
static int
best_offer(TopPass *tp, Best *b, const KeyAcc *a, int m)
{
    if (acc_value(a, m) <= 0 || tp->top <= 0)
        return 0;  /* a key of no bytes or elements never ranks (TopKeys.admits) */
    if (b->size < tp->top) {
        if (b->size == b->cap) {
            Py_ssize_t cap = b->cap ? 2 * b->cap : 16;
            if (cap > tp->top)
                cap = tp->top;
            KeyAcc *v = PyMem_Realloc(b->v, (size_t)cap * sizeof(KeyAcc));
            if (v == NULL)
                return PyErr_NoMemory(), -1;
            b->v = v;
            b->cap = cap;
        }
        return best_sift(tp, b, b->size++, a, m, 1);
    }
    int w = best_weaker(tp, &b->v[0], a, m);
    if (w <= 0)
        return w;  /* not better than the weakest kept */
    return best_sift(tp, b, 0, a, m, 0);  /* the root replaced */
}

/* empty again, its memory kept */
static void
table_reset(KeyTable *t)
{
    t->n = 0;
    if (t->slots != NULL)
        memset(t->slots, 0xFF, (t->mask + 1) * sizeof(int32_t));  /* every slot -1 */
}

static void
table_free(KeyTable *t)
{
    PyMem_Free(t->items);
    PyMem_Free(t->slots);
    memset(t, 0, sizeof(*t));
}

/* ------------------------------------------------------------------------------------------ */
/* one canonical entry (decode_entry's checks, in its order) */

static int
top_entry(Scanner *self, Plan *plan, Sink *sink, const uint8_t *kb, Py_ssize_t klen, const uint8_t *vb,
          Py_ssize_t vlen)
{
    TopPass *tp = sink->top;
    Py_ssize_t prefix = self->prefix, p = prefix, key_start, key_end;
    long long n = 0;
    int *odd = &tp->odd;
    if (plan->mode == M_TIMER) {
        if (p + 8 > klen)
            return err_struct(8, p, klen), -1;
        p += 8;
        key_start = p;
        if (skip(&plan->key, kb, klen, &p, odd) < 0)
            return -1;
        key_end = p;
        if (skip(&plan->ns, kb, klen, &p, NULL) < 0 || exact(p, klen, "timer") < 0)
            return -1;
        if (vlen) {
            PyErr_Format(PyExc_ValueError, "a timer entry has a %zd-byte value (timers store none)", vlen);
            return -1;
        }
    } else {
        key_start = p;
        if (skip(&plan->key, kb, klen, &p, odd) < 0)
            return -1;
        key_end = p;
        if (plan->ambiguous)
            p += var_len_size(p - prefix);
        Py_ssize_t ns_start = p;
        if (skip(&plan->ns, kb, klen, &p, NULL) < 0)
            return -1;
        if (plan->ambiguous)
            p += var_len_size(p - ns_start);
        if (plan->mode == M_MAP && skip(&plan->ukey, kb, klen, &p, NULL) < 0)
            return -1;
        if (exact(p, klen, plan->mode == M_MAP ? "map key" : "key") < 0)
            return -1;
        switch (plan->mode) {
        case M_VALUE:
            p = 0;
            if (skip(&plan->val, vb, vlen, &p, NULL) < 0 || exact(p, vlen, "value") < 0)
                return -1;
            break;
        case M_LIST_RAW:
            n = 1;
            break;
        case M_LIST:
            p = 0;
            while (p < vlen) {
                if (skip(&plan->val, vb, vlen, &p, NULL) < 0)
                    return -1;
                n++;
                if (p < vlen) {
                    if (vb[p] != LIST_DELIMITER) {
                        PyErr_Format(PyExc_ValueError,
                                     "list state element not followed by the ',' delimiter at byte %zd", p);
                        return -1;
                    }
                    p++;
                    if (p == vlen) {
                        PyErr_SetString(PyExc_ValueError, "the list ends with the ',' delimiter");
                        return -1;
                    }
                }
            }
            if (exact(p, vlen, "list") < 0)
                return -1;
            break;
        default: /* M_MAP */
            if (vlen < 1)
                return err_index("map value null flag"), -1;
            if (vb[0] > 1) {
                PyErr_Format(PyExc_ValueError, "map value null flag %d", (int)vb[0]);
                return -1;
            }
            if (vb[0]) {
                if (vlen > 2) {
                    PyErr_Format(PyExc_ValueError, "a null map value has %zd bytes after its null flag", vlen - 1);
                    return -1;
                }
            } else {
                Py_ssize_t q = 1;
                if (skip(&plan->val, vb, vlen, &q, NULL) < 0 || exact(q, vlen, "map value") < 0)
                    return -1;
            }
            break;
        }
    }
    Py_ssize_t s = plan - sink->plans;
    long long size = (long long)klen + (long long)vlen;
    long long elements = plan->column_kind == C_MAP ? 1 : plan->column_kind == C_LIST ? n : 0;
    long long *t = sink->totals + TOTALS * s;
    t[0] += 1;
    t[1] += size;
    t[2] += klen;
    t[3] += vlen;
    t[4] += elements;
    count_ttl(sink, plan, s, size);
    if (tp->drop.on)
        split_passed(&tp->drop, &tp->since, kb - tp->base);
    if (tp->streamed[s]) {
        if (tp->odd)
            return 0;  /* given up: measure() does the key group */
        KeyAcc a = {(kb + key_start) - tp->base, key_end - key_start, 0, size, 1, elements};
        if (best_offer(tp, &tp->best[2 * s], &a, 0) < 0 || best_offer(tp, &tp->best[2 * s + 1], &a, 1) < 0)
            return tp->odd && !tp->failed ? 0 : -1;
        return 0;
    }
    return table_add(&tp->tables[s], tp->base, (kb + key_start) - tp->base, key_end - key_start, size, elements);
}

/* ------------------------------------------------------------------------------------------ */
/* the keys that can rank */

/* a min-heap of the n largest values seen (what a key must reach to rank once it is full) */
typedef struct {
    long long *v;
    Py_ssize_t size, cap;
} Floor;

static void
floor_push(Floor *f, long long value)
{
    long long *v = f->v;
    if (f->cap <= 0)
        return;
    Py_ssize_t i;
    if (f->size < f->cap) {
        i = f->size++;
        while (i > 0 && v[(i - 1) / 2] > value) {
            v[i] = v[(i - 1) / 2];
            i = (i - 1) / 2;
        }
        v[i] = value;
        return;
    }
    if (value <= v[0])
        return;
    i = 0;
    for (;;) {  /* the root replaced: sift down */
        Py_ssize_t c = 2 * i + 1;
        if (c >= f->size)
            break;
        if (c + 1 < f->size && v[c + 1] < v[c])
            c++;
        if (v[c] >= value)
            break;
        v[i] = v[c];
        i = c;
    }
    v[i] = value;
}

/* what a heap's threshold is: a value and the text of its lowest key (TopKeys.threshold) */
typedef struct {
    long long value;
    PyObject *text;
} Threshold;

/* whether key a (a string key) sorts before the text t; -1 on an error, 2 when a is not a string */
static int
key_before(const Plan *plan, const uint8_t *base, const KeyAcc *a, PyObject *t)
{
    if (plan->key.code != T_STRING || !PyUnicode_Check(t))
        return 2;
    Py_ssize_t p = a->off, n;
    if (wire_string_length(base, a->off + a->len, &p, &n) != WIRE_STRING_OK)
        return 2;
    if (is_ascii(base + p, n) && PyUnicode_IS_ASCII(t)) {
        Py_ssize_t tn = PyUnicode_GET_LENGTH(t);
        int c = memcmp(base + p, PyUnicode_1BYTE_DATA(t), (size_t)(n < tn ? n : tn));
        return c < 0 || (c == 0 && n < tn);
    }
    p = a->off;
    PyObject *key = decode_string(base, a->off + a->len, &p);
    if (key == NULL)
        return -1;
    int rc = PyUnicode_Check(key) ? PyUnicode_Compare(key, t) : 2;
    Py_DECREF(key);
    if (rc == -1 && PyErr_Occurred())
        return -1;
    return rc == 2 ? 2 : rc < 0;
}

/* the order of two string keys' texts (Python's str order: code points): <0, 0, >0; -2 on an error,
 * 2 when one is not a string the wire layout reads */
static int
key_text_order(const uint8_t *base, const KeyAcc *a, const KeyAcc *b)
{
    Py_ssize_t pa = a->off, pb = b->off, na, nb;
    if (wire_string_length(base, a->off + a->len, &pa, &na) != WIRE_STRING_OK ||
        wire_string_length(base, b->off + b->len, &pb, &nb) != WIRE_STRING_OK)
        return 2;
    if (is_ascii(base + pa, na) && is_ascii(base + pb, nb)) {
        int c = memcmp(base + pa, base + pb, (size_t)(na < nb ? na : nb));
        return c != 0 ? (c < 0 ? -1 : 1) : (na < nb ? -1 : na > nb);
    }
    pa = a->off;
    pb = b->off;
    PyObject *x = decode_string(base, a->off + a->len, &pa);
    PyObject *y = x == NULL ? NULL : decode_string(base, b->off + b->len, &pb);
    int rc = -2;
    if (y != NULL) {
        if (!PyUnicode_Check(x) || !PyUnicode_Check(y))
            rc = 2;
        else {
            int c = PyUnicode_Compare(x, y);
            rc = (c == -1 && PyErr_Occurred()) ? -2 : c;
        }
    }
    Py_XDECREF(x);
    Py_XDECREF(y);
    return rc;
}

/* one measure's cut of a key group's keys: a key is among the key group's `top` largest (greater
 * value, or the same value and a smaller key text: TopKeys' order) when its value is above `value`,
 * or equal to it and `tied[k]` (all of them when `tied` is NULL) */
typedef struct {
    long long value;
    char *tied;
} Cut;

/* the cut of one measure (0 bytes, 1 elements) over the table; -1 on an error */
static int
cut_keys(const Plan *plan, const uint8_t *base, const KeyTable *t, int m, Py_ssize_t top, Cut *cut)
{
    cut->value = LLONG_MIN;
    cut->tied = NULL;
    if (top <= 0 || t->n <= top)
        return 0;  /* every key is among the key group's top */
    Floor f = {PyMem_Malloc((size_t)top * sizeof(long long)), 0, top};
    if (f.v == NULL)
        return PyErr_NoMemory(), -1;
    for (Py_ssize_t k = 0; k < t->n; k++)
        floor_push(&f, acc_value(&t->items[k], m));
    long long v = f.v[0];  /* the top-th largest value */
    PyMem_Free(f.v);
    Py_ssize_t above = 0, ties = 0;
    for (Py_ssize_t k = 0; k < t->n; k++) {
        long long x = acc_value(&t->items[k], m);
        above += x > v;
        ties += x == v;
    }
    cut->value = v;
    Py_ssize_t room = top - above;  /* >= 1 */
    if (ties <= room || plan->key.code != T_STRING)
        return 0;  /* every tie (a key that is not a string: Python orders the ties) */
    /* the `room` ties of the smallest key texts: the best `room` of them (equal values: by text) */
    TopPass ties_pass = {base};
    ties_pass.top = room;
    Best best = {NULL, 0, 0};
    char *tied = PyMem_Calloc((size_t)t->n, 1);
    if (tied == NULL)
        return PyErr_NoMemory(), -1;
    int rc = 0;
    for (Py_ssize_t k = 0; k < t->n && rc == 0; k++)
        if (acc_value(&t->items[k], m) == v)
            rc = best_offer(&ties_pass, &best, &t->items[k], m);
    if (rc == 0) {
        for (Py_ssize_t i = 0; i < best.size; i++) {  /* the table's keys come in the order of their offsets */
            Py_ssize_t lo = 0, hi = t->n - 1, off = best.v[i].off;
            while (lo < hi) {
                Py_ssize_t mid = lo + (hi - lo) / 2;
                if (t->items[mid].off < off)
                    lo = mid + 1;
                else
                    hi = mid;
            }
            tied[lo] = 1;
        }
        cut->tied = tied;
    } else {
        PyMem_Free(tied);
    }
    PyMem_Free(best.v);
    if (rc < 0 && (!ties_pass.odd || ties_pass.failed || PyErr_Occurred()))
        return -1;
    return 0;  /* a key the wire layout does not read as a string: every tie */
}

/* whether a key of this value beats a heap's threshold (a superset of TopKeys.admits: Python
 * decides): 1 yes, 0 no, -1 an error */
static int
beats(const Plan *plan, const uint8_t *base, const KeyAcc *a, long long value, const Threshold *th)
{
    if (value <= 0 || value < th->value)
        return 0;
    if (value > th->value)
        return 1;
    int rc = key_before(plan, base, a, th->text);
    return rc < 0 ? -1 : rc != 0;
}

/* whether the key k may rank by one measure: among the key group's top and past the heap's threshold */
static int
may_rank(const Plan *plan, const uint8_t *base, const KeyTable *t, Py_ssize_t k, long long value,
         const Cut *cut, const Threshold *th)
{
    if (value < cut->value || (value == cut->value && cut->tied != NULL && !cut->tied[k]))
        return 0;
    return beats(plan, base, &t->items[k], value, th);
}

/* [bytes, entries, elements, key] of a key appended to out; -1 on an error */
static int
append_key(PyObject *out, const Plan *plan, const uint8_t *base, const KeyAcc *a)
{
    Py_ssize_t p = a->off;
    PyObject *key = decode(&plan->key, base, a->off + a->len, &p);
    PyObject *item = key == NULL ? NULL : Py_BuildValue("[LLLN]", a->bytes, a->entries, a->elements, key);
    int rc = item == NULL ? -1 : PyList_Append(out, item);
    Py_XDECREF(item);
    return rc;
}

/* [[bytes, entries, elements, key], ...]: the keys of one state that may rank, in the order they
 * came: those among the key group's `top` by a measure (its ties cut by key text when the keys are
 * strings) that beat that measure's threshold */
static PyObject *
ranking_keys(const Plan *plan, const uint8_t *base, const KeyTable *t, const Threshold th[2], Py_ssize_t top)
{
    PyObject *out = PyList_New(0);
    Cut cuts[2] = {{LLONG_MIN, NULL}, {LLONG_MIN, NULL}};
    if (out == NULL)
        return NULL;
    for (int m = 0; m < 2; m++)
        if (cut_keys(plan, base, t, m, top, &cuts[m]) < 0)
            goto fail;
    for (Py_ssize_t k = 0; k < t->n; k++) {
        const KeyAcc *a = &t->items[k];
        int rc = may_rank(plan, base, t, k, a->bytes, &cuts[0], &th[0]);
        if (rc == 0)
            rc = may_rank(plan, base, t, k, a->elements, &cuts[1], &th[1]);
        if (rc < 0)
            goto fail;
        if (!rc)
            continue;
        if (append_key(out, plan, base, a) < 0)
            goto fail;
    }
    PyMem_Free(cuts[0].tied);
    PyMem_Free(cuts[1].tied);
    return out;

fail:
    PyMem_Free(cuts[0].tied);
    PyMem_Free(cuts[1].tied);
    Py_DECREF(out);
    return NULL;
}

static int
by_offset(const void *a, const void *b)
{
    Py_ssize_t x = ((const KeyAcc *)a)->off, y = ((const KeyAcc *)b)->off;
    return (x > y) - (x < y);
}

/* ranking_keys() of a streamed state: its best keys by each measure that beat that measure's
 * threshold, in the order they came */
static PyObject *
streamed_keys(const Plan *plan, const uint8_t *base, const Best best[2], const Threshold th[2])
{
    Py_ssize_t n = 0;
    KeyAcc *found = PyMem_Malloc((size_t)(best[0].size + best[1].size + 1) * sizeof(KeyAcc));
    PyObject *out = found == NULL ? PyErr_NoMemory() : PyList_New(0);
    if (out == NULL)
        goto fail;
    for (int m = 0; m < 2; m++)
        for (Py_ssize_t i = 0; i < best[m].size; i++) {
            const KeyAcc *a = &best[m].v[i];
            int rc = beats(plan, base, a, acc_value(a, m), &th[m]);
            if (rc < 0)
                goto fail;
            if (rc)
                found[n++] = *a;
        }
    qsort(found, (size_t)n, sizeof(KeyAcc), by_offset);
    for (Py_ssize_t i = 0; i < n; i++) {
        const KeyAcc *a = &found[i];
        if (i > 0 && a->off == found[i - 1].off)
            continue;  /* ranks by both measures */
        if (append_key(out, plan, base, a) < 0)
            goto fail;
    }
    PyMem_Free(found);
    return out;

fail:
    PyMem_Free(found);
    Py_XDECREF(out);
    return NULL;
}

/* ------------------------------------------------------------------------------------------ */
/* the method */

/* measure_top(): per state, its totals row, its number of keys and the keys that may rank; None when
 * a plan or a key is not for it (Python decodes those states' keys: measure()) */
static PyObject *
top_rows(Scanner *self, const uint8_t *base, TopPass *tp, const long long *totals, const long long *ttl,
         const Threshold *th, Py_ssize_t top)
{
    PyObject *out = PyList_New(self->nstates);
    for (Py_ssize_t i = 0; out != NULL && i < self->nstates; i++) {
        long long *t = (long long *)totals + TOTALS * i, *x = (long long *)ttl + TTL_FIELDS * i;
        PyObject *ranked = tp->streamed[i] ? streamed_keys(&self->plans[i], base, tp->best + 2 * i, th + 2 * i)
                           : ranking_keys(&self->plans[i], base, &tp->tables[i], th + 2 * i, top);
        /* a streamed state's keys: one an entry */
        Py_ssize_t keys = tp->streamed[i] ? (Py_ssize_t)t[0] : tp->tables[i].n;
        PyObject *row = ranked == NULL ? NULL
                        : Py_BuildValue("[LLLLLLLLLLLnN]", t[0], t[1], t[2], t[3], t[4], x[0], x[1], x[2], x[3], x[4],
                                        x[5], keys, ranked);
        if (row == NULL)
            Py_CLEAR(out);
        else
            PyList_SET_ITEM(out, i, row);
    }
    return out;
}

static PyObject *
Scanner_measure_top(Scanner *self, PyObject *args)
{
    PyObject *data, *thresholds, *deadline = Py_None;
    Py_ssize_t pos, end, top;
    long kg;
    int mapped = 0;
    if (!PyArg_ParseTuple(args, "OnnlO!n|Op:measure_top", &data, &pos, &end, &kg, &PyList_Type, &thresholds, &top,
                          &deadline, &mapped))
        return NULL;
    long long limit;
    if (scanner_ready(self, "measure_top", thresholds, "thresholds", deadline, &limit) < 0)
        return NULL;
    for (Py_ssize_t i = 0; i < self->nstates; i++) {
        Plan *plan = &self->plans[i];
        if (plan->mode == M_PY || plan->mode == M_SKIP ||
            (plan->column_kind == C_LIST && plan->mode != M_LIST && plan->mode != M_LIST_RAW))
            Py_RETURN_NONE;
    }
    size_t states = (size_t)(self->nstates ? self->nstates : 1);
    Threshold *th = PyMem_Calloc(states * 2, sizeof(Threshold));
    long long *totals = PyMem_Calloc(states * TOTALS, sizeof(long long));
    long long *ttl = PyMem_Calloc(states * TTL_FIELDS, sizeof(long long));
    /* the scanner's tables, emptied (fresh ones when they are in use: a call from inside a call) */
    int own_tables = self->tables_busy;
    if (!own_tables && self->tables == NULL)
        self->tables = PyMem_Calloc(states, sizeof(KeyTable));
    TopPass tp = {NULL, own_tables ? PyMem_Calloc(states, sizeof(KeyTable)) : self->tables};
    char *streamed = PyMem_Calloc(states, 1);
    tp.streamed = streamed;
    tp.best = PyMem_Calloc(states * 2, sizeof(Best));
    tp.top = top;
    for (Py_ssize_t i = 0; streamed != NULL && i < self->nstates; i++) {
        const Plan *plan = &self->plans[i];
        streamed[i] = (plan->mode == M_VALUE || plan->mode == M_LIST || plan->mode == M_LIST_RAW) &&
                      plan->ns.code == T_ZERO && plan->key.code == T_STRING;
    }
    if (!own_tables && tp.tables != NULL) {
        self->tables_busy = 1;
        for (Py_ssize_t i = 0; i < self->nstates; i++)
            table_reset(&tp.tables[i]);
    }
    PyObject *out = NULL;
    Py_buffer view;
    int have_view = 0;
    if (th == NULL || totals == NULL || ttl == NULL || tp.tables == NULL || streamed == NULL || tp.best == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < self->nstates; i++) {
        PyObject *t = PyList_GET_ITEM(thresholds, i);
        if (!PyTuple_Check(t) || !PyArg_ParseTuple(t, "LULU", &th[2 * i].value, &th[2 * i].text,
                                                    &th[2 * i + 1].value, &th[2 * i + 1].text)) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_TypeError, "measure_top(): a threshold is (bytes, text, elements, text)");
            goto done;
        }
    }
    if (get_data(data, &view, end) < 0)
        goto done;
    have_view = 1;
    tp.base = view.buf;
    tp.drop = (SplitDrop){view.buf, mapped};
    tp.since = pos;
    Sink sink = {NULL, NULL, 0, NULL, 0, 0, 0, NULL, totals, self->plans, 0, 0, ttl, deadline != Py_None, limit,
                 NULL, &tp};
    ttl_stamps.on = 1;
    ttl_stamps.n = 0;
    int rc = scan(self, view.buf, end, pos, kg, &sink);
    ttl_stamps.on = 0;
    ttl_stamps.n = 0;
    if (rc == 0 && tp.odd)
        out = Py_NewRef(Py_None);
    else if (rc == 0)
        out = top_rows(self, view.buf, &tp, totals, ttl, th, top);
done:
    if (have_view)
        PyBuffer_Release(&view);
    if (own_tables) {
        for (Py_ssize_t i = 0; tp.tables != NULL && i < self->nstates; i++)
            table_free(&tp.tables[i]);
        PyMem_Free(tp.tables);
    } else if (tp.tables != NULL) {
        self->tables_busy = 0;
    }
    for (Py_ssize_t i = 0; tp.best != NULL && i < 2 * (Py_ssize_t)states; i++)
        PyMem_Free(tp.best[i].v);
    PyMem_Free(tp.best);
    PyMem_Free(streamed);
    PyMem_Free(th);
    PyMem_Free(totals);
    PyMem_Free(ttl);
    return out;
}

#endif
