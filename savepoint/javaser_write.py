"""A small writer of Java object serialization streams (the inverse of :mod:`.javaser`).

It writes what ``java.io.ObjectOutputStream.writeObject`` writes for a graph of plain objects:
class descriptors (shared by back-reference after their first use), objects with their fields
(the fields of the top class first, as the stream grammar orders them), enum constants, ``Class``
objects, strings, ``java.util.ArrayList`` (a class with ``writeObject``: its ``size`` field, then a
block with the capacity and the elements) and nulls. The objects to write are described by
:class:`JavaClass` / :class:`JavaObject` / :class:`JavaEnum` / :class:`JavaClassObject` /
:class:`JavaList`; what a class descriptor holds (serialVersionUID, flags, fields) is given by the
caller (see :mod:`.types.logical_java` for Flink's LogicalTypes).

Sharing follows Java's: one handle per class descriptor, enum constant (a singleton), ``Class``
object and object instance; a field's type signature string is shared (Java interns them); other
strings (values) are new objects unless the same :class:`JavaString` instance is written twice.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .binary import DataOutput
from .javaser import (BASE_HANDLE, SC_ENUM_FLAGS, SC_SERIALIZABLE, SC_WRITE_METHOD, STREAM_MAGIC, TC_BLOCKDATA,
                      TC_CLASS, TC_CLASSDESC, TC_ENDBLOCKDATA, TC_ENUM, TC_NULL, TC_OBJECT, TC_REFERENCE, TC_STRING)

_PRIMITIVE_CODES = "BCDFIJSZ"


@dataclass(frozen=True)
class JavaClass:
    """A class descriptor: ``fields`` are (type code, name, signature or None) in the stream's order
    (primitives first, then objects, each sorted by name, as ``ObjectStreamClass`` sorts them)."""

    name: str
    uid: int
    flags: int = SC_SERIALIZABLE
    fields: tuple[tuple[str, str, str | None], ...] = ()
    super: "JavaClass | None" = None

    def chain(self) -> list["JavaClass"]:
        """This class and its serializable superclasses, the topmost first."""
        out, c = [], self
        while c is not None:
            out.append(c)
            c = c.super
        return out[::-1]


def enum_class(name: str) -> JavaClass:
    """The descriptor of an enum class (serialVersionUID 0, enum flags, over java.lang.Enum)."""
    return JavaClass(name, 0, SC_ENUM_FLAGS, (), JAVA_ENUM)


JAVA_ENUM = JavaClass("java.lang.Enum", 0, SC_ENUM_FLAGS)


@dataclass(eq=False)
class JavaObject:
    """An instance: ``values`` by field name over the whole class chain (identity, not value, decides
    sharing: the same instance written twice is a back-reference)."""

    cls: JavaClass
    values: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class JavaEnum:
    cls: JavaClass
    constant: str


@dataclass(frozen=True)
class JavaClassObject:
    """A ``java.lang.Class`` value (written as its class descriptor)."""

    cls: JavaClass


@dataclass(eq=False)
class JavaList:
    """A ``java.util.ArrayList`` of the given items."""

    items: list


@dataclass(eq=False)
class JavaString:
    """A string instance whose identity matters (written once, then referenced)."""

    text: str


ARRAY_LIST = JavaClass("java.util.ArrayList", 0x7881D21D99C7619D, SC_SERIALIZABLE | SC_WRITE_METHOD,
                       (("I", "size", None),))


class _Writer:
    def __init__(self):
        self.out = DataOutput()
        self.handles: dict[Any, int] = {}

    def _handle(self, key: Any) -> None:
        self.handles[key] = len(self.handles)

    def _reference(self, key: Any) -> bool:
        h = self.handles.get(key)
        if h is None:
            return False
        self.out.write_u8(TC_REFERENCE)
        self.out.write_i32(BASE_HANDLE + h)
        return True

    def string(self, text: str, key: Any = None) -> None:
        if key is not None and self._reference(key):
            return
        self.out.write_u8(TC_STRING)
        self.out.write_utf(text)
        self._handle(key if key is not None else object())

    def class_desc(self, cls: JavaClass | None) -> None:
        if cls is None:
            self.out.write_u8(TC_NULL)
            return
        if self._reference(("class", cls.name)):
            return
        self.out.write_u8(TC_CLASSDESC)
        self.out.write_utf(cls.name)
        self.out.write_i64(cls.uid if cls.uid < 1 << 63 else cls.uid - (1 << 64))
        self._handle(("class", cls.name))
        self.out.write_u8(cls.flags)
        self.out.write_u16(len(cls.fields))
        for code, name, signature in cls.fields:
            self.out.write_u8(ord(code))
            self.out.write_utf(name)
            if code not in _PRIMITIVE_CODES:
                self.string(signature, ("signature", signature))
        self.out.write_u8(TC_ENDBLOCKDATA)  # no class annotation
        self.class_desc(cls.super)

    def value(self, v: Any) -> None:
        if v is None:
            self.out.write_u8(TC_NULL)
        elif isinstance(v, str):
            self.string(v)
        elif isinstance(v, JavaString):
            self.string(v.text, ("string", id(v)))
        elif isinstance(v, JavaEnum):
            key = ("enum", v.cls.name, v.constant)
            if self._reference(key):
                return
            self.out.write_u8(TC_ENUM)
            self.class_desc(v.cls)
            self._handle(key)
            self.string(v.constant)
        elif isinstance(v, JavaClassObject):
            key = ("class object", v.cls.name)
            if self._reference(key):
                return
            self.out.write_u8(TC_CLASS)
            self.class_desc(v.cls)
            self._handle(key)
        elif isinstance(v, JavaList):
            self._object(v, ARRAY_LIST, {"size": len(v.items)})
        elif isinstance(v, JavaObject):
            self._object(v, v.cls, v.values)
        else:
            raise TypeError(f"cannot Java-serialize {type(v).__name__}")

    def _object(self, instance: Any, cls: JavaClass, values: dict) -> None:
        key = ("object", id(instance))
        if self._reference(key):
            return
        self.out.write_u8(TC_OBJECT)
        self.class_desc(cls)
        self._handle(key)
        for c in cls.chain():
            for code, name, _ in c.fields:
                self._field(code, values[name])
            if c.flags & SC_WRITE_METHOD:
                if c is not ARRAY_LIST:
                    raise TypeError(f"{c.name} writes itself: not supported")
                self.out.write_u8(TC_BLOCKDATA)
                self.out.write_u8(4)
                self.out.write_i32(len(instance.items))  # the capacity ArrayList.writeObject writes
                for item in instance.items:
                    self.value(item)
                self.out.write_u8(TC_ENDBLOCKDATA)

    def _field(self, code: str, v: Any) -> None:
        out = self.out
        if code == "Z":
            out.write_bool(bool(v))
        elif code == "I":
            out.write_i32(v)
        elif code == "J":
            out.write_i64(v)
        elif code == "B":
            out.write_u8(v & 0xFF)
        elif code == "S":
            out.write_i16(v)
        elif code in "[L":
            self.value(v)
        else:
            raise TypeError(f"field type code {code} not supported")


def write_java_object(obj: Any) -> bytes:
    """One complete Java serialization stream (magic, version 5, the object)."""
    w = _Writer()
    w.out.write_u16(STREAM_MAGIC)
    w.out.write_u16(5)
    w.value(obj)
    return bytes(w.out.getvalue())
