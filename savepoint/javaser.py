"""A small reader for Java object serialization streams.

Metadata V4+ ends with a Java-serialized ``CheckpointProperties`` object (what kind of snapshot this
is: canonical/native savepoint or checkpoint). This reads the subset of the grammar such streams use
(objects, class descriptors, strings, enums, references, nulls, primitive fields, block data) into
plain Python values: objects become dicts with a ``"@class"`` entry, enums their constant name.
What a class writes itself (``writeObject``) is kept under ``"@written"`` (the block data and objects
in order); a ``java.util.ArrayList``'s elements are under ``"@items"``.
"""

from __future__ import annotations

from .binary import DataInput

STREAM_MAGIC = 0xACED
BASE_HANDLE = 0x7E0000

TC_NULL = 0x70
TC_REFERENCE = 0x71
TC_CLASSDESC = 0x72
TC_OBJECT = 0x73
TC_STRING = 0x74
TC_ARRAY = 0x75
TC_CLASS = 0x76
TC_BLOCKDATA = 0x77
TC_ENDBLOCKDATA = 0x78
TC_RESET = 0x79
TC_BLOCKDATALONG = 0x7A
TC_LONGSTRING = 0x7C
TC_ENUM = 0x7E

SC_WRITE_METHOD = 0x01
SC_SERIALIZABLE = 0x02
SC_EXTERNALIZABLE = 0x04
SC_BLOCK_DATA = 0x08
SC_ENUM = 0x10
#: the flags of an enum class's descriptor
SC_ENUM_FLAGS = SC_ENUM | SC_SERIALIZABLE

_MAX_DEPTH = 64


class _ClassDesc:
    __slots__ = ("name", "flags", "fields", "super")

    def __init__(self, name: str, flags: int, fields: list[tuple[str, str, str | None]], sup):
        self.name = name
        self.flags = flags
        self.fields = fields
        self.super = sup


class _Parser:
    def __init__(self, inp: DataInput):
        self.inp = inp
        self.handles: list = []
        self.depth = 0

    def _new_handle(self, value) -> int:
        self.handles.append(value)
        return len(self.handles) - 1

    def _ref(self):
        h = self.inp.read_i32() - BASE_HANDLE
        if not 0 <= h < len(self.handles):
            raise self.inp.fail(f"invalid Java serialization back-reference {h}")
        return self.handles[h]

    def content(self):
        self.depth += 1
        if self.depth > _MAX_DEPTH:
            raise self.inp.fail("Java serialization nesting too deep")
        try:
            tc = self.inp.read_u8()
            if tc == TC_NULL:
                return None
            if tc == TC_REFERENCE:
                return self._ref()
            if tc == TC_STRING:
                s = self.inp.read_utf()
                self._new_handle(s)
                return s
            if tc == TC_LONGSTRING:
                n = self.inp.read_i64()
                if n < 0 or n > self.inp.remaining():
                    raise self.inp.fail("invalid long string length")
                s = self.inp.read_bytes(n).decode("utf-8", "replace")
                self._new_handle(s)
                return s
            if tc == TC_CLASSDESC:
                self.inp.pos -= 1
                return self.class_desc()
            if tc == TC_ENUM:
                self.class_desc()
                idx = self._new_handle(None)
                name = self.content()
                self.handles[idx] = name
                return name
            if tc == TC_OBJECT:
                return self.obj()
            if tc in (TC_BLOCKDATA, TC_BLOCKDATALONG):
                n = self.inp.read_u8() if tc == TC_BLOCKDATA else self.inp.read_i32()
                return self.inp.read_bytes(n)
            if tc == TC_CLASS:
                desc = self.class_desc()
                self._new_handle(desc)
                return {"@class": "java.lang.Class", "name": desc.name if desc else None}
            if tc == TC_ARRAY:
                return self.array()
            raise self.inp.fail(f"unsupported Java serialization type code 0x{tc:02x}")
        finally:
            self.depth -= 1

    def class_desc(self) -> _ClassDesc | None:
        tc = self.inp.read_u8()
        if tc == TC_NULL:
            return None
        if tc == TC_REFERENCE:
            return self._ref()
        if tc != TC_CLASSDESC:
            raise self.inp.fail(f"expected a Java class descriptor, found type code 0x{tc:02x}")
        name = self.inp.read_utf()
        self.inp.read_i64()  # serialVersionUID
        idx = self._new_handle(None)
        flags = self.inp.read_u8()
        n = self.inp.read_u16()
        fields = []
        for _ in range(n):
            code = chr(self.inp.read_u8())
            fname = self.inp.read_utf()
            ftype = self.content() if code in "L[" else None
            fields.append((code, fname, ftype))
        self._skip_annotation()
        desc = _ClassDesc(name, flags, fields, None)
        self.handles[idx] = desc
        desc.super = self.class_desc()
        return desc

    def _skip_annotation(self) -> list:
        """Read up to the end of a class annotation or of what writeObject wrote; returns it."""
        written = []
        while True:
            if self.inp.buf[self.inp.pos] == TC_ENDBLOCKDATA:
                self.inp.pos += 1
                return written
            written.append(self.content())

    def _value(self, code: str):
        r = self.inp
        if code == "B":
            return r.read_i8()
        if code == "C":
            return chr(r.read_u16())
        if code == "D":
            return r.read_f64()
        if code == "F":
            return r.read_f32()
        if code == "I":
            return r.read_i32()
        if code == "J":
            return r.read_i64()
        if code == "S":
            return r.read_i16()
        if code == "Z":
            return r.read_bool()
        return self.content()

    def obj(self) -> dict:
        desc = self.class_desc()
        result: dict = {"@class": desc.name if desc else None}
        self._new_handle(result)
        chain = []
        d = desc
        while d is not None:
            chain.append(d)
            d = d.super
        for d in reversed(chain):
            if d.flags & SC_EXTERNALIZABLE:
                raise self.inp.fail(f"externalizable class {d.name} is not supported")
            for code, fname, _ in d.fields:
                result[fname] = self._value(code)
            if d.flags & SC_WRITE_METHOD:
                written = self._skip_annotation()
                if written:
                    result.setdefault("@written", []).extend(written)
                    if d.name == "java.util.ArrayList":
                        result["@items"] = [x for x in written if not isinstance(x, bytes)]
        return result

    def array(self) -> list:
        desc = self.class_desc()
        values: list = []
        self._new_handle(values)
        n = self.inp.read_count("array element")
        code = desc.name[1] if desc and len(desc.name) > 1 else "L"
        for _ in range(n):
            values.append(self._value(code))
        return values


def read_java_object(buf: bytes, pos: int = 0, source: str | None = None):
    """Parse one Java serialization stream at ``pos``; returns (value, end position)."""
    inp = DataInput(buf, pos, source=source)
    if inp.read_u16() != STREAM_MAGIC:
        raise inp.fail("not a Java serialization stream (bad magic)")
    version = inp.read_u16()
    if version != 5:
        raise inp.fail(f"unsupported Java serialization version {version}")
    value = _Parser(inp).content()
    return value, inp.pos
