import os
import subprocess
import sys

import pytest
from hypothesis import given, strategies as st

from fstate.savepoint import _compiled
from fstate.savepoint.types import hashing as h
from fstate.savepoint.types import INT, STRING, TupleType

speedups = _compiled.speedups
needs_c = pytest.mark.skipif(speedups is None, reason="fstate.savepoint._speedups is not built")


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


# ---------------------------------------------------------------------------------------------
# hash_string and key_group_for_hash: the compiled twins (_speedups_hash.h) against the Python reference

INT_MIN, INT_MAX = -(2**31), 2**31 - 1

# code points of every width CPython stores (1, 2 and 4 bytes), lone surrogates and surrogate pairs
# stored as two code points included: the UTF-16 units Java would hash are Python's "surrogatepass"
_code_points = st.one_of(st.integers(0, 0x7F), st.integers(0x80, 0xFF), st.integers(0x100, 0xD7FF),
                         st.integers(0xD800, 0xDFFF), st.integers(0xE000, 0xFFFF), st.integers(0x10000, 0x10FFFF))
_texts = st.one_of(st.lists(_code_points, max_size=64).map(lambda cps: "".join(map(chr, cps))),
                   st.text(max_size=2000))


@pytest.mark.parametrize("text,hashcode", [
    ("hello", 99162322), ("", 0), ("Aa", 2112), ("BB", 2112), ("polygenelubricants", INT_MIN),
    ("acct-0", -1423448842), ("😀", 0xD83D * 31 + 0xDE00), ("\ud83d\ude00", 0xD83D * 31 + 0xDE00),
    ("\udc00", 0xDC00), ("é", 0xE9), ("€", 0x20AC),
])
def test_string_hash_java_values(text, hashcode):
    """String.hashCode as Java computes it (a surrogate pair is two units, stored split or not)."""
    assert h.hash_string_py(text) == hashcode
    assert h.hash_string(text) == hashcode
    assert STRING.java_hash(text) == hashcode


def test_the_choice_made_at_import():
    if speedups is None or _compiled.pure_python_forced():
        assert (h.hash_string, h.key_group_for_hash) == (h.hash_string_py, h.key_group_for_hash_py)
    else:
        assert (h.hash_string, h.key_group_for_hash) == (speedups.java_string_hash, speedups.key_group)


@pytest.mark.parametrize("env", ["1", "0"])
def test_pure_python_env_chooses_the_reference(env):
    code = ("from fstate.savepoint.types import hashing as h, STRING; "
            "print(h.hash_string is h.hash_string_py, h.key_group_for_hash is h.key_group_for_hash_py, "
            "STRING.java_hash('hello'))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "FSTATE_PURE_PYTHON": env})
    python = env == "1" or speedups is None
    assert res.stdout.split() == [str(python), str(python), "99162322"]


@needs_c
@given(_texts)
def test_compiled_string_hash_agrees(text):
    assert speedups.java_string_hash(text) == h.hash_string_py(text)


@needs_c
@pytest.mark.parametrize("unit", ["a", "\xff", "\u20ac", "\udbff", "\U0010ffff"])
def test_compiled_string_hash_agrees_on_long_strings(unit):
    text = (unit + "k") * 50_000
    assert speedups.java_string_hash(text) == h.hash_string_py(text)


@needs_c
@given(st.one_of(st.integers(INT_MIN, INT_MAX), st.integers(), st.sampled_from([INT_MIN, INT_MAX, -1, 0, 1])),
       st.integers(1, h.UPPER_BOUND_MAX_PARALLELISM))
def test_compiled_key_group_agrees(java_hash, max_parallelism):
    kg = speedups.key_group(java_hash, max_parallelism)
    assert kg == h.key_group_for_hash_py(java_hash, max_parallelism)
    assert 0 <= kg < max_parallelism


@needs_c
@pytest.mark.parametrize("java_hash,max_parallelism", [
    (INT_MIN, 128), (INT_MAX, 32768), (5, -7), (5, 2**70), (-5, -(2**70)), (True, 3), (7, 3.0),
])
def test_compiled_key_group_agrees_outside_the_usual_range(java_hash, max_parallelism):
    """Odd max parallelisms go through Python's own %: the same result as the reference."""
    want = h.key_group_for_hash_py(java_hash, max_parallelism)
    got = speedups.key_group(java_hash, max_parallelism)
    assert got == want and type(got) is type(want)


@needs_c
def test_compiled_functions_reject_what_the_reference_rejects():
    with pytest.raises(ZeroDivisionError):
        h.key_group_for_hash_py(1, 0)
    with pytest.raises(ZeroDivisionError):
        speedups.key_group(1, 0)
    for bad in (1.5, "1", None):
        with pytest.raises(TypeError):
            h.key_group_for_hash_py(bad, 128)
        with pytest.raises(TypeError):
            speedups.key_group(bad, 128)
    with pytest.raises(TypeError):
        speedups.key_group(1)
    with pytest.raises(TypeError):
        speedups.java_string_hash(b"bytes")
