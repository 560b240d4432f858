import pytest
from hypothesis import given, strategies as st

from fstate.savepoint.binary import (DataInput, DataOutput, decode_mutf8, encode_mutf8, read_flink_string,
                                     write_flink_string)
from fstate.savepoint.errors import CorruptStateError


def test_modified_utf8_matches_java():
    # NUL as C0 80, the emoji as two 3-byte surrogates (Java's writeUTF)
    assert encode_mutf8("a\0é中😀") == bytes.fromhex("61c080c3a9e4b8adeda0bdedb880")
    assert decode_mutf8(bytes.fromhex("61c080c3a9e4b8adeda0bdedb880")) == "a\0é中😀"


@given(st.text())
def test_modified_utf8_roundtrip(s):
    assert decode_mutf8(encode_mutf8(s)) == s


@pytest.mark.parametrize("value,hexbytes", [
    ("", "01"), (None, "00"), ("é", "02e901"), ("ß", "02df01"), ("中", "02ad9c01"), ("☃", "02834c"),
    ("😀", "03bdb00380bc03"), ("acct-51", "08616363742d3531"), ("p7-éß中", "0770372de901df01ad9c01"),
])
def test_flink_string_examples(value, hexbytes):
    out = bytearray()
    write_flink_string(out, value)
    assert out.hex() == hexbytes
    assert read_flink_string(bytes.fromhex(hexbytes), 0) == (value, len(out))


def test_flink_string_long_length_varint():
    out = bytearray()
    write_flink_string(out, "x" * 200)
    assert out[:2] == b"\xc9\x01"
    assert read_flink_string(bytes(out), 0) == ("x" * 200, len(out))


@given(st.one_of(st.none(), st.text()))
def test_flink_string_roundtrip(s):
    out = bytearray()
    write_flink_string(out, s)
    assert read_flink_string(bytes(out), 0) == (s, len(out))


def test_data_input_truncation_names_source():
    inp = DataInput(b"\x00\x01", source="somefile")
    with pytest.raises(CorruptStateError, match="somefile.*truncated"):
        inp.read_i32()


def test_data_input_counts_are_bounded():
    out = DataOutput()
    out.write_i32(1 << 30)
    inp = DataInput(out.getvalue(), source="f")
    with pytest.raises(CorruptStateError, match="does not fit"):
        inp.read_count("element", unit_size=8)


def test_utf_too_long_is_refused():
    with pytest.raises(ValueError):
        DataOutput().write_utf("x" * 70000)
