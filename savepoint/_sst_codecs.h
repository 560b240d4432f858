/* What _sst.c needs beside the table format: block checksums (CRC32C, XXH3) and decompression
 * (Snappy here; LZ4 and ZSTD from the system's libraries, loaded when first needed). A check or a
 * codec that is not available makes the table "unsupported" (the caller reads it with RocksDB). */

#ifndef FSTATE_SST_CODECS_H
#define FSTATE_SST_CODECS_H

#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "_buf.h"

/* RocksDB's checksum types (the footer's first byte) and compression types (a block trailer's) */
enum { CHECKSUM_CRC32C = 1, CHECKSUM_XXH3 = 4 };
enum { NO_COMPRESSION = 0, SNAPPY = 1, LZ4 = 4, LZ4HC = 5, ZSTD = 7 };

/* fixed-width integers as RocksDB stores them (little-endian), and big-endian for comparing bytes
 * (each compiles to one load, and a byte swap where needed) */
static inline uint32_t
le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint64_t
le64(const uint8_t *p)
{
    return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32;
}

static inline uint64_t
be64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return v;
}

/* a varint32/64 at *p (< end); 0 when it does not end before end or is too long */
static inline int
get_varint64(const uint8_t **p, const uint8_t *end, uint64_t *out)
{
    uint64_t v = 0;
    for (int shift = 0; shift <= 63 && *p < end; shift += 7) {
        uint8_t b = *(*p)++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (b < 0x80) {
            *out = v;
            return 1;
        }
    }
    return 0;
}

static inline int
get_varint32(const uint8_t **p, const uint8_t *end, uint32_t *out)
{
    uint64_t v;
    if (!get_varint64(p, end, &v) || v > UINT32_MAX)
        return 0;
    *out = (uint32_t)v;
    return 1;
}

/* ---- CRC32C (Castagnoli), masked as RocksDB stores it ---------------------------------------- */
static uint32_t crc_table[256];

static void
crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1)));
        crc_table[i] = c;
    }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("sse4.2"))) static uint32_t
crc_hw(uint32_t c, const uint8_t *p, size_t n)
{
    uint64_t c64 = c;
    for (; n >= 8; n -= 8, p += 8)
        c64 = __builtin_ia32_crc32di(c64, le64(p));
    c = (uint32_t)c64;
    for (; n; n--)
        c = __builtin_ia32_crc32qi(c, *p++);
    return c;
}
#define HAVE_CRC_HW 1
#endif

static uint32_t
crc32c(const uint8_t *p, size_t n)
{
    uint32_t c = 0xFFFFFFFFu;
#ifdef HAVE_CRC_HW
    if (__builtin_cpu_supports("sse4.2"))
        return ~crc_hw(c, p, n);
#endif
    for (; n; n--)
        c = crc_table[(c ^ *p++) & 0xff] ^ (c >> 8);
    return ~c;
}

static inline uint32_t
crc_masked(uint32_t crc)
{
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

/* ---- the system's libraries ------------------------------------------------------------------ */
typedef uint64_t (*xxh3_fn)(const void *, size_t);
typedef int (*lz4_fn)(const char *, char *, int, int);
typedef size_t (*zstd_fn)(void *, size_t, const void *, size_t);
typedef unsigned (*zstd_err_fn)(size_t);

static struct {
    int loaded;
    xxh3_fn xxh3;
    lz4_fn lz4;
    zstd_fn zstd;
    zstd_err_fn zstd_is_error;
} libs;

static void *
load_symbol(const char *const *names, const char *symbol)
{
    for (; *names; names++) {
        void *h = dlopen(*names, RTLD_NOW | RTLD_LOCAL);
        if (h != NULL) {
            void *f = dlsym(h, symbol);
            if (f != NULL)
                return f;
        }
    }
    return NULL;
}

static void
libs_load(void)
{
    if (libs.loaded)
        return;
    static const char *const xxhash[] = {"libxxhash.so.0", "libxxhash.so", "libxxhash.0.dylib", NULL};
    static const char *const lz4[] = {"liblz4.so.1", "liblz4.so", "liblz4.1.dylib", NULL};
    static const char *const zstd[] = {"libzstd.so.1", "libzstd.so", "libzstd.1.dylib", NULL};
    libs.xxh3 = (xxh3_fn)load_symbol(xxhash, "XXH3_64bits");
    libs.lz4 = (lz4_fn)load_symbol(lz4, "LZ4_decompress_safe");
    libs.zstd = (zstd_fn)load_symbol(zstd, "ZSTD_decompress");
    libs.zstd_is_error = (zstd_err_fn)load_symbol(zstd, "ZSTD_isError");
    if (libs.zstd_is_error == NULL)
        libs.zstd = NULL;
    libs.loaded = 1;
}

static int
checksum_supported(int type)
{
    libs_load();
    return type == CHECKSUM_CRC32C || (type == CHECKSUM_XXH3 && libs.xxh3 != NULL);
}

/* whether the block's stored checksum (over its bytes and its compression type byte) matches; from
 * table format version 6 on, a file's checksums are offset by a value of the file and the block's
 * offset (base: the footer's, 0 before) */
static int
checksum_ok(int type, const uint8_t *block, size_t n, uint32_t stored, uint32_t base, uint64_t offset)
{
    uint32_t v;
    if (type == CHECKSUM_CRC32C)
        v = crc_masked(crc32c(block, n + 1));
    else
        v = (uint32_t)libs.xxh3(block, n) ^ ((uint32_t)block[n] * 0x6b9083d9u);
    uint32_t modifier = base ? base ^ (uint32_t)((uint32_t)offset + (uint32_t)(offset >> 32)) : 0;
    return (uint32_t)(v + modifier) == stored;
}

/* the name RocksDB writes in rocksdb.compression → whether its blocks can be decompressed here */
static int
compression_supported(const char *name, size_t n)
{
    libs_load();
#define IS(s) (n == sizeof(s) - 1 && memcmp(name, s, n) == 0)
    if (IS("NoCompression") || IS("Snappy"))
        return 1;
    if (IS("LZ4") || IS("LZ4HC"))
        return libs.lz4 != NULL;
    if (IS("ZSTD") || IS("ZSTDNotFinal"))
        return libs.zstd != NULL;
#undef IS
    return 0;
}

/* ---- Snappy (its raw format: a varint length, then literals and back-references) ------------ */
#define SLACK 32                  /* bytes past the end a decompressor may scribble on (wide copies) */

static const char *
snappy_decompress(const uint8_t *src, size_t n, uint8_t **out, size_t *out_len)
{
    const uint8_t *p = src, *end = src + n;
    uint32_t len;
    if (!get_varint32(&p, end, &len))
        return "a Snappy block without its length";
    uint8_t *dst = malloc((size_t)len + SLACK);
    if (dst == NULL)
        return "out of memory";
    size_t at = 0;
    while (p < end) {
        uint8_t tag = *p++;
        size_t length, offset;
        if ((tag & 3) == 0) {
            length = (tag >> 2) + 1;
            if (length <= 16 && end - p >= 16 && len - at >= length) {   /* short: one wide copy */
                memcpy(dst + at, p, 16);
                p += length;
                at += length;
                continue;
            }
            if (length > 60) {
                size_t extra = length - 60;
                if ((size_t)(end - p) < extra)
                    goto bad;
                length = 0;
                for (size_t i = 0; i < extra; i++)
                    length |= (size_t)p[i] << (8 * i);
                length += 1;
                p += extra;
            }
            if ((size_t)(end - p) < length || len - at < length)
                goto bad;
            memcpy(dst + at, p, length);
            p += length;
            at += length;
            continue;
        }
        if ((tag & 3) == 1) {
            if (p >= end)
                goto bad;
            length = ((tag >> 2) & 7) + 4;
            offset = ((size_t)(tag >> 5) << 8) | *p++;
        } else if ((tag & 3) == 2) {
            if (end - p < 2)
                goto bad;
            length = (tag >> 2) + 1;
            offset = (size_t)p[0] | ((size_t)p[1] << 8);
            p += 2;
        } else {
            if (end - p < 4)
                goto bad;
            length = (tag >> 2) + 1;
            offset = le32(p);
            p += 4;
        }
        if (offset == 0 || offset > at || len - at < length)
            goto bad;
        uint8_t *d = dst + at;
        const uint8_t *from = d - offset;
        if (offset >= 8) {        /* 8 bytes at a time, each read before it is overwritten (SLACK) */
            for (size_t i = 0; i < length; i += 8)
                memcpy(d + i, from + i, 8);
        } else {
            for (size_t i = 0; i < length; i++)
                d[i] = from[i];
        }
        at += length;
    }
    if (at != len)
        goto bad;
    *out = dst;
    *out_len = len;
    return NULL;
bad:
    free(dst);
    return "a Snappy block that does not decompress";
}

/* a block of compression type `type` (format version 2+: LZ4 and ZSTD blocks start with the
 * varint32 decompressed size) into fresh memory; NULL or the problem */
static const char *
decompress(int type, const uint8_t *src, size_t n, uint8_t **out, size_t *out_len)
{
    if (type == SNAPPY)
        return snappy_decompress(src, n, out, out_len);
    if ((type == LZ4 || type == LZ4HC) ? libs.lz4 == NULL : (type != ZSTD || libs.zstd == NULL))
        return "a block of a compression this reader cannot decompress";
    const uint8_t *p = src, *end = src + n;
    uint32_t len;
    if (!get_varint32(&p, end, &len))
        return "a compressed block without its length";
    uint8_t *dst = malloc(len ? len : 1);
    if (dst == NULL)
        return "out of memory";
    int ok;
    if (type == ZSTD) {
        size_t got = libs.zstd(dst, len, p, (size_t)(end - p));
        ok = !libs.zstd_is_error(got) && got == len;
    } else {
        ok = len <= INT32_MAX && (size_t)(end - p) <= INT32_MAX
             && libs.lz4((const char *)p, (char *)dst, (int)(end - p), (int)len) == (int)len;
    }
    if (!ok) {
        free(dst);
        return type == ZSTD ? "a ZSTD block that does not decompress" : "an LZ4 block that does not decompress";
    }
    *out = dst;
    *out_len = len;
    return NULL;
}

#endif
