/* fstate.savepoint._encoding, part 2 (included by _encoding.c only): key_group_blocks, the spill
 * records of one range file as canonical key-group blocks, the twin of keyed_stream.spilled_groups
 * followed by keyed.encode_key_group (the reference): within a key group the states in ascending id,
 * each state's pairs sorted by key bytes, the first byte of its last key marked META_FOLLOWS, the next
 * state's id (or END_OF_KEY_GROUP) after it. A key that appears twice in one state, an empty key or a
 * truncated record: None, and the Python code reports it. */

#ifndef FSTATE_ENCODING_BLOCKS_H
#define FSTATE_ENCODING_BLOCKS_H

typedef struct {
    uint16_t kg, sid;
    uint32_t klen, vlen;
    const uint8_t *k, *v;
} Pair;

static int
pair_order(const void *pa, const void *pb)
{
    const Pair *a = pa, *b = pb;
    if (a->kg != b->kg)
        return a->kg < b->kg ? -1 : 1;
    if (a->sid != b->sid)
        return a->sid < b->sid ? -1 : 1;
    uint32_t n = a->klen < b->klen ? a->klen : b->klen;
    int c = memcmp(a->k, b->k, n);
    if (c)
        return c;
    return a->klen < b->klen ? -1 : a->klen > b->klen ? 1 : 0;
}

static PyObject *
py_key_group_blocks(PyObject *Py_UNUSED(mod), PyObject *args)
{
    Py_buffer view;
    long lo, hi;
    if (!PyArg_ParseTuple(args, "y*ll", &view, &lo, &hi))
        return NULL;
    const uint8_t *data = view.buf;
    size_t end = (size_t)view.len, pos = 0, n = 0, cap = 0;
    Pair *pairs = NULL;
    PyObject *result = NULL;
    Buf block = {0};
    int declined = 0;
    while (pos < end) {
        if (end - pos < 12) {
            declined = 1;
            break;
        }
        Pair p = {be16(data + pos), be16(data + pos + 2), be32(data + pos + 4), be32(data + pos + 8), NULL, NULL};
        pos += 12;
        if (end - pos < (size_t)p.klen + p.vlen) {
            declined = 1;
            break;
        }
        p.k = data + pos;
        p.v = data + pos + p.klen;
        pos += (size_t)p.klen + p.vlen;
        if (p.kg < lo || p.kg > hi)
            continue;
        if (p.klen == 0) {
            declined = 1;
            break;
        }
        if (n == cap) {
            cap = cap ? 2 * cap : 1024;
            Pair *grown = PyMem_Realloc(pairs, cap * sizeof(Pair));
            if (grown == NULL) {
                PyErr_NoMemory();
                goto done;
            }
            pairs = grown;
        }
        pairs[n++] = p;
    }
    if (!declined) {
        qsort(pairs, n, sizeof(Pair), pair_order);
        for (size_t i = 1; i < n; i++)
            if (pair_order(&pairs[i - 1], &pairs[i]) == 0) {
                declined = 1;
                break;
            }
    }
    if (declined) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    result = PyList_New(0);
    if (result == NULL)
        goto done;
    for (size_t i = 0; i < n;) {
        uint16_t kg = pairs[i].kg;
        block.len = 0;
        if (buf_be(&block, pairs[i].sid, 2) < 0)
            goto fail;
        for (; i < n && pairs[i].kg == kg; i++) {
            const Pair *p = &pairs[i];
            int last = i + 1 == n || pairs[i + 1].kg != kg || pairs[i + 1].sid != p->sid;
            if (buf_be(&block, p->klen, 4) < 0 || buf_byte(&block, last ? (uint8_t)(p->k[0] | META_FOLLOWS) : p->k[0]) < 0
                || buf_put(&block, p->k + 1, p->klen - 1) < 0 || buf_be(&block, p->vlen, 4) < 0
                || buf_put(&block, p->v, p->vlen) < 0)
                goto fail;
            if (last && buf_be(&block, i + 1 < n && pairs[i + 1].kg == kg ? pairs[i + 1].sid : END_OF_KEY_GROUP, 2) < 0)
                goto fail;
        }
        PyObject *item = Py_BuildValue("(iy#)", (int)kg, (const char *)block.p, (Py_ssize_t)block.len);
        if (item == NULL || PyList_Append(result, item) < 0) {
            Py_XDECREF(item);
            goto fail;
        }
        Py_DECREF(item);
    }
    goto done;
fail:
    Py_CLEAR(result);
done:
    PyMem_Free(pairs);
    buf_free(&block);
    PyBuffer_Release(&view);
    return result;
}

#endif
