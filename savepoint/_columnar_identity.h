/* fstate.savepoint._columnar, part 3 (included by _columnar_rows.h only): the rows of a key group by
 * identity (the serialized key and namespace): a hash table of them, and scan's look-ahead that
 * hashes the identities of the entries ahead and brings their slots and bytes into the cache. */

#ifndef FSTATE_COLUMNAR_IDENTITY_H
#define FSTATE_COLUMNAR_IDENTITY_H

static inline uint64_t
mix(uint64_t h, uint64_t v)
{
    h ^= v;
    h *= 0x9E3779B97F4A7C15ULL;
    return h ^ (h >> 29);
}

static inline uint64_t
load64(const uint8_t *p)
{
    uint64_t w;
    memcpy(&w, p, 8);
    return w;
}

static inline uint64_t
load32(const uint8_t *p)
{
    uint32_t w;
    memcpy(&w, p, 4);
    return w;
}

/* The tail (after the whole words) is read with fixed-size loads, not a memcpy of n bytes (a libc
 * call, and a store the next load waits on): the last 8 bytes of the string when it has 8 (they
 * overlap the words before), else two overlapping 4-byte loads, else three bytes. */
static inline uint64_t
hash_bytes(uint64_t h, const uint8_t *p, Py_ssize_t n)
{
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8)
        h = mix(h, load64(p + i));
    uint64_t w;
    if (i == n)
        w = 0;
    else if (n >= 8)
        w = load64(p + n - 8);
    else if (n >= 4)
        w = load32(p) | (load32(p + n - 4) << 32);
    else
        w = (uint64_t)p[0] | ((uint64_t)p[n >> 1] << 8) | ((uint64_t)p[n - 1] << 16);
    return mix(h, w ^ ((uint64_t)n << 56));
}

static int
grow_slots(Decoder *self)
{
    size_t n = self->nslots ? self->nslots * 2 : 1024;
    Slot *s = PyMem_Calloc(n, sizeof(Slot));
    if (s == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    const uint32_t *hashes = (const uint32_t *)self->id_hash.p;
    const int64_t *off = (const int64_t *)self->id_start.p;
    uint32_t gen = 1;
    for (Py_ssize_t r = 0; r < self->hashed; r++) {
        uint32_t h = hashes[r];
        size_t i = h & (n - 1);
        while (s[i].gen == gen)
            i = (i + 1) & (n - 1);
        s[i].gen = gen;
        s[i].hash = h;
        s[i].row = (int32_t)(self->kg_first + r);
        s[i].idoff = (uint32_t)off[r];
    }
    PyMem_Free(self->slots);
    self->slots = s;
    self->nslots = n;
    self->gen = gen;
    return 0;
}

static inline uint32_t
identity_hash(const uint8_t *p, Py_ssize_t n)
{
    uint64_t h = hash_bytes(0x243F6A8885A308D3ULL, p, n);
    return (uint32_t)(h ^ (h >> 32));
}

/* key-group row r (relative) into the hash table; h: its identity's hash when known (have_h) */
static int
insert_row(Decoder *self, Py_ssize_t r, int have_h, uint32_t h)
{
    if ((size_t)(self->hashed + 1) * 2 > self->nslots && grow_slots(self) < 0)
        return -1;
    const int64_t *off = (const int64_t *)self->id_start.p;
    if (!have_h)
        h = identity_hash(self->ids.p + off[r], (Py_ssize_t)(off[r + 1] - off[r]));
    if (buf_reserve(&self->id_hash, 4) < 0)
        return -1;
    memcpy(self->id_hash.p + self->id_hash.len, &h, 4);
    self->id_hash.len += 4;
    size_t mask = self->nslots - 1, i = h & mask;
    while (self->slots[i].gen == self->gen)
        i = (i + 1) & mask;
    self->slots[i].gen = self->gen;
    self->slots[i].hash = h;
    self->slots[i].row = (int32_t)(self->kg_first + r);
    self->slots[i].idoff = (uint32_t)off[r];
    self->hashed++;
    return 0;
}

/* memcmp's sign over n bytes, by words (identities are a few bytes: no libc call) */
static inline int
bytes_compare(const uint8_t *a, const uint8_t *b, Py_ssize_t n)
{
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t x, y;
        memcpy(&x, a + i, 8);
        memcpy(&y, b + i, 8);
        if (x != y) {
            x = __builtin_bswap64(x);
            y = __builtin_bswap64(y);
            return x < y ? -1 : 1;
        }
    }
    for (; i < n; i++)
        if (a[i] != b[i])
            return a[i] < b[i] ? -1 : 1;
    return 0;
}

static inline int
same_identity(Decoder *self, Py_ssize_t r, const uint8_t *a, Py_ssize_t n)
{
    const int64_t *off = (const int64_t *)self->id_start.p;
    return off[r + 1] - off[r] == n && bytes_compare(self->ids.p + off[r], a, n) == 0;
}

/* identity a (n bytes) after row r's (bytewise order) */
static inline int
after_identity(Decoder *self, Py_ssize_t r, const uint8_t *a, Py_ssize_t n)
{
    const int64_t *off = (const int64_t *)self->id_start.p;
    Py_ssize_t m = (Py_ssize_t)(off[r + 1] - off[r]);
    int c = bytes_compare(self->ids.p + off[r], a, m < n ? m : n);
    return c < 0 || (c == 0 && m < n);
}

/* The row of an identity (a, na) + (b, nb) in the current key group; *fresh = 1 when it is new.
 * Without hashing when the entries come in the usual order: a state's entries follow the rows in
 * the order the first state made them (sorted), or make new rows in increasing order. Otherwise
 * the rows are hashed (lazily) and looked up. -2: a Python error. */
static int32_t
find_row(Decoder *self, Plan *plan, const uint8_t *a, Py_ssize_t na, const uint8_t *b, Py_ssize_t nb, int *fresh)
{
    Py_ssize_t n = na + nb;
    int have_h = 0;
    uint32_t h = 0;
    if (!nb && a == self->hint.a && na == self->hint.n) {
        have_h = 1;
        h = self->hint.hash;
    }
    if (nb) {                  /* an ambiguous key: the identity is key bytes + namespace bytes */
        self->scratch.len = 0;
        if (buf_reserve(&self->scratch, (size_t)n) < 0)
            return -2;
        memcpy(self->scratch.p, a, (size_t)na);
        memcpy(self->scratch.p + na, b, (size_t)nb);
        a = self->scratch.p;
    }
    Py_ssize_t kg_rows = self->rows - self->kg_first;
    *fresh = 0;
    if (plan->last_row >= 0) {
        Py_ssize_t r = plan->last_row - self->kg_first;
        if (same_identity(self, r, a, n))
            return plan->last_row;
        if (r + 1 < kg_rows && same_identity(self, r + 1, a, n))
            return plan->last_row + 1;
    } else if (kg_rows > 0 && same_identity(self, 0, a, n)) {
        return (int32_t)self->kg_first;
    }
    int ordered = kg_rows == 0 ||
                  (self->ordered && self->creator == plan && after_identity(self, kg_rows - 1, a, n));
    if (!ordered) {
        self->ordered = 0;
        while (self->hashed < kg_rows)
            if (insert_row(self, self->hashed, 0, 0) < 0)
                return -2;
        if (!have_h) {
            h = identity_hash(a, n);
            have_h = 1;
        }
        size_t mask = self->nslots - 1, i = h & mask;
        for (;;) {
            Slot *s = &self->slots[i];
            if (s->gen != self->gen)
                break;
            if (s->hash == h && same_identity(self, s->row - self->kg_first, a, n))
                return s->row;
            i = (i + 1) & mask;
        }
    } else {
        self->creator = plan;
    }
    /* a new row: keep its identity */
    if (buf_reserve(&self->ids, (size_t)n) < 0 || buf_reserve(&self->id_start, 8) < 0)
        return -2;
    memcpy(self->ids.p + self->ids.len, a, (size_t)n);
    self->ids.len += (size_t)n;
    int64_t end = (int64_t)self->ids.len;
    memcpy(self->id_start.p + self->id_start.len, &end, 8);
    self->id_start.len += 8;
    *fresh = 1;
    self->rows++;
    if (!ordered && insert_row(self, kg_rows, have_h, h) < 0)
        return -2;
    return (int32_t)(self->rows - 1);
}

static int
start_key_group(Decoder *self)
{
    self->kg_first = self->rows;
    self->ids.len = 0;
    self->id_start.len = 0;
    self->id_hash.len = 0;
    self->hashed = 0;
    self->ordered = 1;
    self->creator = NULL;
    int64_t zero = 0;
    if (buf_reserve(&self->id_start, 8) < 0)
        return -1;
    memcpy(self->id_start.p, &zero, 8);
    self->id_start.len = 8;
    if (++self->gen == 0) {    /* wrapped: clear every slot once */
        memset(self->slots, 0, self->nslots * sizeof(Slot));
        self->gen = 1;
    }
    for (Py_ssize_t c = 0; c < self->ncols; c++)
        self->plans[self->cols[c]].last_row = -1;
    return 0;
}

/* scan's look-ahead: a cursor over the entries' framing a few entries ahead of the decoding */
typedef struct {
    Py_ssize_t pos, sid;
    int ended;                 /* at the end of the key group, or at a problem (the decoding reports it) */
} Peek;

/* the next entry of the look-ahead: when the rows are hashed (not in order), the hash of its identity
 * (hint->n < 0: none) */
static inline void
peek_entry(Decoder *self, const uint8_t *d, Py_ssize_t limit, Peek *pk, Hint *hint)
{
    hint->n = -1;
    if (pk->ended)
        return;
    Py_ssize_t sid = pk->sid;
    WireEntry en;
    if (sid >= self->nstates || wire_entry(d, limit, pk->pos, self->prefix, &en) != WIRE_ENTRY_OK) {
        pk->ended = 1;
        return;
    }
    pk->pos = en.vstart + en.vlen;
    if (en.flag) {
        if (pk->pos + 2 > limit) {
            pk->ended = 1;
        } else {
            Py_ssize_t nxt = be16(d + pk->pos);
            pk->pos += 2;
            if (nxt == END_OF_KEY_GROUP)
                pk->ended = 1;
            else
                pk->sid = nxt;
        }
    }
    Plan *plan = &self->plans[sid];
    /* the identity entry() gives find_row for a valid entry of such a state: the key after its prefix */
    if (self->ordered || plan->column < 0 || plan->mode == M_SKIP || plan->mode == M_MAP || plan->ambiguous ||
        en.klen < self->prefix)
        return;
    hint->a = d + en.kstart + self->prefix;
    hint->n = en.klen - self->prefix;
    hint->hash = identity_hash(hint->a, hint->n);
}

/* the slot an identity hashed ahead would be looked up in, into the cache; once that is there, the
 * identity bytes of the row it holds */
static inline void
prefetch_slot(Decoder *self, const Hint *hint)
{
    if (hint->n >= 0)
        __builtin_prefetch(&self->slots[hint->hash & (self->nslots - 1)]);
}

static inline void
prefetch_identity(Decoder *self, const Hint *hint)
{
    if (hint->n < 0)
        return;
    size_t mask = self->nslots - 1, i = hint->hash & mask;
    for (int k = 0; k < 4; k++, i = (i + 1) & mask) {
        const Slot *s = &self->slots[i];
        if (s->gen != self->gen)
            return;
        if (s->hash == hint->hash) {
            __builtin_prefetch(self->ids.p + s->idoff);
            __builtin_prefetch(self->id_start.p + 8 * (size_t)(s->row - self->kg_first));
            return;
        }
    }
}

#endif
