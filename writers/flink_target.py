"""The Flink release a written savepoint is for, and the serializer shapes that release writes.

A savepoint restores in one Flink release as one of its own only when it has that release's
`_metadata` version (1.16–1.20: V4, 2.0: V5, 2.1 and later: V6; see
:func:`fstate.savepoint.builder.metadata_version_for`), an operator-state header it reads (1.16
and 1.17 write and read version 5 only; 1.18 and later write 6, with the compression flag:
:func:`fstate.savepoint.builder.operator_proxy_version_for`, :func:`operator_proxy_version_of`)
and the serializers that release's jobs have. Everything else in the state files is the same on
1.16–1.20 and 2.x: keyed backend proxy version 6, the same checkpoint properties trailer, the same
canonical key-group layout, the same RocksDB files (2.3 restores 1.20's SST files, native
savepoints and incremental checkpoints as they are). The serializers of 1.16–1.20 are one set,
those of 2.0–2.3 another (the state headers of TypesJob's savepoints of every release, byte for
byte: tests/flink/test_flink_target.py). They differ in three ways (found by comparing savepoints
of ``tests/flink/jobs`` TypesJob written by Flink 1.20.1 and 2.3.0 byte for byte, and by restoring
1.20.1's in 2.3.0: ``tests/flink/test_flink_upgrade_oracle.py``):

* Flink 2.x gives a POJO field of type List, Map or Set a nullable serializer (its type extractor
  makes them ``NullableListTypeInfo``/``NullableMapTypeInfo``/``NullableSetTypeInfo``):
  ``List<E>`` → Nullable(List(Nullable(E))), ``Map<K, V>`` → Nullable(Map(Nullable(K), V)),
  ``Set<E>`` → Nullable(Set(E)). A Flink 1.20 job whose POJO type names such a field List(E) or
  Map(K, V) (1.20's extractor makes it a Kryo-serialized generic type) has no wrapping; 2.x finds
  the two serializers incompatible and refuses to restore the state.
* Flink 1.x has no ``SetSerializer`` and no TTL serializer of the asynchronous state API
  (``org.apache.flink.runtime.state.v2.ttl``).
* Kryo: Flink 1.x serializes with Kryo 2.24, Flink 2.x with Kryo 5.6, under the same
  ``KryoSerializerSnapshot`` (version 2), so 2.x takes the snapshot and reads the bytes with Kryo
  5: for a class Kryo writes field by field (TypesJob's ``Opaque``: a String and a long) 2.3.0
  restored 1.20.1's values; for others (collections, registered classes, Kryo serializers of
  their own) the bytes may differ. fstate cannot decode Kryo bytes: Kryo state is carried as it
  is, with a warning, and an operator whose state must be re-encoded cannot hold any.

:func:`type_for_target` turns a type tree of one release's savepoint into the one the target
release writes (:class:`Flink1Types`, :class:`Flink2Types`); a type the target cannot take raises
:class:`~fstate.savepoint.errors.InvalidArgumentError` naming the operator and state.
:func:`carry_for_target` and :func:`operator_carry_for_target` say, for one operator of a savepoint,
whether its keyed and operator state can be carried into a savepoint for the target release as
they are (None) or must be re-encoded (writers/reencode.py), and with what headers.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Callable

from ..savepoint import keyed
from ..savepoint import operator as operator_state
from ..savepoint.errors import FStateWarning, InvalidArgumentError
from ..savepoint.metainfo import StateMetaInfo
from ..savepoint.types import (EitherType, GenericArrayType, ListType, MapType, NullableType, PojoType,
                               RowType, SetType, TimerType, TtlType, TupleType, TypeInfo, PreOrderTypeVisitor, visit)
from ..savepoint.types.roles import OPAQUE, as_nullable, role
from ..savepoint.types.snapshots import KRYO_SNAPSHOT
from .reencode import KeyedReencode, StateSource

#: The newest `_metadata` version a Flink 1.x release writes (1.16–1.20).
LAST_FLINK_1_METADATA_VERSION = 4
ASYNC_TTL_SNAPSHOT = "org.apache.flink.runtime.state.v2.ttl.TtlStateFactory$TtlSerializerSnapshot"
#: The Kryo each line bundles (is_flink_1 → version): flink-dist's META-INF/DEPENDENCIES of 1.20.1 and 2.3.0.
KRYO_RELEASES = {True: "2.24", False: "5.6"}


def is_flink_1(metadata_version: int) -> bool:
    """Whether a savepoint of this `_metadata` version is for a Flink 1.x release."""
    return metadata_version <= LAST_FLINK_1_METADATA_VERSION


def flink_line(metadata_version: int) -> str:
    return "Flink 1.x" if is_flink_1(metadata_version) else "Flink 2.x"


def type_for_target(t: TypeInfo, metadata_version: int, what: str, source_version: int | None = None) -> TypeInfo:
    """``t``, a serializer tree of a savepoint of `_metadata` version ``source_version`` (None:
    fstate's own types, which are Flink 2.x's), as the release writing ``metadata_version`` has it
    (the same object when unchanged; ``what`` names the state in errors)."""
    to_flink_1 = is_flink_1(metadata_version)
    if to_flink_1 == (source_version is not None and is_flink_1(source_version)):
        return t
    return visit(t, Flink1Types(what) if to_flink_1 else Flink2Types(what))


def _plain_nullable_inner(t: TypeInfo) -> TypeInfo | None:
    """What a NullableSerializer without padding wraps (None for any other type)."""
    nullable = as_nullable(t)
    return None if nullable is None or nullable.padding != 0 else nullable.inner


class ReleaseTypes(PreOrderTypeVisitor[TypeInfo]):
    """Rebuilds a tree node by node; unchanged subtrees are returned as they are. Subclasses say
    how a POJO field changes (:meth:`_pojo_field`) and what the other release cannot take."""

    def __init__(self, what: str = "type"):
        self.what = what

    def _fail(self, message: str) -> InvalidArgumentError:
        return InvalidArgumentError(f"{self.what}: {message}")

    @staticmethod
    def _changed(old: tuple[TypeInfo, ...], thunks) -> tuple[tuple[TypeInfo, ...], bool]:
        """The children rebuilt (``thunks``: theirs, in the order of ``old``), and whether one changed."""
        children = tuple(child() for child in thunks)
        return children, any(new is not was for new, was in zip(children, old))

    def _leaf(self, node: TypeInfo, *children) -> TypeInfo:
        return node

    visit_scalar = visit_time_window = visit_enum = visit_pickled = _leaf
    # the table runtime's and CEP's serializer snapshots are the same on 1.20 and 2.x
    # (docs/flink-sql-state.md; tests/flink/test_sql_bootstrap_oracle.py on 1.20.1; the sorted map's
    # snapshot and values: tests/flink/test_sql_topn_oracle.py)
    visit_row_data = visit_table_data = visit_raw_value_data = visit_external = visit_cep = visit_sorted_map = _leaf

    # serializers fstate cannot read (Kryo, Avro, a user's own) have the same snapshot on both lines
    visit_opaque = _leaf

    def visit_tuple(self, node: TupleType, fields) -> TypeInfo:
        children, changed = self._changed(node.children, fields)
        return TupleType(children, node.tuple_class) if changed else node

    def visit_row(self, node: RowType, fields) -> TypeInfo:
        children, changed = self._changed(node.children, fields)
        return RowType(children, node.field_names, node.supports_row_kind) if changed else node

    def visit_list(self, node: ListType, element) -> TypeInfo:
        (new,), changed = self._changed(node.children, (element,))
        return type(node)(new, node.snapshot_class) if changed else node

    visit_array_list = visit_list

    def visit_set(self, node: SetType, element) -> TypeInfo:
        return self.visit_list(node, element)

    def visit_map(self, node: MapType, key, value) -> TypeInfo:
        children, changed = self._changed(node.children, (key, value))
        return MapType(*children) if changed else node

    def visit_nullable(self, node: NullableType, inner) -> TypeInfo:
        (new,), changed = self._changed(node.children, (inner,))
        return NullableType(new, node.padding) if changed else node

    def visit_either(self, node: EitherType, fields) -> TypeInfo:
        children, changed = self._changed(node.children, fields)
        return EitherType(*children) if changed else node

    def visit_generic_array(self, node: GenericArrayType, element) -> TypeInfo:
        (new,), changed = self._changed(node.children, (element,))
        return GenericArrayType(new, node.component_class) if changed else node

    def visit_timer(self, node: TimerType, key, namespace) -> TypeInfo:
        children, changed = self._changed(node.children, (key, namespace))
        return TimerType(*children) if changed else node

    def visit_ttl(self, node: TtlType, value, timestamp) -> TypeInfo:
        children, changed = self._changed(node.children, (timestamp, value))  # a TtlType's children: timestamp, value
        return TtlType(*children, snapshot_class=node.snapshot_class) if changed else node

    def visit_pojo(self, node: PojoType, fields, registered, nonregistered) -> TypeInfo:
        new_fields = [(name, declaring, None if field is None else self._pojo_field(field))
                      for (name, declaring, _), field in zip(node.fields, fields)]
        subclasses = [[(name, None if child is None else child()) for (name, _), child in zip(group, thunks)]
                      for group, thunks in ((node.registered, registered), (node.nonregistered, nonregistered))]
        old = [t for _, _, t in node.fields] + [t for group in (node.registered, node.nonregistered) for _, t in group]
        new = [t for _, _, t in new_fields] + [t for group in subclasses for _, t in group]
        if all(a is b for a, b in zip(new, old)):
            return node
        return PojoType(node.class_name, new_fields, *subclasses)

    def _pojo_field(self, field: Callable[[], TypeInfo]) -> TypeInfo:
        """A POJO field's type as the target has it (``field``: the thunk rebuilding its type)."""
        return field()


# How Flink 2.x's type extractor serializes a POJO field of type List, Map or Set (one fact, read
# both ways below): the collection and its elements (map keys) wrapped in NullableSerializer, no padding.

class Flink2PojoField(PreOrderTypeVisitor[TypeInfo]):
    """A POJO field's type as Flink 2.x serializes it: a List(E) or Map(K, V) wrapped, any other type
    (ArrayList and Set too) as it is."""

    def visit_list(self, node: ListType, element) -> TypeInfo:
        return NullableType(ListType(NullableType(node.element)))

    def visit_map(self, node: MapType, key, value) -> TypeInfo:
        return NullableType(MapType(NullableType(node.key), node.value))

    def _as_is(self, node: TypeInfo, *children) -> TypeInfo:
        return node

    visit_scalar = visit_time_window = visit_tuple = visit_row = visit_array_list = visit_set = _as_is
    visit_nullable = visit_either = visit_generic_array = visit_timer = visit_ttl = visit_pojo = _as_is
    visit_enum = visit_pickled = visit_opaque = visit_cep = visit_row_data = visit_table_data = _as_is
    visit_raw_value_data = visit_external = visit_sorted_map = _as_is


def flink2_pojo_field(t: TypeInfo) -> TypeInfo:
    """A POJO field's type with Flink 2.x's nullable wrapping of a List or Map (any other type as it is)."""
    return visit(t, Flink2PojoField())


class Flink1PojoCollection(PreOrderTypeVisitor[TypeInfo | None]):
    """The plain List(E) or Map(K, V) of what a Flink 2.x POJO field's nullable wrapper holds: a
    List of nullable elements or a Map of nullable keys (None for any other type)."""

    def visit_list(self, node: ListType, element) -> ListType | None:
        plain = _plain_nullable_inner(node.element)
        return None if plain is None else ListType(plain)

    def visit_map(self, node: MapType, key, value) -> MapType | None:
        plain = _plain_nullable_inner(node.key)
        return None if plain is None else MapType(plain, node.value)

    def _none(self, node: TypeInfo, *children) -> None:
        return None

    visit_scalar = visit_time_window = visit_tuple = visit_row = visit_array_list = visit_set = _none
    visit_nullable = visit_either = visit_generic_array = visit_timer = visit_ttl = visit_pojo = _none
    visit_enum = visit_pickled = visit_opaque = visit_cep = visit_row_data = visit_table_data = _none
    visit_raw_value_data = visit_external = visit_sorted_map = _none


def flink1_pojo_collection(t: TypeInfo) -> ListType | MapType | None:
    """The List(E) or Map(K, V) of a POJO field Flink 2.x serialized as a nullable collection
    (None for any other field)."""
    inner = _plain_nullable_inner(t)
    return None if inner is None else visit(inner, Flink1PojoCollection())


class Flink1Types(ReleaseTypes):
    """Rebuilds a Flink 2.x tree with Flink 1.x's serializers: POJO collection fields without 2.x's
    nullable wrapping; Set and the async-state TTL serializer rejected."""

    def visit_set(self, node: SetType, element) -> TypeInfo:
        raise self._fail(f"Flink 1.x has no Set serializer ({node.name}); write it for Flink 2.x")

    def visit_ttl(self, node: TtlType, value, timestamp) -> TypeInfo:
        if node.snapshot_class == ASYNC_TTL_SNAPSHOT:
            raise self._fail("TTL state of Flink 2.x's asynchronous state API has no Flink 1.x serializer")
        return super().visit_ttl(node, value, timestamp)

    def _pojo_field(self, field: Callable[[], TypeInfo]) -> TypeInfo:
        # rebuilt first, then unwrapped: rebuilding keeps the nullable List/Map wrapping as it is
        t = field()
        plain = flink1_pojo_collection(t)
        return t if plain is None else plain


class Flink2Types(ReleaseTypes):
    """Rebuilds a Flink 1.x tree with Flink 2.x's serializers: POJO fields of type List or Map get
    2.x's nullable wrapping."""

    def _pojo_field(self, field: Callable[[], TypeInfo]) -> TypeInfo:
        return flink2_pojo_field(field())


def state_meta_for_target(meta: StateMetaInfo, metadata_version: int, what: str,
                          source_version: int | None = None) -> StateMetaInfo:
    """``meta`` with every serializer as the target release has it (the same object when unchanged)."""
    serializers = {role: type_for_target(t, metadata_version, f"{what}, state '{meta.name}'", source_version)
                   for role, t in meta.serializers.items()}
    if all(serializers[role] is t for role, t in meta.serializers.items()):
        return meta
    return dataclasses.replace(meta, serializers=serializers)


def keyed_meta_for_target(meta: keyed.KeyedBackendMeta, metadata_version: int, what: str,
                          source_version: int | None = None) -> keyed.KeyedBackendMeta:
    """A keyed backend header with its key and state serializers as the target release has them
    (the same object when unchanged)."""
    key_type = type_for_target(meta.key_type, metadata_version, f"{what}, key", source_version)
    states = [state_meta_for_target(s, metadata_version, what, source_version) for s in meta.states]
    if key_type is meta.key_type and all(new is old for new, old in zip(states, meta.states)):
        return meta
    return dataclasses.replace(meta, key_type=key_type, states=states)


def carry_for_target(view, metadata_version: int) -> KeyedReencode | None:
    """How the keyed state of ``view`` (an operator of a savepoint) goes into a savepoint written
    with `_metadata` version ``metadata_version``: None when its bytes can be carried as they are
    (no keyed state, or the target release serializes it as the source did), else the plan that
    re-encodes every state with the target's serializers (writers/reencode.py: ``reencode_keyed``).
    Raises InvalidArgumentError naming the operator and state the target cannot take, or that fstate
    cannot re-encode; warns (FStateWarning) about Kryo state carried across 1.x and 2.x."""
    if not _crosses(view, metadata_version):  # the same serializers: nothing to read
        return None
    meta = view.keyed_meta if view.has_keyed_state else None
    if meta is None:
        return None
    source = view.savepoint.metadata.version
    target = keyed_meta_for_target(meta, metadata_version, f"operator {view.display_name}", source)
    if target is meta:
        _warn_kryo(view, meta.states, metadata_version, [meta.key_type])
        return None
    changed = "its key" if target.key_type is not meta.key_type else next(
        f"state '{old.name}'" for old, new in zip(meta.states, target.states) if old is not new)
    _check_decodable(view, "keyed", changed, metadata_version, meta.states, [meta.key_type])
    return KeyedReencode(target, {s.name: StateSource(s.name) for s in meta.states})


def operator_carry_for_target(view, metadata_version: int, operator_proxy_version: int | None = None
                              ) -> operator_state.OperatorBackendMeta | None:
    """The operator-state counterpart of :func:`carry_for_target`: None when the list, union and
    broadcast state of ``view`` can be carried as it is, else the header to re-encode it with
    (writers/reencode.py: ``reencode_operator``). Also re-encoded: streams whose header version
    is above ``operator_proxy_version``, the one the target release reads (1.16 and 1.17 refuse 6)."""
    meta = view.operator_meta
    header_too_new = meta is not None and operator_proxy_version is not None and meta.version > operator_proxy_version
    if meta is None or not (header_too_new or _crosses(view, metadata_version)):
        return None
    what = f"operator {view.display_name}"
    states = [state_meta_for_target(s, metadata_version, what, view.savepoint.metadata.version) for s in meta.states]
    if header_too_new:
        _check_decodable(view, "operator", "", metadata_version, meta.states,
                         reason=f"it has operator-state header version {meta.version}, "
                                f"which the target release reads only up to {operator_proxy_version}")
    elif all(new is old for new, old in zip(states, meta.states)):
        _warn_kryo(view, meta.states, metadata_version)
        return None
    else:
        changed = next(f"state '{old.name}'" for old, new in zip(meta.states, states) if old is not new)
        _check_decodable(view, "operator", changed, metadata_version, meta.states)
    return dataclasses.replace(meta, states=states)


def operator_proxy_version_of(savepoint) -> int:
    """The operator-state header version of a savepoint's own streams, for state written into a copy
    of it: the version the release that wrote it writes (1.16 and 1.17 refuse 6). Without an
    operator-state stream to tell: 5 for a Flink 1.x savepoint (every 1.x release reads it), else 6."""
    for view in savepoint.operators:
        meta = view.operator_meta
        if meta is not None:
            return meta.version
    return 5 if is_flink_1(savepoint.metadata.version) else 6


def _parts(states: list[StateMetaInfo], key: list[TypeInfo]) -> list[tuple[str, list[TypeInfo]]]:
    """(what, its serializer trees) for a backend's key (when given) and each of its states."""
    return [("its key", key), *((f"state '{s.name}'", list(s.serializers.values())) for s in states)]


def _crosses(view, metadata_version: int) -> bool:
    return is_flink_1(view.savepoint.metadata.version) != is_flink_1(metadata_version)


def _check_decodable(view, part: str, changed: str, metadata_version: int, states: list[StateMetaInfo],
                     extra: list[TypeInfo] = (), reason: str | None = None) -> None:
    """Re-encoding decodes every state of the operator's keyed (or operator) backend: one fstate
    cannot decode (Kryo, Avro, ...) stops it. ``reason``: why it is re-encoded, when not because
    ``changed`` is serialized differently by the target release."""
    reason = reason or f"{changed} is serialized differently there"
    for what, types in _parts(states, extra):
        opaque = [t for root in types for t in root.walk() if not t.decodable]
        if opaque:
            raise InvalidArgumentError(
                f"operator {view.display_name}: its {part} state must be re-encoded for {flink_line(metadata_version)} "
                f"({reason}), but {what} holds values of {opaque[0].name}, which "
                "fstate cannot decode")


def _warn_kryo(view, states: list[StateMetaInfo], metadata_version: int, extra: list[TypeInfo] = ()) -> None:
    for what, types in _parts(states, extra):
        if any(role(t) == OPAQUE and t.snapshot_class == KRYO_SNAPSHOT for root in types for t in root.walk()):
            warnings.warn(
                f"operator {view.display_name}, {what}: Kryo-serialized values are carried as they are; "
                f"{flink_line(view.savepoint.metadata.version)} wrote them with Kryo "
                f"{KRYO_RELEASES[is_flink_1(view.savepoint.metadata.version)]}, {flink_line(metadata_version)} reads "
                f"them with Kryo {KRYO_RELEASES[is_flink_1(metadata_version)]} (classes Kryo writes field by field "
                "restore; restore the result once before relying on it)", FStateWarning, stacklevel=3)


__all__ = ["type_for_target", "state_meta_for_target", "keyed_meta_for_target", "carry_for_target",
           "operator_carry_for_target", "operator_proxy_version_of", "is_flink_1", "flink_line", "Flink1Types",
           "Flink2Types", "LAST_FLINK_1_METADATA_VERSION"]
