/* fstate.savepoint._speedups, part 3 (included by _speedups.c only): one entry (its composite key,
 * value and checks) and the framing of one canonical key group. */

#ifndef FSTATE_SPEEDUPS_SCAN_H
#define FSTATE_SPEEDUPS_SCAN_H

#include "_speedups_skip.h"

/* ------------------------------------------------------------------------------------------ */
/* one entry */

/* key: the composite key (prefix, key, [len], namespace, [len], [user key]); identity, key, ns
 * and the position after the namespace */
static int
split_key(Plan *plan, int prefix, const uint8_t *kb, Py_ssize_t klen, PyObject **ident, PyObject **key,
          PyObject **ns, Py_ssize_t *after)
{
    Py_ssize_t p = prefix;
    *key = decode(&plan->key, kb, klen, &p);
    if (*key == NULL)
        return -1;
    Py_ssize_t key_end = p;
    if (plan->ambiguous)
        p += var_len_size(p - prefix);
    Py_ssize_t ns_start = p;
    *ns = decode(&plan->ns, kb, klen, &p);
    if (*ns == NULL) {
        Py_CLEAR(*key);
        return -1;
    }
    if (plan->ambiguous) {
        PyObject *a = slice(kb, klen, prefix, key_end);
        PyObject *b = a ? slice(kb, klen, ns_start, p) : NULL;
        if (b != NULL) {
            PyBytes_Concat(&a, b);   /* releases a on failure */
            Py_DECREF(b);
        } else {
            Py_XDECREF(a);
            a = NULL;
        }
        *ident = a;
        p += var_len_size(p - ns_start);
    } else {
        *ident = slice(kb, klen, prefix, p);
    }
    if (*ident == NULL) {
        Py_CLEAR(*key);
        Py_CLEAR(*ns);
        return -1;
    }
    *after = p;
    return 0;
}

static int
decode_entry(Scanner *self, Plan *plan, Sink *sink, const uint8_t *kb, Py_ssize_t klen, int flag,
             const uint8_t *vb, Py_ssize_t vlen)
{
    PyObject *ident = NULL, *key = NULL, *ns = NULL, *value = NULL;
    Py_ssize_t p;
    int prefix = self->prefix;

    switch (plan->mode) {
    case M_TIMER: {
        p = prefix;
        if (p + 8 > klen)
            return err_struct(8, p, klen), -1;
        int64_t ts = (int64_t)(be64(kb + p) ^ 0x8000000000000000ULL);
        p += 8;
        key = decode(&plan->key, kb, klen, &p);
        if (key == NULL)
            return -1;
        ns = decode(&plan->ns, kb, klen, &p);
        if (ns == NULL)
            goto fail;
        if (exact(p, klen, "timer") < 0)
            goto fail;
        if (vlen) {
            PyErr_Format(PyExc_ValueError, "a timer entry has a %zd-byte value (timers store none)", vlen);
            goto fail;
        }
        ident = slice(kb, klen, prefix, p);
        if (ident == NULL)
            goto fail;
        value = PyLong_FromLongLong((long long)ts);
        if (value == NULL)
            goto fail;
        return emit(sink, plan, ident, key, ns, value);
    }
    case M_VALUE:
        if (split_key(plan, prefix, kb, klen, &ident, &key, &ns, &p) < 0)
            return -1;
        if (exact(p, klen, "key") < 0)
            goto fail;
        p = 0;
        value = decode(&plan->val, vb, vlen, &p);
        if (value == NULL || exact(p, vlen, "value") < 0)
            goto fail;
        return emit(sink, plan, ident, key, ns, value);
    case M_LIST:
    case M_LIST_RAW:
        if (split_key(plan, prefix, kb, klen, &ident, &key, &ns, &p) < 0)
            return -1;
        if (exact(p, klen, "key") < 0)
            goto fail;
        value = PyList_New(0);
        if (value == NULL)
            goto fail;
        if (plan->mode == M_LIST_RAW) {
            PyObject *raw = PyBytes_FromStringAndSize((const char *)vb, vlen);
            if (raw == NULL || PyList_Append(value, raw) < 0) {
                Py_XDECREF(raw);
                goto fail;
            }
            Py_DECREF(raw);
        } else {
            p = 0;
            while (p < vlen) {
                PyObject *v = decode(&plan->val, vb, vlen, &p);
                if (v == NULL)
                    goto fail;
                int rc = PyList_Append(value, v);
                Py_DECREF(v);
                if (rc < 0)
                    goto fail;
                if (p < vlen) {
                    if (vb[p] != LIST_DELIMITER) {
                        PyErr_Format(PyExc_ValueError,
                                     "list state element not followed by the ',' delimiter at byte %zd", p);
                        goto fail;
                    }
                    p++;
                    if (p == vlen) {
                        PyErr_SetString(PyExc_ValueError, "the list ends with the ',' delimiter");
                        goto fail;
                    }
                }
            }
            if (exact(p, vlen, "list") < 0)
                goto fail;
        }
        return emit(sink, plan, ident, key, ns, value);
    case M_MAP: {
        if (split_key(plan, prefix, kb, klen, &ident, &key, &ns, &p) < 0)
            return -1;
        PyObject *uk = decode(&plan->ukey, kb, klen, &p);
        if (uk == NULL)
            goto fail;
        if (exact(p, klen, "map key") < 0) {
            Py_DECREF(uk);
            goto fail;
        }
        if (vlen < 1) {
            Py_DECREF(uk);
            err_index("map value null flag");
            goto fail;
        }
        PyObject *uv;
        if (vb[0] > 1) {
            Py_DECREF(uk);
            PyErr_Format(PyExc_ValueError, "map value null flag %d", (int)vb[0]);
            goto fail;
        }
        if (vb[0]) {
            if (vlen > 2) {  /* heap savepoints write a byte after the null flag */
                Py_DECREF(uk);
                PyErr_Format(PyExc_ValueError, "a null map value has %zd bytes after its null flag", vlen - 1);
                goto fail;
            }
            uv = Py_None;
            Py_INCREF(uv);
        } else {
            Py_ssize_t q = 1;
            uv = decode(&plan->val, vb, vlen, &q);
            if (uv == NULL || exact(q, vlen, "map value") < 0) {
                Py_XDECREF(uv);
                Py_DECREF(uk);
                goto fail;
            }
        }
        value = PyTuple_New(2);
        if (value == NULL) {
            Py_DECREF(uk);
            Py_DECREF(uv);
            goto fail;
        }
        PyTuple_SET_ITEM(value, 0, uk);
        PyTuple_SET_ITEM(value, 1, uv);
        return emit(sink, plan, ident, key, ns, value);
    }
    case M_PY: {
        PyObject *kbytes = PyBytes_FromStringAndSize((const char *)kb, klen);
        if (kbytes == NULL)
            return -1;
        if (flag)
            ((unsigned char *)PyBytes_AS_STRING(kbytes))[0] &= 0x7F;
        PyObject *vbytes = PyBytes_FromStringAndSize((const char *)vb, vlen);
        if (vbytes == NULL) {
            Py_DECREF(kbytes);
            return -1;
        }
        PyObject *res = PyObject_CallFunctionObjArgs(plan->func, kbytes, vbytes, NULL);
        Py_DECREF(kbytes);
        Py_DECREF(vbytes);
        if (res == NULL)
            return -1;
        PyObject *seq = PySequence_Fast(res, "cannot unpack the decoded entry");
        Py_DECREF(res);
        if (seq == NULL)
            return -1;
        if (PySequence_Fast_GET_SIZE(seq) != 4) {
            PyErr_Format(PyExc_ValueError, "expected 4 values to unpack, got %zd", PySequence_Fast_GET_SIZE(seq));
            Py_DECREF(seq);
            return -1;
        }
        PyObject **items = PySequence_Fast_ITEMS(seq);
        for (int i = 0; i < 4; i++)
            Py_INCREF(items[i]);
        int rc = emit(sink, plan, items[0], items[1], items[2], items[3]);
        Py_DECREF(seq);
        return rc;
    }
    default:
        return 0;
    }

fail:
    return drop_entry(ident, key, ns, value);
}

/* ------------------------------------------------------------------------------------------ */
/* one key group: the framing of keyed._canonical_key_group, strict: every entry lies inside the
 * key group's region [pos, limit) and the end-of-key-group mark is its last two bytes */

static int
truncated(Scanner *self, long kg, Py_ssize_t limit)
{
    return corrupt(self, "key group %ld: its data ends at byte %zd, inside an entry", kg, limit);
}

/* measure_top's entry (_speedups_top.h) */
static int top_entry(Scanner *self, Plan *plan, Sink *sink, const uint8_t *kb, Py_ssize_t klen, const uint8_t *vb,
                     Py_ssize_t vlen);

static int
scan(Scanner *self, const uint8_t *d, Py_ssize_t limit, Py_ssize_t pos, long kg, Sink *sink)
{
    if (pos < 0 || pos + 2 > limit)
        return truncated(self, kg, limit);
    Py_ssize_t sid = be16(d + pos);
    pos += 2;
    for (;;) {
        if (sid >= self->nstates)
            return corrupt(self, "key group %ld: state id %zd but the backend has %zd states", kg, sid,
                           self->nstates);
        WireEntry en;
        switch (wire_entry(d, limit, pos, self->prefix, &en)) {
        case WIRE_NO_KEY_LENGTH:
        case WIRE_NO_VALUE_LENGTH:
            return truncated(self, kg, limit);
        case WIRE_BAD_KEY_LENGTH:
            return corrupt(self, "key group %ld: invalid key length %zd at byte %zd", kg, en.klen, pos);
        case WIRE_BAD_VALUE_LENGTH:
            return corrupt(self, "key group %ld: invalid value length %zd at byte %zd", kg, en.vlen,
                           en.kstart + en.klen);
        case WIRE_SHORT_PREFIX:
            return err_index("key-group prefix"), -1;
        default:
            break;
        }
        pos = en.vstart + en.vlen;
        if (en.stored != kg)
            return corrupt(self, "key group %ld: an entry is prefixed with key group %ld", kg, en.stored);
        Plan *plan = &self->plans[sid];
        if (plan->mode != M_SKIP) {
            sink->klen = en.klen;
            sink->vlen = en.vlen;
            if ((sink->top != NULL ? top_entry(self, plan, sink, d + en.kstart, en.klen, d + en.vstart, en.vlen)
                 : decode_entry(self, plan, sink, d + en.kstart, en.klen, en.flag, d + en.vstart, en.vlen)) < 0)
                return -1;
        }
        if (en.flag) {
            if (pos + 2 > limit)
                return truncated(self, kg, limit);
            Py_ssize_t nxt = be16(d + pos);
            pos += 2;
            if (nxt == END_OF_KEY_GROUP) {
                if (pos != limit)
                    return corrupt(self, "key group %ld: the end-of-key-group mark is at byte %zd, but the key "
                                   "group's data ends at byte %zd", kg, pos - 2, limit);
                return 0;
            }
            sid = nxt;
        }
    }
}

/* ------------------------------------------------------------------------------------------ */
/* measure() of one key group of the heap-native layout (keyed.native_key_group is the reference):
 * the key group, then each state's block (state id, entry count, per entry the namespace, key and
 * whole value), measured as the canonical layout stores it (keyed_state._native_sized): one entry
 * per map entry, none for an empty list or map or a null value; key bytes: the key-group prefix,
 * key, namespace (their lengths when both vary) and a map entry's user key; value bytes: a list's
 * elements with their delimiters, a map value with its null flag. Only states whose types this
 * module decodes (Python checks: _fastpath.measures_native); uncompressed streams. */

/* an i32 count of n items (at least one byte each, slack of them none) at p: read_count's checks */
static int
native_count(const uint8_t *d, Py_ssize_t limit, Py_ssize_t *pp, Py_ssize_t slack, const char *what, Py_ssize_t *n)
{
    Py_ssize_t p = *pp;
    if (p < 0 || p + 4 > limit)
        return err_struct(4, p, limit), -1;
    int32_t count = (int32_t)be32(d + p);
    p += 4;
    if (count < 0 || (Py_ssize_t)count > limit - p + slack) {
        PyErr_Format(PyExc_ValueError, "invalid %s %d", what, (int)count);
        return -1;
    }
    *pp = p;
    *n = count;
    return 0;
}

static int
native_entry(Scanner *self, Plan *plan, Sink *sink, const uint8_t *d, Py_ssize_t limit, Py_ssize_t *pp)
{
    Py_ssize_t p = *pp, start = p;
    PyObject *key = NULL, *ns = NULL, *value = NULL;
    if (plan->mode == M_TIMER) {
        if (p + 8 > limit)
            return err_struct(8, p, limit), -1;
        p += 8;
        key = decode(&plan->key, d, limit, &p);
        if (key == NULL)
            return -1;
        ns = decode(&plan->ns, d, limit, &p);
        if (ns == NULL)
            return drop_entry(NULL, key, NULL, NULL);
        *pp = p;
        sink->klen = self->prefix + (p - start);
        sink->vlen = 0;
        return measure_entry(sink, plan, Py_NewRef(Py_None), key, ns, Py_NewRef(Py_None));
    }
    ns = decode(&plan->ns, d, limit, &p);
    if (ns == NULL)
        return -1;
    Py_ssize_t ns_bytes = p - start, key_start = p;
    key = decode(&plan->key, d, limit, &p);
    if (key == NULL)
        return drop_entry(NULL, NULL, ns, NULL);
    Py_ssize_t key_bytes = p - key_start;
    Py_ssize_t base = self->prefix + key_bytes + ns_bytes +
                      (plan->ambiguous ? var_len_size(key_bytes) + var_len_size(ns_bytes) : 0);
    Py_ssize_t n, value_start = p;
    switch (plan->mode) {
    case M_VALUE:
        value = decode(&plan->val, d, limit, &p);
        if (value == NULL)
            goto fail;
        *pp = p;
        if (value == Py_None) {  /* nothing stored for a null value */
            ttl_stamps.n = 0;
            drop_entry(NULL, key, ns, value);
            return 0;
        }
        sink->klen = base;
        sink->vlen = p - value_start;
        return measure_entry(sink, plan, Py_NewRef(Py_None), key, ns, value);
    case M_LIST:
        if (native_count(d, limit, &p, 1, "list size", &n) < 0)
            goto fail;
        value = PyList_New(0);
        if (value == NULL)
            goto fail;
        value_start = p;
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *v = decode(&plan->val, d, limit, &p);
            if (v == NULL)
                goto fail;
            int rc = PyList_Append(value, v);
            Py_DECREF(v);
            if (rc < 0)
                goto fail;
        }
        *pp = p;
        if (n == 0) {
            drop_entry(NULL, key, ns, value);
            return 0;
        }
        sink->klen = base;
        sink->vlen = (p - value_start) + (n - 1);  /* the canonical layout's delimiters */
        return measure_entry(sink, plan, Py_NewRef(Py_None), key, ns, value);
    case M_MAP:
        if (native_count(d, limit, &p, 0, "map size", &n) < 0)
            goto fail;
        for (Py_ssize_t i = 0; i < n; i++) {
            Py_ssize_t uk_start = p;
            PyObject *uk = decode(&plan->ukey, d, limit, &p);
            if (uk == NULL)
                goto fail;
            Py_ssize_t uk_bytes = p - uk_start;
            if (p >= limit) {
                Py_DECREF(uk);
                err_index("map value null flag");
                goto fail;
            }
            PyObject *uv;
            Py_ssize_t uv_bytes = 1;
            if (d[p]) {
                p += 1;
                uv = Py_NewRef(Py_None);
            } else {
                Py_ssize_t uv_start = ++p;
                uv = decode(&plan->val, d, limit, &p);
                if (uv == NULL) {
                    Py_DECREF(uk);
                    goto fail;
                }
                uv_bytes += p - uv_start;
            }
            PyObject *item = PyTuple_Pack(2, uk, uv);
            Py_DECREF(uk);
            Py_DECREF(uv);
            if (item == NULL)
                goto fail;
            sink->klen = base + uk_bytes;
            sink->vlen = uv_bytes;
            if (measure_entry(sink, plan, Py_NewRef(Py_None), Py_NewRef(key), Py_NewRef(ns), item) < 0)
                goto fail;
        }
        *pp = p;
        drop_entry(NULL, key, ns, NULL);
        return 0;
    default:
        PyErr_Format(PyExc_SystemError, "fstate._speedups: plan mode %d has no heap-native measure", plan->mode);
        goto fail;
    }

fail:
    return drop_entry(NULL, key, ns, value);
}

static int
scan_native(Scanner *self, const uint8_t *d, Py_ssize_t limit, Py_ssize_t pos, long kg, Sink *sink)
{
    if (pos < 0 || pos + 4 > limit)
        return err_struct(4, pos, limit), -1;
    long stored = (long)(int32_t)be32(d + pos);
    if (stored != kg)
        return corrupt(self, "key group %ld: the block starts with key group %ld", kg, stored);
    pos += 4;
    unsigned char *seen = PyMem_Calloc((size_t)(self->nstates ? self->nstates : 1), 1);
    if (seen == NULL)
        return PyErr_NoMemory(), -1;
    int rc = 0;
    for (Py_ssize_t block = 0; block < self->nstates && rc == 0; block++) {
        if (pos + 6 > limit) {
            rc = (err_struct(pos + 2 > limit ? 2 : 4, pos + 2 > limit ? pos : pos + 2, limit), -1);
            break;
        }
        Py_ssize_t sid = be16(d + pos);
        int32_t count = (int32_t)be32(d + pos + 2);
        pos += 6;
        if (sid >= self->nstates) {
            rc = corrupt(self, "key group %ld: state id %zd but the backend has %zd states", kg, sid, self->nstates);
            break;
        }
        if (seen[sid]) {
            rc = corrupt(self, "key group %ld: a second block of state id %zd", kg, sid);
            break;
        }
        seen[sid] = 1;
        if (count < 0 || (Py_ssize_t)count > limit - pos) {
            rc = corrupt(self, "key group %ld: invalid entry count %d", kg, (int)count);
            break;
        }
        Plan *plan = &self->plans[sid];
        for (int32_t i = 0; i < count && rc == 0; i++)
            rc = native_entry(self, plan, sink, d, limit, &pos);
    }
    PyMem_Free(seen);
    if (rc < 0)
        return -1;
    if (pos != limit)
        return corrupt(self, "key group %ld: its data ends at byte %zd, the next key group starts at byte %zd", kg,
                       pos, limit);
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* what every Scanner method checks first */

/* 0 when the scanner has its plans (and `per_state`, when given, one item per state), with the TTL
 * deadline (None, or the epoch milliseconds at or before which a TTL value has expired) read into
 * *limit; else -1 with the error set */
static int
scanner_ready(Scanner *self, const char *method, PyObject *per_state, const char *items, PyObject *deadline,
              long long *limit)
{
    if (self->plans == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Scanner not initialised");
        return -1;
    }
    if (per_state != NULL && PyList_GET_SIZE(per_state) != self->nstates) {
        PyErr_Format(PyExc_ValueError, "%s(): %zd %s for %zd states", method, PyList_GET_SIZE(per_state), items,
                     self->nstates);
        return -1;
    }
    *limit = 0;
    if (deadline != NULL && deadline != Py_None) {
        *limit = PyLong_AsLongLong(deadline);
        if (*limit == -1 && PyErr_Occurred())
            return -1;
    }
    return 0;
}

#endif
