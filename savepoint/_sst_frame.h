/* _sst.c: frame(parts, prefix), the pairs of merger reads as key groups of Flink's canonical layout,
 * which the canonical decoders (the compiled scanner, the Python reference) read as they read a
 * savepoint's key-group stream: RocksDB stores each entry exactly as that layout does. */

#ifndef FSTATE_SST_FRAME_H
#define FSTATE_SST_FRAME_H

typedef struct {
    long sid;
    const uint8_t *p, *end;        /* the pairs not read yet */
    const uint8_t *k, *v;          /* the current pair (at) */
    uint32_t klen, vlen;
    long kg;
    int at;
} FramePart;

/* the pair after the current one; 1: there is none, -1: a key shorter than its prefix (kg set) */
static int
frame_next(FramePart *f, int prefix)
{
    f->at = 0;
    if (f->p >= f->end)
        return 1;
    uint32_t klen, vlen;
    memcpy(&klen, f->p, 4);
    f->k = f->p + 4;
    memcpy(&vlen, f->k + klen, 4);
    f->v = f->k + klen + 4;
    f->klen = klen;
    f->vlen = vlen;
    f->p = f->v + vlen;
    if (klen < (uint32_t)prefix) {
        f->kg = klen ? (long)f->k[0] << 8 : 0;
        return -1;
    }
    f->kg = prefix == 1 ? (long)f->k[0] : ((long)f->k[0] << 8) | f->k[1];
    f->at = 1;
    return 0;
}

static inline int
put_be(Buf *b, uint32_t v, int n)
{
    uint8_t x[4] = {(uint8_t)(v >> 24), (uint8_t)(v >> 16), (uint8_t)(v >> 8), (uint8_t)v};
    return buf_put(b, x + 4 - n, (size_t)n);
}

/* a key shorter than its prefix: ValueError((index of its part, key group)) */
static PyObject *
frame_short_key(Py_ssize_t i, long kg)
{
    PyObject *args = Py_BuildValue("(nl)", i, kg);
    if (args != NULL) {
        PyErr_SetObject(PyExc_ValueError, args);
        Py_DECREF(args);
    }
    return NULL;
}

static PyObject *
frame_parts(FramePart *fp, Py_ssize_t n, int prefix, Buf *out)
{
    PyObject *regions = PyList_New(0);
    if (regions == NULL)
        return NULL;
    for (;;) {
        long kg = -1;
        for (Py_ssize_t i = 0; i < n; i++)
            if (fp[i].at && (kg < 0 || fp[i].kg < kg))
                kg = fp[i].kg;
        if (kg < 0)
            break;
        size_t start = out->len, last_key = 0;
        int first = 1;
        for (Py_ssize_t i = 0; i < n; i++) {
            FramePart *f = &fp[i];
            if (!f->at || f->kg != kg)
                continue;
            if (!first)
                out->p[last_key] |= 0x80;  /* the state before ends: its last key says a state id follows */
            first = 0;
            if (put_be(out, (uint32_t)f->sid, 2) < 0)
                goto error;
            while (f->at && f->kg == kg) {
                if (f->klen > INT32_MAX || f->vlen > INT32_MAX) {
                    PyErr_SetString(PyExc_OverflowError, "a key or value of 2 GiB or more");
                    goto error;
                }
                if (put_be(out, f->klen, 4) < 0)
                    goto error;
                last_key = out->len;
                if (buf_put(out, f->k, f->klen) < 0 || put_be(out, f->vlen, 4) < 0 || buf_put(out, f->v, f->vlen) < 0)
                    goto error;
                int rc = frame_next(f, prefix);
                if (rc < 0) {
                    Py_DECREF(regions);
                    return frame_short_key(i, f->kg);
                }
            }
        }
        out->p[last_key] |= 0x80;
        if (put_be(out, 0xFFFF, 2) < 0)
            goto error;
        PyObject *r = Py_BuildValue("(lnn)", kg, (Py_ssize_t)start, (Py_ssize_t)out->len);
        if (r == NULL || PyList_Append(regions, r) < 0) {
            Py_XDECREF(r);
            goto error;
        }
        Py_DECREF(r);
    }
    return regions;
error:
    Py_DECREF(regions);
    return NULL;
}

static PyObject *
sst_frame(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *parts;
    int prefix;
    if (!PyArg_ParseTuple(args, "O!i:frame", &PyTuple_Type, &parts, &prefix))
        return NULL;
    if (prefix != 1 && prefix != 2) {
        PyErr_SetString(PyExc_ValueError, "the key-group prefix is 1 or 2 bytes");
        return NULL;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(parts);
    FramePart *fp = PyMem_Calloc((size_t)(n ? n : 1), sizeof(FramePart));
    if (fp == NULL)
        return PyErr_NoMemory();
    PyObject *result = NULL, *regions = NULL;
    Buf out = {0};
    long previous = -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *part = PyTuple_GET_ITEM(parts, i), *data;
        long sid;
        if (!PyTuple_Check(part) || !PyArg_ParseTuple(part, "lO!", &sid, &PyBytes_Type, &data))
            goto done;
        if (sid <= previous || sid >= 0xFFFF) {
            PyErr_SetString(PyExc_ValueError, "frame takes parts in ascending state id order, each below 65535");
            goto done;
        }
        previous = sid;
        fp[i].sid = sid;
        fp[i].p = (const uint8_t *)PyBytes_AS_STRING(data);
        fp[i].end = fp[i].p + PyBytes_GET_SIZE(data);
        if (frame_next(&fp[i], prefix) < 0) {
            frame_short_key(i, fp[i].kg);
            goto done;
        }
    }
    regions = frame_parts(fp, n, prefix, &out);
    if (regions != NULL) {
        PyObject *bytes = PyBytes_FromStringAndSize(out.len ? (const char *)out.p : "", (Py_ssize_t)out.len);
        if (bytes != NULL)
            result = Py_BuildValue("(NN)", bytes, regions);
        else
            Py_DECREF(regions);
    }
done:
    buf_free(&out);
    PyMem_Free(fp);
    return result;
}

/* masked_crc32c(buffer) -> int: the masked CRC32C of the bytes, as RocksDB stores it (the MANIFEST's
   log records, savepoint/rocksdb_manifest.py) */
static PyObject *
sst_masked_crc32c(PyObject *Py_UNUSED(self), PyObject *arg)
{
    Py_buffer b;
    if (PyObject_GetBuffer(arg, &b, PyBUF_SIMPLE) < 0)
        return NULL;
    uint32_t crc = crc_masked(crc32c((const uint8_t *)b.buf, (size_t)b.len));
    PyBuffer_Release(&b);
    return PyLong_FromUnsignedLong(crc);
}

static PyMethodDef sst_methods[] = {
    {"masked_crc32c", sst_masked_crc32c, METH_O,
     "masked_crc32c(buffer) -> int: the bytes' CRC32C masked as RocksDB stores it"},
    {"frame", sst_frame, METH_VARARGS,
     "frame(((state id, pairs of a merger read), ...), prefix) -> (bytes, [(key group, start, end), ...]): the "
     "pairs as key groups of the canonical layout, the states in the given (ascending) order"},
    {NULL},
};

#endif
