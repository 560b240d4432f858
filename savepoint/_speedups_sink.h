/* fstate.savepoint._speedups, part 2 (included by _speedups.c only): where decoded entries go: the
 * entries list, rows grouped by identity, or the keyed table's row tuples. */

#ifndef FSTATE_SPEEDUPS_SINK_H
#define FSTATE_SPEEDUPS_SINK_H

#include "_speedups_values.h"

/* ------------------------------------------------------------------------------------------ */
/* where decoded entries go */

typedef struct {
    PyObject *list;     /* entries(): the output list */
    PyObject *rows;     /* rows(): identity -> [key, ns, values]; table(): identity -> row tuple */
    Py_ssize_t width;
    PyObject *kg;
    int table;          /* table(): rows are the keyed table's tuples */
    int flatten;        /* table(): the key's fields as columns */
    int ns_mode;        /* table(): 0 no namespace columns, 1 window start and end, 2 the namespace */
    /* measure(): per state id, a dict key -> [bytes, entries, elements, key] */
    PyObject *measure;
    long long *totals;  /* measure(): per state id, entries, bytes, key bytes, value bytes, elements */
    Plan *plans;        /* measure(): the scanner's plans (a plan's index is its state id) */
    Py_ssize_t klen, vlen;  /* the stored lengths of the entry being decoded */
    /* measure(): per state id, its TTL timestamps: stamps seen, oldest, newest, expired entries, bytes
     * and list elements (expired: last access <= deadline, when has_deadline) */
    long long *ttl;
    int has_deadline;
    long long deadline;
    /* measure(): a key Python cannot hash (a list, a map, a row holding one: only the Python
     * decoders make such keys) is counted under freeze(key) (NULL: an error) */
    PyObject *freeze;
    struct TopPass *top;  /* measure_top(): the keys by their bytes (else NULL) */
} Sink;

#define TOTALS 5
#define TTL_FIELDS 6

/* obj.name(arg), its result dropped; -1 when it raised */
static int
call_method(PyObject *obj, const char *name, PyObject *arg)
{
    PyObject *r = PyObject_CallMethod(obj, name, "O", arg);
    Py_XDECREF(r);
    return r == NULL ? -1 : 0;
}

/* One state's value into its column slot, as keyed.rows_from_entries does: maps collect entries,
 * lists are extended, anything else replaces. Takes the reference of value. */
static int
merge(PyObject **slot, int kind, PyObject *value)
{
    PyObject *cur = *slot;
    int rc = 0;
    if (kind == C_MAP) {
        if (cur == Py_None) {
            PyObject *m = PyDict_New();
            if (m == NULL) {
                Py_DECREF(value);
                return -1;
            }
            *slot = m;
            Py_DECREF(cur);
            cur = m;
        }
        if (PyTuple_Check(value)) {
            if (PyTuple_GET_SIZE(value) < 2) {
                PyErr_SetString(PyExc_IndexError, "tuple index out of range");
                rc = -1;
            } else {
                rc = PyObject_SetItem(cur, PyTuple_GET_ITEM(value, 0), PyTuple_GET_ITEM(value, 1));
            }
        } else {
            rc = call_method(cur, "update", value);
        }
        Py_DECREF(value);
        return rc;
    }
    if (kind == C_LIST && cur != Py_None) {
        if (PyList_CheckExact(cur) && PyList_CheckExact(value)) {
            Py_ssize_t n = PyList_GET_SIZE(cur);
            rc = PyList_SetSlice(cur, n, n, value);
        } else {
            rc = call_method(cur, "extend", value);
        }
        Py_DECREF(value);
        return rc;
    }
    *slot = value;
    Py_DECREF(cur);
    return 0;
}

/* A new row of the keyed table (tables._keyed_output): key part, namespace part, None per state.
 * Takes the references of key and ns. */
static PyObject *
new_table_row(Sink *sink, PyObject *key, PyObject *ns)
{
    PyObject *keyt = NULL, *tup = NULL;
    Py_ssize_t nk = 1, nn = sink->ns_mode == 0 ? 0 : sink->ns_mode == 1 ? 2 : 1;
    if (sink->flatten) {
        keyt = PySequence_Tuple(key);
        if (keyt == NULL)
            goto done;
        nk = PyTuple_GET_SIZE(keyt);
    }
    tup = PyTuple_New(nk + nn + sink->width);
    if (tup == NULL)
        goto done;
    for (Py_ssize_t i = 0; i < nk; i++) {
        PyObject *x = keyt != NULL ? PyTuple_GET_ITEM(keyt, i) : key;
        Py_INCREF(x);
        PyTuple_SET_ITEM(tup, i, x);
    }
    if (sink->ns_mode == 1) {
        for (Py_ssize_t i = 0; i < 2; i++) {
            PyObject *x = ns == Py_None ? Py_NewRef(Py_None) : PySequence_GetItem(ns, i);
            if (x == NULL) {
                Py_CLEAR(tup);
                goto done;
            }
            PyTuple_SET_ITEM(tup, nk + i, x);
        }
    } else if (sink->ns_mode != 0) {
        PyTuple_SET_ITEM(tup, nk, Py_NewRef(ns));
    }
    for (Py_ssize_t i = nk + nn; i < nk + nn + sink->width; i++)
        PyTuple_SET_ITEM(tup, i, Py_NewRef(Py_None));
done:
    Py_XDECREF(keyt);
    Py_DECREF(key);
    Py_DECREF(ns);
    return tup;
}

/* an entry that fails: releases what was decoded of it (any may be NULL); -1 */
static int
drop_entry(PyObject *ident, PyObject *key, PyObject *ns, PyObject *value)
{
    Py_XDECREF(ident);
    Py_XDECREF(key);
    Py_XDECREF(ns);
    Py_XDECREF(value);
    return -1;
}

/* list[i] += delta (list items are ints) */
static int
add_to(PyObject *list, Py_ssize_t i, long long delta)
{
    PyObject *old = PyList_GET_ITEM(list, i);
    long long v = PyLong_AsLongLong(old);
    if (v == -1 && PyErr_Occurred())
        return -1;
    PyObject *n = PyLong_FromLongLong(v + delta);
    if (n == NULL)
        return -1;
    PyList_SET_ITEM(list, i, n);
    Py_DECREF(old);
    return 0;
}

/* measure_entry's TTL part: the timestamps the entry's TTL wrappers recorded (size: its bytes) */
static void
count_ttl(Sink *sink, Plan *plan, Py_ssize_t s, long long size)
{
    if (!ttl_stamps.n)
        return;
    long long *x = sink->ttl + TTL_FIELDS * s, expired = 0;
    for (Py_ssize_t i = 0; i < ttl_stamps.n; i++) {
        long long stamp = ttl_stamps.stamps[i];
        if (x[0] == 0 || stamp < x[1])
            x[1] = stamp;
        if (x[0] == 0 || stamp > x[2])
            x[2] = stamp;
        x[0] += 1;
        if (sink->has_deadline && stamp <= sink->deadline)
            expired++;
    }
    if (plan->column_kind == C_LIST)
        x[5] += expired;
    if (sink->has_deadline && expired == ttl_stamps.n) {
        x[3] += 1;
        x[4] += size;
    }
    ttl_stamps.n = 0;
}

/* measure(): one entry into its state's totals and its key's [bytes, entries, elements, key] (a list
 * has its elements, a map entry is one). Takes the references of ident, key, ns and value. */
static int
measure_entry(Sink *sink, Plan *plan, PyObject *ident, PyObject *key, PyObject *ns, PyObject *value)
{
    Py_ssize_t s = plan - sink->plans;
    long long size = (long long)sink->klen + (long long)sink->vlen, elements = 0;
    if (plan->column_kind == C_MAP) {
        elements = 1;
    } else if (plan->column_kind == C_LIST && value != Py_None) {
        Py_ssize_t n = PyObject_Length(value);
        if (n < 0)
            goto fail;
        elements = n;
    }
    long long *t = sink->totals + TOTALS * s;
    t[0] += 1;
    t[1] += size;
    t[2] += sink->klen;
    t[3] += sink->vlen;
    t[4] += elements;
    count_ttl(sink, plan, s, size);  /* readers/sizes_measure._count_ttl: expired when all its timestamps are */
    PyObject *keys = PyList_GET_ITEM(sink->measure, s);
    PyObject *identity = Py_NewRef(key);
    PyObject *acc = PyDict_GetItemWithError(keys, identity);
    if (acc == NULL && sink->freeze != NULL && PyErr_Occurred() && PyErr_ExceptionMatches(PyExc_TypeError)) {
        PyErr_Clear();  /* unhashable: counted under freeze(key), the same for the same key */
        Py_SETREF(identity, PyObject_CallOneArg(sink->freeze, key));
        if (identity == NULL)
            goto fail;
        acc = PyDict_GetItemWithError(keys, identity);
    }
    if (acc == NULL) {
        if (PyErr_Occurred())
            goto fail_identity;
        acc = Py_BuildValue("[LLLO]", size, 1LL, elements, key);
        if (acc == NULL)
            goto fail_identity;
        int rc = PyDict_SetItem(keys, identity, acc);
        Py_DECREF(acc);
        if (rc < 0)
            goto fail_identity;
    } else if (!PyList_CheckExact(acc) || PyList_GET_SIZE(acc) != 4) {
        PyErr_SetString(PyExc_TypeError, "measure(): keys must map to [bytes, entries, elements, key]");
        goto fail_identity;
    } else if (add_to(acc, 0, size) < 0 || add_to(acc, 1, 1) < 0 || add_to(acc, 2, elements) < 0) {
        goto fail_identity;
    }
    Py_DECREF(identity);
    drop_entry(ident, key, ns, value);
    return 0;

fail_identity:
    Py_DECREF(identity);
fail:
    return drop_entry(ident, key, ns, value);
}

/* Takes the references of ident, key, ns and value. */
static int
emit(Sink *sink, Plan *plan, PyObject *ident, PyObject *key, PyObject *ns, PyObject *value)
{
    if (sink->measure != NULL)
        return measure_entry(sink, plan, ident, key, ns, value);
    if (sink->list != NULL) {
        PyObject *tup = PyTuple_New(6);
        if (tup == NULL)
            goto fail;
        Py_INCREF(plan->sid);
        Py_INCREF(sink->kg);
        PyTuple_SET_ITEM(tup, 0, plan->sid);
        PyTuple_SET_ITEM(tup, 1, sink->kg);
        PyTuple_SET_ITEM(tup, 2, ident);
        PyTuple_SET_ITEM(tup, 3, key);
        PyTuple_SET_ITEM(tup, 4, ns);
        PyTuple_SET_ITEM(tup, 5, value);
        int rc = PyList_Append(sink->list, tup);
        Py_DECREF(tup);
        return rc;
    }
    int c = plan->column;
    PyObject *row = PyDict_GetItemWithError(sink->rows, ident);
    if (row == NULL && PyErr_Occurred())
        goto fail;
    if (sink->table) {
        /* the row tuple is filled in place: nothing outside this scan has seen it yet */
        if (row == NULL) {
            row = new_table_row(sink, key, ns);
            key = ns = NULL;
            if (row == NULL)
                goto fail;
            int rc = PyDict_SetItem(sink->rows, ident, row);
            Py_DECREF(row);
            if (rc < 0)
                goto fail;
        } else {
            Py_CLEAR(key);
            Py_CLEAR(ns);
        }
        Py_CLEAR(ident);
        if (!PyTuple_CheckExact(row) || PyTuple_GET_SIZE(row) < sink->width) {
            PyErr_SetString(PyExc_TypeError, "table rows must be tuples made by this scanner");
            Py_DECREF(value);
            return -1;
        }
        Py_ssize_t slot = PyTuple_GET_SIZE(row) - sink->width + c;
        return merge(&((PyTupleObject *)row)->ob_item[slot], plan->column_kind, value);
    }
    /* rows: the grouping of keyed.rows_from_entries */
    PyObject *vals;
    if (row == NULL) {
        vals = PyList_New(sink->width);
        if (vals == NULL)
            goto fail;
        for (Py_ssize_t i = 0; i < sink->width; i++)
            PyList_SET_ITEM(vals, i, Py_NewRef(Py_None));
        row = PyList_New(3);
        if (row == NULL) {
            Py_DECREF(vals);
            goto fail;
        }
        PyList_SET_ITEM(row, 0, key);
        PyList_SET_ITEM(row, 1, ns);
        PyList_SET_ITEM(row, 2, vals);
        key = ns = NULL;
        int rc = PyDict_SetItem(sink->rows, ident, row);
        Py_DECREF(row);
        if (rc < 0)
            goto fail;
    } else {
        Py_CLEAR(key);
        Py_CLEAR(ns);
        if (!PyList_CheckExact(row) || PyList_GET_SIZE(row) != 3 || !PyList_CheckExact(PyList_GET_ITEM(row, 2)) ||
            PyList_GET_SIZE(PyList_GET_ITEM(row, 2)) != sink->width) {
            PyErr_SetString(PyExc_TypeError, "rows must map to [key, namespace, values] made by this scanner");
            goto fail;
        }
        vals = PyList_GET_ITEM(row, 2);
    }
    Py_CLEAR(ident);
    return merge(&((PyListObject *)vals)->ob_item[c], plan->column_kind, value);

fail:
    return drop_entry(ident, key, ns, value);
}

#endif
