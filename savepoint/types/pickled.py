"""fstate's pickle serializer (with its pickle safety) and opaque types (values read as raw bytes)."""

from __future__ import annotations

import contextlib
import contextvars
import io
import pickle
import zlib
from typing import Any

from ..binary import DataOutput
from . import hashing
from .base import I32, Decoder, Encoder, TypeInfo, read_count


class OpaquePickle(bytes):
    """The raw pickle bytes of a :class:`PickledType` value fstate would not unpickle (see there)."""

    def __repr__(self) -> str:
        return f"OpaquePickle({len(self)} bytes)"


#: Classes a pickled value may reference and still be decoded outside the runtime: plain data only.
_SAFE_PICKLE_GLOBALS = {
    ("builtins", n) for n in ("set", "frozenset", "complex", "bytearray", "range", "slice")
} | {("datetime", n) for n in ("datetime", "date", "time", "timedelta", "timezone")} | {
    ("decimal", "Decimal"), ("collections", "OrderedDict"), ("collections", "deque"), ("uuid", "UUID"),
    ("fractions", "Fraction"),
}
_PICKLE_TRUST: contextvars.ContextVar[bool] = contextvars.ContextVar("fstate_pickle_trust", default=False)


class _DataOnlyUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        if (module, name) in _SAFE_PICKLE_GLOBALS:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"{module}.{name} is not plain data")


def _loads_data_only(raw: bytes):
    try:
        return _DataOnlyUnpickler(io.BytesIO(raw)).load()
    except Exception:
        return OpaquePickle(raw)


@contextlib.contextmanager
def trusted_pickles():
    """Decoders built inside this block unpickle any class (the runtime reading its own state)."""
    token = _PICKLE_TRUST.set(True)
    try:
        yield
    finally:
        _PICKLE_TRUST.reset(token)


class PickledType(TypeInfo):
    """fstate's own serializer for Python values Flink has no serializer for: each value is an
    i32 length and the pickle bytes (protocol 4). Written by fstate's runtime; the snapshot class
    ``fstate.runtime.PickleSerializerSnapshot`` is not a Flink class, so Flink refuses such state.

    fstate never runs code from a file it reads: outside :func:`trusted_pickles` only plain data
    (builtins, datetime, Decimal, ...) is unpickled, anything else comes back as an OpaquePickle.
    Keys of this type are placed in key groups by a CRC-32 of their pickle bytes (not Java's
    hashCode: Flink never sees these keys).
    """

    snapshot_class = "fstate.runtime.PickleSerializerSnapshot"
    snapshot_version = 1
    PROTOCOL = 4

    @property
    def name(self) -> str:
        return "Pickled"

    def _key(self) -> tuple:
        return (self.snapshot_class,)

    def _write_payload(self, out: DataOutput) -> None:
        out.write_i32(self.PROTOCOL)

    def decoder(self) -> Decoder:
        loads = pickle.loads if _PICKLE_TRUST.get() else _loads_data_only

        def dec(buf, pos):
            n, pos = read_count(buf, pos, "pickled value length")
            end = pos + n
            return loads(bytes(buf[pos:end])), end

        return dec

    def encoder(self) -> Encoder:
        dumps = pickle.dumps
        proto = self.PROTOCOL

        def enc(out, v):
            raw = bytes(v) if isinstance(v, OpaquePickle) else dumps(v, protocol=proto)
            out += I32.pack(len(raw))
            out += raw

        return enc

    def java_hash(self, value: Any) -> int:
        raw = bytes(value) if isinstance(value, OpaquePickle) else pickle.dumps(value, protocol=self.PROTOCOL)
        return hashing.to_int32(zlib.crc32(raw))


PICKLED = PickledType()


class OpaqueType(TypeInfo):
    """A serializer whose value bytes fstate cannot interpret (Kryo, Avro, custom): raw bytes."""

    decodable = False

    def __init__(self, snapshot_class: str, version: int, payload: bytes, type_class: str | None = None,
                 reason: str = ""):
        self.snapshot_class = snapshot_class
        self.snapshot_version = version
        self.payload = payload
        self.type_class = type_class
        self.reason = reason

    @property
    def name(self) -> str:
        kind = self.snapshot_class.rsplit(".", 1)[-1].split("$")[0].replace("SerializerSnapshot", "")
        return f"{kind}<{self.type_class}>" if self.type_class else kind

    def _key(self) -> tuple:
        return (self.snapshot_class, self.snapshot_version, self.payload)

    def _write_payload(self, out: DataOutput) -> None:
        out.write_bytes(self.payload)

