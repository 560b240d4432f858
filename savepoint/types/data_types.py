"""Flink's ``DataType`` (a LogicalType with its conversion classes), written from scratch, and the
``ExternalSerializer`` built on it.

An ``ExternalSerializer`` snapshot (e.g. the key and value serializers of an aggregation's
``MapView`` / ``ListView`` state, such as the COUNT(DISTINCT) map ``distinctAcc_0``) holds a
Java-serialized ``org.apache.flink.table.types.DataType``. Facts of that serialization (checked byte for
byte against Flink 2.3 and 1.20 by tests/flink/test_sql_bootstrap_oracle.py):

* ``DataType`` (serialVersionUID ``0xc68ff3149e02836d``; fields ``conversionClass`` (a ``Class``) and
  ``logicalType``) has four subclasses: ``AtomicDataType`` (no fields), ``CollectionDataType``
  (``elementDataType``: ARRAY, MULTISET), ``KeyValueDataType`` (``keyDataType``, ``valueDataType``:
  MAP) and ``FieldsDataType`` (``fieldDataTypes``, a plain ``ArrayList``: ROW).
* a child DataType holds the very LogicalType object of its parent's type (a back-reference in the
  stream).
* the conversion class is written as a ``Class`` object, i.e. its class descriptor: the real one of
  serializable classes (``java.lang.Long`` with its ``value`` field over ``java.lang.Number``, ...),
  serialVersionUID 0 and no flags for interfaces and other non-serializable classes (``StringData``,
  ``RowData``, ``java.util.Map`` ...).

Conversion classes: :func:`default_data_type` gives Flink's default ones
(``TypeConversions.fromLogicalToDataType``: ``java.lang.Long``, ``java.lang.String``,
``java.time.LocalDateTime``, ``org.apache.flink.types.Row`` ...), :func:`internal_data_type` the
internal data structures (``DataTypeUtils.toInternalDataType``: ``StringData``, ``TimestampData``,
``RowData`` ...; what the distinct views of aggregations use for their keys), and ``bridged_to`` one
chosen conversion class for the top level.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import UnsupportedSerializerError
from ..javaser import SC_SERIALIZABLE, SC_WRITE_METHOD
from ..javaser_write import JavaClass, JavaClassObject, JavaList, JavaObject, write_java_object
from . import table
from .logical import LogicalType
from .logical_java import java_logical_object
from .table_serializers import table_serializer

_TYPES = "org.apache.flink.table.types."
_DATA = "org.apache.flink.table.data."
_DATA_TYPE_SIG = "L" + (_TYPES + "DataType").replace(".", "/") + ";"
_DATA_TYPE = JavaClass(_TYPES + "DataType", 0xC68FF3149E02836D, SC_SERIALIZABLE,
                       (("L", "conversionClass", "Ljava/lang/Class;"),
                        ("L", "logicalType", "Lorg/apache/flink/table/types/logical/LogicalType;")))
_ATOMIC = JavaClass(_TYPES + "AtomicDataType", 0x1A885329FA7A2332, SC_SERIALIZABLE, (), _DATA_TYPE)
_COLLECTION = JavaClass(_TYPES + "CollectionDataType", 0x2234D21DED6CA2B7, SC_SERIALIZABLE,
                        (("L", "elementDataType", _DATA_TYPE_SIG),), _DATA_TYPE)
_KEY_VALUE = JavaClass(_TYPES + "KeyValueDataType", 0x8E24C9B8CD3CA09E, SC_SERIALIZABLE,
                       (("L", "keyDataType", _DATA_TYPE_SIG), ("L", "valueDataType", _DATA_TYPE_SIG)), _DATA_TYPE)
_FIELDS = JavaClass(_TYPES + "FieldsDataType", 0xF4B0AC1CAD819F5F, SC_SERIALIZABLE,
                    (("L", "fieldDataTypes", "Ljava/util/List;"),), _DATA_TYPE)

_NUMBER = JavaClass("java.lang.Number", 0x86AC951D0B94E08B, SC_SERIALIZABLE)


def _boxed(name: str, uid: int, code: str, number: bool = True) -> JavaClass:
    return JavaClass("java.lang." + name, uid, SC_SERIALIZABLE, ((code, "value", None),), _NUMBER if number else None)


def _opaque(name: str) -> JavaClass:
    """An interface or non-serializable class: its ``Class`` object has an empty descriptor."""
    return JavaClass(name, 0, 0)


_LOCAL_DATE = JavaClass("java.time.LocalDate", 0x28D617B1D8F33F1E, SC_SERIALIZABLE,
                        (("S", "day", None), ("S", "month", None), ("I", "year", None)))
_LOCAL_TIME = JavaClass("java.time.LocalTime", 0x5904A8B626E1A4F1, SC_SERIALIZABLE,
                        (("B", "hour", None), ("B", "minute", None), ("I", "nano", None), ("B", "second", None)))

#: the descriptors of the conversion classes fstate writes (as ``Class`` objects)
CONVERSION_CLASSES: dict[str, JavaClass] = {c.name: c for c in (
    _boxed("Boolean", 0xCD207280D59CFAEE, "Z", number=False),
    _boxed("Byte", 0x9C4E6084EE50F51C, "B"),
    _boxed("Short", 0x684D37133460DA52, "S"),
    _boxed("Integer", 0x12E2A0A4F7818738, "I"),
    _boxed("Long", 0x3B8BE490CC8F23DF, "J"),
    _boxed("Float", 0xDAEDC9A2DB3CF0EC, "F"),
    _boxed("Double", 0x80B3C24A296BFB04, "D"),
    JavaClass("java.lang.String", 0xA0F0A4387A3BB342, SC_SERIALIZABLE),
    JavaClass("[B", 0xACF317F8060854E0, SC_SERIALIZABLE),
    JavaClass("[Ljava.lang.Integer;", 0xFE97ADA00183E21B, SC_SERIALIZABLE),
    JavaClass("[Ljava.lang.Long;", 0x7DE10AB2BBBC632B, SC_SERIALIZABLE),
    JavaClass("java.math.BigDecimal", 0x54C71557F981284F, SC_SERIALIZABLE | SC_WRITE_METHOD,
              (("I", "scale", None), ("L", "intVal", "Ljava/math/BigInteger;")), _NUMBER),
    _LOCAL_DATE, _LOCAL_TIME,
    JavaClass("java.time.LocalDateTime", 0x56266AA6A95FFF2E, SC_SERIALIZABLE,
              (("L", "date", "Ljava/time/LocalDate;"), ("L", "time", "Ljava/time/LocalTime;"))),
    JavaClass("java.time.Instant", 0xF6C2E8F0233A231C, SC_SERIALIZABLE, (("I", "nanos", None), ("J", "seconds", None))),
    JavaClass("org.apache.flink.types.Row", 3, SC_SERIALIZABLE,
              (("L", "fieldByName", "Ljava/util/Map;"), ("[", "fieldByPosition", "[Ljava/lang/Object;"),
               ("L", "kind", "Lorg/apache/flink/types/RowKind;"),
               ("L", "positionByName", "Ljava/util/LinkedHashMap;"))),
    _opaque("java.util.Map"),
    *(_opaque(_DATA + n) for n in ("StringData", "DecimalData", "TimestampData", "ArrayData", "MapData",
                                   "RowData", "RawValueData")),
)}

_DEFAULT = {"BOOLEAN": "java.lang.Boolean", "TINYINT": "java.lang.Byte", "SMALLINT": "java.lang.Short",
            "INTEGER": "java.lang.Integer", "BIGINT": "java.lang.Long", "FLOAT": "java.lang.Float",
            "DOUBLE": "java.lang.Double", "DECIMAL": "java.math.BigDecimal", "CHAR": "java.lang.String",
            "VARCHAR": "java.lang.String", "BINARY": "[B", "VARBINARY": "[B", "DATE": "java.time.LocalDate",
            "TIME_WITHOUT_TIME_ZONE": "java.time.LocalTime", "TIMESTAMP_WITHOUT_TIME_ZONE": "java.time.LocalDateTime",
            "TIMESTAMP_WITH_LOCAL_TIME_ZONE": "java.time.Instant", "MAP": "java.util.Map",
            "MULTISET": "java.util.Map", "ROW": "org.apache.flink.types.Row"}
_INTERNAL = {**_DEFAULT, "DECIMAL": _DATA + "DecimalData", "CHAR": _DATA + "StringData",
             "VARCHAR": _DATA + "StringData", "DATE": "java.lang.Integer", "TIME_WITHOUT_TIME_ZONE": "java.lang.Integer",
             "TIMESTAMP_WITHOUT_TIME_ZONE": _DATA + "TimestampData",
             "TIMESTAMP_WITH_LOCAL_TIME_ZONE": _DATA + "TimestampData", "ARRAY": _DATA + "ArrayData",
             "MAP": _DATA + "MapData", "MULTISET": _DATA + "MapData", "ROW": _DATA + "RowData"}


@dataclass(frozen=True)
class DataType:
    """A LogicalType with the conversion class of every level (``children``: element, key and value,
    or row fields, each holding the corresponding child of ``logical``)."""

    logical: LogicalType
    conversion_class: str
    children: tuple["DataType", ...] = ()

    def bridged_to(self, conversion_class: str) -> "DataType":
        _descriptor(conversion_class)
        return DataType(self.logical, conversion_class, self.children)


def _descriptor(name: str) -> JavaClass:
    cls = CONVERSION_CLASSES.get(name)
    if cls is None:
        raise UnsupportedSerializerError(
            f"fstate cannot write the conversion class {name} of a DataType (known: {', '.join(CONVERSION_CLASSES)})")
    return cls


def _data_type(t: LogicalType, classes: dict[str, str]) -> DataType:
    children = tuple(_data_type(c, classes) for c in t.children)
    cls = classes.get(t.root)
    if cls is None and t.root == "ARRAY" and classes is _DEFAULT:  # the array class of the element's class
        element = children[0].conversion_class
        cls = "[L" + element + ";" if not element.startswith("[") else "[" + element
    if cls is None:
        raise UnsupportedSerializerError(f"fstate cannot write a DataType of {t.name}")
    return DataType(t, _descriptor(cls).name, children)


def default_data_type(t: LogicalType) -> DataType:
    """``t`` with Flink's default conversion classes (``TypeConversions.fromLogicalToDataType``)."""
    return _data_type(t, _DEFAULT)


def internal_data_type(t: LogicalType) -> DataType:
    """``t`` with the internal data structures as conversion classes (``DataTypeUtils.toInternalDataType``)."""
    return _data_type(t, _INTERNAL)


def _java(d: DataType, memo: dict) -> JavaObject:
    values = {"conversionClass": JavaClassObject(_descriptor(d.conversion_class)),
              "logicalType": java_logical_object(d.logical, memo)}
    root = d.logical.root
    if root in ("ARRAY", "MULTISET"):
        values["elementDataType"] = _java(d.children[0], memo)
        return JavaObject(_COLLECTION, values)
    if root == "MAP":
        values.update(keyDataType=_java(d.children[0], memo), valueDataType=_java(d.children[1], memo))
        return JavaObject(_KEY_VALUE, values)
    if root == "ROW":
        values["fieldDataTypes"] = JavaList([_java(c, memo) for c in d.children])
        return JavaObject(_FIELDS, values)
    return JavaObject(_ATOMIC, values)


def java_data_type(d: DataType) -> bytes:
    """What ``ObjectOutputStream.writeObject(dataType)`` writes."""
    return write_java_object(_java(d, {}))


def external_serializer(d: DataType) -> "table.ExternalType":
    """The node of ``ExternalSerializer.of(dataType)``: the DataType over the internal serializer."""
    return table.ExternalType(table_serializer(d.logical), java_data_type(d), False, d.logical, d.conversion_class)
