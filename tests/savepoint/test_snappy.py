import pyarrow as pa
import pytest
from hypothesis import given, settings, strategies as st

from fstate.savepoint.compression import (STREAM_IDENTIFIER, decompress_framed, frame_chunks, masked_crc32c,
                                          snappy_decompress_py)
from fstate.savepoint.errors import CorruptStateError


@given(st.binary(max_size=5000) | st.text(max_size=3000).map(lambda s: (s * 3).encode()))
@settings(max_examples=60)
def test_pure_python_snappy_matches_arrow(data):
    block = pa.compress(data, codec="snappy", asbytes=True)
    assert snappy_decompress_py(block) == data


def test_crc32c_known_value():
    # CRC-32C of "123456789" is 0xE3069283
    from fstate.savepoint.compression import crc32c
    assert crc32c(b"123456789") == 0xE3069283
    assert masked_crc32c(b"") == 0xA282EAD8


def test_framed_stream_stops_at_next_identifier():
    a = frame_chunks(b"hello " * 20000)
    b = frame_chunks(b"next stream")
    data, positions = decompress_framed(a + b, 0)
    assert data == b"hello " * 20000
    assert list(positions) == [len(STREAM_IDENTIFIER), len(STREAM_IDENTIFIER) + 4 + 4 + 65536]
    data2, _ = decompress_framed(a + b, len(a))
    assert data2 == b"next stream"


def test_corrupt_chunk_is_reported():
    a = bytearray(frame_chunks(b"x" * 100))
    a[11] = 0xFF  # chunk length runs past the end
    with pytest.raises(CorruptStateError):
        decompress_framed(bytes(a), 0, source="s")
