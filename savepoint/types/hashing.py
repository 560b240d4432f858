"""Hashes Flink uses to place things: Java ``hashCode``, Flink's murmur step, key groups, operator ids.

:func:`hash_string` and :func:`key_group_for_hash` run for every key that is placed or checked, so
when the compiled extension is built (and ``FSTATE_PURE_PYTHON`` is not set when this module is
imported) they are its twins ``java_string_hash`` and ``key_group`` (savepoint/_speedups_hash.h),
chosen once here for every caller. The Python functions stay as the reference, under the names
:func:`hash_string_py` and :func:`key_group_for_hash_py`.
"""

from __future__ import annotations

import struct

from .._compiled import pure_python_forced, speedups
from .. import limits
from ..errors import InvalidArgumentError

DEFAULT_LOWER_BOUND_MAX_PARALLELISM = 128
UPPER_BOUND_MAX_PARALLELISM = limits.UPPER_MAX_PARALLELISM

_M32 = 0xFFFFFFFF
_M64 = 0xFFFFFFFFFFFFFFFF


def to_int32(v: int) -> int:
    v &= _M32
    return v - (1 << 32) if v & 0x80000000 else v


def _rotl32(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def _fmix32(h: int) -> int:
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & _M32
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & _M32
    h ^= h >> 16
    return h


def murmur_hash(code: int) -> int:
    """Flink's ``MathUtils.murmurHash(int)``: non-negative."""
    k = (code & _M32) * 0xCC9E2D51 & _M32
    k = _rotl32(k, 15)
    k = k * 0x1B873593 & _M32
    h = _rotl32(k, 13)
    h = (h * 5 + 0xE6546B64) & _M32
    h ^= 4
    h = to_int32(_fmix32(h))
    if h >= 0:
        return h
    return -h if h != -(1 << 31) else 0


def key_group_for_hash(java_hash: int, max_parallelism: int) -> int:
    """The key group Flink gives a key whose ``hashCode`` is ``java_hash`` (``KeyGroupRangeAssignment``)."""
    return murmur_hash(java_hash) % max_parallelism


def key_group_range(index: int, parallelism: int, max_parallelism: int) -> tuple[int, int]:
    """Inclusive key-group range of operator instance ``index`` (``computeKeyGroupRangeForOperatorIndex``)."""
    check_parallelism(parallelism, max_parallelism)
    start = (index * max_parallelism + parallelism - 1) // parallelism
    end = ((index + 1) * max_parallelism - 1) // parallelism
    return start, end


def operator_index_for_key_group(key_group: int, parallelism: int, max_parallelism: int) -> int:
    return key_group * parallelism // max_parallelism


def check_parallelism(parallelism: int, max_parallelism: int) -> None:
    problems = limits.parallelism_problems(parallelism, max_parallelism)
    if problems:
        raise InvalidArgumentError(problems[0])


def default_max_parallelism(parallelism: int) -> int:
    x = parallelism + parallelism // 2
    p2 = 1
    while p2 < x:
        p2 <<= 1
    return min(max(p2, DEFAULT_LOWER_BOUND_MAX_PARALLELISM), UPPER_BOUND_MAX_PARALLELISM)


# ---------------------------------------------------------------------------------------------
# Java hashCode of boxed values


def hash_string(s: str) -> int:
    """Java's ``String.hashCode``: over the UTF-16 code units (a lone surrogate is one unit)."""
    h = 0
    if s.isascii():
        for c in s.encode("ascii"):
            h = (31 * h + c) & _M32
    else:
        raw = s.encode("utf-16-be", "surrogatepass")
        for (u,) in struct.iter_unpack(">H", raw):
            h = (31 * h + u) & _M32
    return to_int32(h)


hash_string_py = hash_string
key_group_for_hash_py = key_group_for_hash
if speedups is not None and not pure_python_forced():
    hash_string = speedups.java_string_hash  # noqa: F811
    key_group_for_hash = speedups.key_group  # noqa: F811


def hash_long(v: int) -> int:
    v &= _M64
    return to_int32(v ^ (v >> 32))


def hash_int(v: int) -> int:
    return to_int32(v)


def hash_bool(v: bool) -> int:
    return 1231 if v else 1237


def hash_double(v: float) -> int:
    if v != v:
        bits = 0x7FF8000000000000
    else:
        bits = struct.unpack(">q", struct.pack(">d", v))[0]
    return hash_long(bits)


def hash_float(v: float) -> int:
    if v != v:
        return 0x7FC00000
    return struct.unpack(">i", struct.pack(">f", v))[0]


def hash_char(v: str) -> int:
    return ord(v)


# ---------------------------------------------------------------------------------------------
# OperatorID from a uid: MurmurHash3 x64 128, seed 0, over the UTF-8 bytes


def _rotl64(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & _M64


def _fmix64(k: int) -> int:
    k ^= k >> 33
    k = (k * 0xFF51AFD7ED558CCD) & _M64
    k ^= k >> 33
    k = (k * 0xC4CEB9FE1A85EC53) & _M64
    k ^= k >> 33
    return k


def murmur3_x64_128(data: bytes, seed: int = 0) -> bytes:
    c1, c2 = 0x87C37B91114253D5, 0x4CF5AD432745937F
    h1 = h2 = seed & _M64
    n = len(data)
    nblocks = n // 16
    for i in range(nblocks):
        k1, k2 = struct.unpack_from("<QQ", data, i * 16)
        k1 = (k1 * c1) & _M64
        k1 = _rotl64(k1, 31)
        k1 = (k1 * c2) & _M64
        h1 ^= k1
        h1 = _rotl64(h1, 27)
        h1 = (h1 + h2) & _M64
        h1 = (h1 * 5 + 0x52DCE729) & _M64
        k2 = (k2 * c2) & _M64
        k2 = _rotl64(k2, 33)
        k2 = (k2 * c1) & _M64
        h2 ^= k2
        h2 = _rotl64(h2, 31)
        h2 = (h2 + h1) & _M64
        h2 = (h2 * 5 + 0x38495AB5) & _M64
    tail = data[nblocks * 16:]
    k1 = k2 = 0
    for i in range(len(tail) - 1, 7, -1):
        k2 ^= tail[i] << ((i - 8) * 8)
    if len(tail) > 8:
        k2 = (k2 * c2) & _M64
        k2 = _rotl64(k2, 33)
        k2 = (k2 * c1) & _M64
        h2 ^= k2
    for i in range(min(len(tail), 8) - 1, -1, -1):
        k1 ^= tail[i] << (i * 8)
    if tail:
        k1 = (k1 * c1) & _M64
        k1 = _rotl64(k1, 31)
        k1 = (k1 * c2) & _M64
        h1 ^= k1
    h1 ^= n
    h2 ^= n
    h1 = (h1 + h2) & _M64
    h2 = (h2 + h1) & _M64
    h1 = _fmix64(h1)
    h2 = _fmix64(h2)
    h1 = (h1 + h2) & _M64
    h2 = (h2 + h1) & _M64
    return struct.pack("<QQ", h1, h2)


def operator_id_for_uid(uid: str) -> bytes:
    """The 16-byte OperatorID Flink derives from ``.uid(uid)`` (``StreamGraphHasherV2``)."""
    return murmur3_x64_128(uid.encode("utf-8"), 0)


def parse_operator_id(text: str) -> bytes | None:
    """A 32-hex-digit uid hash → 16 bytes, or None if ``text`` is not one."""
    t = text.strip().lower()
    if len(t) == 32:
        try:
            return bytes.fromhex(t)
        except ValueError:
            return None
    return None
