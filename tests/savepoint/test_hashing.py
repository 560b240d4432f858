import pytest

from fstate.savepoint.types import hashing as h
from fstate.savepoint.types import INT, STRING, TupleType


@pytest.mark.parametrize("uid,hexid", [
    ("hid-accounts", "ffdd6ec5ac04fb3d4d2017421610da81"),
    ("", "00000000000000000000000000000000"),
    ("x", "e7fe1aba01e8166d8c78ae6b966dedd7"),
    ("ünïcödé-uid-☃-😀", "d7a2c8f60973168fd564e7a1abe813bc"),
    ("hid-source", "a92ae8f88f484cae824e2b0e203af4c4"),
    ("bench-keyed", "6a3f74aee1d05b33e2f6118ea948d6f4"),
])
def test_operator_id_from_uid(uid, hexid):
    assert h.operator_id_for_uid(uid).hex() == hexid


def test_murmur3_128_block_boundaries_are_stable():
    # 16 and 48 byte inputs exercise the full-block loop; outputs must be 16 bytes and distinct
    ids = {h.operator_id_for_uid("a" * n).hex() for n in (15, 16, 17, 31, 32, 33, 48)}
    assert len(ids) == 7


@pytest.mark.parametrize("key,hashcode,kg", [("acct-0", -1423448842, 42), ("acct-1", -1423448841, 50),
                                              ("acct-10", -1177241063, 35)])
def test_string_key_groups(key, hashcode, kg):
    assert h.hash_string(key) == hashcode
    assert h.key_group_for_hash(hashcode, 96) == kg


def test_java_hash_codes():
    assert h.hash_long(1) == 1
    assert h.hash_long(-1) == 0
    assert h.hash_long(1 << 32) == 1
    assert h.hash_bool(True) == 1231 and h.hash_bool(False) == 1237
    assert h.hash_double(0.0) == 0
    assert h.hash_double(-0.0) != h.hash_double(0.0)
    assert h.hash_double(1.0) == 1072693248
    assert h.hash_float(1.0) == 1065353216
    assert h.hash_string("😀") == 0xD83D * 31 + 0xDE00
    assert TupleType((INT, STRING)).java_hash((1, "x")) == 151


@pytest.mark.parametrize("m,p,ranges", [
    (96, 2, [(0, 47), (48, 95)]), (128, 2, [(0, 63), (64, 127)]), (128, 3, [(0, 42), (43, 85), (86, 127)]),
    (10, 4, [(0, 2), (3, 4), (5, 7), (8, 9)]),
])
def test_key_group_ranges(m, p, ranges):
    assert [h.key_group_range(i, p, m) for i in range(p)] == ranges
    for i, (lo, hi) in enumerate(ranges):
        assert all(h.operator_index_for_key_group(kg, p, m) == i for kg in range(lo, hi + 1))


@pytest.mark.parametrize("p,m", [(1, 128), (2, 128), (3, 128), (85, 128), (86, 256), (100, 256), (1000, 2048),
                                 (30000, 32768)])
def test_default_max_parallelism(p, m):
    assert h.default_max_parallelism(p) == m


def test_murmur_never_negative():
    for code in (0, 1, -1, 2**31 - 1, -(2**31), 123456789, -987654321):
        assert h.murmur_hash(code) >= 0
