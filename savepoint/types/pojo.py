"""Types bound to a user class: POJO and Enum, and the LinkedOptionalMap framing of POJO snapshots."""

from __future__ import annotations

from typing import Any, Callable

from ..binary import DataOutput
from ..errors import UnsupportedSerializerError
from .base import BASE, I32, RUNTIME, U16, Decoder, Encoder, TypeInfo, as_fields


class PojoType(TypeInfo):
    snapshot_class = RUNTIME + "PojoSerializerSnapshot"
    snapshot_version = 2

    def __init__(self, class_name: str, fields: list[tuple[str, str, TypeInfo | None]],
                 registered: list[tuple[str, TypeInfo | None]] | None = None,
                 nonregistered: list[tuple[str, TypeInfo | None]] | None = None):
        #: (field name, declaring class, type or None when the field's class is gone)
        self.class_name = class_name
        self.fields = list(fields)
        self.registered = list(registered or [])
        self.nonregistered = list(nonregistered or [])
        self.children = tuple(t for _, _, t in self.fields if t is not None)
        self.decodable = all(t is not None for _, _, t in self.fields)

    @property
    def field_names(self) -> tuple[str, ...]:
        return tuple(n for n, _, _ in self.fields)

    @property
    def name(self) -> str:
        return self.class_name.rsplit(".", 1)[-1]

    def _key(self) -> tuple:
        return (self.class_name, tuple((n, d, t) for n, d, t in self.fields))

    def _write_payload(self, out: DataOutput) -> None:
        out.write_utf(self.class_name)
        _write_optional_map(out, [
            (n, _frame(lambda o, d=d, n=n: (o.write_utf(d), o.write_utf(n))),
             _frame(lambda o, t=t: t.write_snapshot(o))) for n, d, t in self.fields])
        for group in (self.registered, self.nonregistered):
            _write_optional_map(out, [(n, b"", _frame(lambda o, t=t: t.write_snapshot(o))) for n, t in group])

    def decoder(self) -> Decoder:
        if not self.decodable:
            return super().decoder()
        decs = [t.decoder() for _, _, t in self.fields]
        registered = self.registered
        nonregistered = {n: t for n, t in self.nonregistered}
        cls = self.class_name

        def dec(buf, pos):
            flags = buf[pos]
            pos += 1
            if flags & 1:
                return None, pos
            if flags & 2:
                vals = []
                for d in decs:
                    if buf[pos]:
                        vals.append(None)
                        pos += 1
                    else:
                        v, pos = d(buf, pos + 1)
                        vals.append(v)
                return tuple(vals), pos
            if flags & 4:
                n = U16.unpack_from(buf, pos)[0]
                sub = bytes(buf[pos + 2:pos + 2 + n]).decode("utf-8", "replace")
                t = nonregistered.get(sub)
                if t is None:
                    raise UnsupportedSerializerError(
                        f"a {cls} value is an instance of subclass {sub}, whose serializer is not in the snapshot")
                return t.decoder()(buf, pos + 2 + n)
            if flags & 8:
                tag = buf[pos]
                if tag >= len(registered) or registered[tag][1] is None:
                    raise UnsupportedSerializerError(f"a {cls} value has unknown registered-subclass tag {tag}")
                return registered[tag][1].decoder()(buf, pos + 1)
            raise ValueError(f"invalid POJO flags {flags}")

        return dec

    def encoder(self) -> Encoder:
        if not self.decodable:
            return super().encoder()
        encs = [t.encoder() for _, _, t in self.fields]
        names = self.field_names

        def enc(out, v):
            if v is None:
                out.append(1)
                return
            out.append(2)
            for e, x in zip(encs, as_fields(v, names), strict=True):
                if x is None:
                    out.append(1)
                else:
                    out.append(0)
                    e(out, x)

        return enc


class EnumType(TypeInfo):
    snapshot_class = BASE + "EnumSerializer$EnumSerializerSnapshot"
    length = 4

    def __init__(self, class_name: str, constants: tuple[str, ...]):
        self.class_name = class_name
        self.constants = tuple(constants)

    @property
    def name(self) -> str:
        return f"Enum<{self.class_name.rsplit('.', 1)[-1]}>"

    def _key(self) -> tuple:
        return (self.class_name, self.constants)

    def _write_payload(self, out: DataOutput) -> None:
        out.write_utf(self.class_name)
        out.write_i32(len(self.constants))
        for c in self.constants:
            out.write_utf(c)

    def decoder(self) -> Decoder:
        consts = self.constants

        def dec(buf, pos):
            i = I32.unpack_from(buf, pos)[0]
            if not 0 <= i < len(consts):
                raise ValueError(f"enum ordinal {i} out of range")
            return consts[i], pos + 4

        return dec

    def encoder(self) -> Encoder:
        index = {c: i for i, c in enumerate(self.constants)}

        def enc(out, v):
            out += I32.pack(index[v])

        return enc

# ---------------------------------------------------------------------------------------------
# LinkedOptionalMap framing (POJO / Kryo snapshots)

OPTIONAL_MAP_HEADER = 0x000004F2C69A3D70


def _frame(write: Callable[[DataOutput], Any]) -> bytes:
    o = DataOutput()
    write(o)
    return o.getvalue()


def _write_optional_map(out: DataOutput, entries: list[tuple[str, bytes | None, bytes | None]]) -> None:
    out.write_i64(OPTIONAL_MAP_HEADER)
    out.write_i32(len(entries))
    for name, key_frame, value_frame in entries:
        out.write_utf(name)
        for frame in (key_frame, value_frame):
            if frame is None:
                out.write_bool(False)
            else:
                out.write_bool(True)
                out.write_i32(len(frame))
                out.write_bytes(frame)
