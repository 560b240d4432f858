"""The Flink release a written savepoint is for, and the serializer shapes that release writes.

A savepoint restores in one Flink release as one of its own only when it has that release's
`_metadata` version (1.16–1.20: V4, 2.0: V5, 2.1 and later: V6; see
:func:`fstate.savepoint.builder.metadata_version_for`) and the serializers that release's jobs
have. Everything else in the state files is the same on 1.20 and 2.x: keyed backend proxy
version 6, operator backend proxy version 6, the same checkpoint properties trailer, the same
canonical key-group layout. The serializers differ in two ways (found by comparing savepoints of
``tests/flink/jobs`` TypesJob written by Flink 1.20.1 and 2.3.0, byte for byte):

* Flink 2.x gives a POJO field of type List, Map or Set a nullable serializer (its
  ``NullableListTypeInfo``/``NullableMapTypeInfo``/``NullableSetTypeInfo``):
  ``List<E>`` → Nullable(List(Nullable(E))), ``Map<K, V>`` → Nullable(Map(Nullable(K), V)),
  ``Set<E>`` → Nullable(Set(E)). Flink 1.20 gives such a field List(E) and Map(K, V).
* Flink 1.x has no ``SetSerializer`` and no TTL serializer of the asynchronous state API
  (``org.apache.flink.runtime.state.v2.ttl``).

:func:`type_for_target` turns a type tree into the one the target release writes (a no-op for
2.x targets: fstate's types are 2.x's); a type the target cannot hold raises
:class:`~fstate.savepoint.errors.InvalidArgumentError`.
"""

from __future__ import annotations

import dataclasses

from ..savepoint.errors import InvalidArgumentError
from ..savepoint.types import (EitherType, GenericArrayType, ListType, MapType, NullableType, PojoType, RowType,
                               SetType, TimerType, TtlType, TupleType, TypeInfo, TypeInfoVisitor, visit)
from ..savepoint.metainfo import StateMetaInfo

#: The newest `_metadata` version a Flink 1.x release writes (1.16–1.20).
LAST_FLINK_1_METADATA_VERSION = 4
ASYNC_TTL_SNAPSHOT = "org.apache.flink.runtime.state.v2.ttl.TtlStateFactory$TtlSerializerSnapshot"


def is_flink_1(metadata_version: int) -> bool:
    """Whether a savepoint of this `_metadata` version is for a Flink 1.x release."""
    return metadata_version <= LAST_FLINK_1_METADATA_VERSION


def flink_line(metadata_version: int) -> str:
    return "Flink 1.x" if is_flink_1(metadata_version) else "Flink 2.x"


def type_for_target(t: TypeInfo, metadata_version: int, what: str) -> TypeInfo:
    """``t`` as the Flink release writing ``metadata_version`` has it (``what`` names the state in
    errors)."""
    if not is_flink_1(metadata_version):
        return t
    return visit(t, Flink1Types(what))


def _is_plain_nullable(t: TypeInfo) -> bool:
    return isinstance(t, NullableType) and t.padding == 0


class Flink1Types(TypeInfoVisitor[TypeInfo]):
    """Rebuilds a tree with Flink 1.x's serializers: POJO collection fields without 2.x's nullable
    wrapping; Set and the async-state TTL serializer rejected. Unchanged subtrees are returned as
    they are."""

    def __init__(self, what: str = "type"):
        self.what = what

    def _fail(self, message: str) -> InvalidArgumentError:
        return InvalidArgumentError(f"{self.what}: {message}")

    def _children(self, node: TypeInfo) -> tuple[tuple[TypeInfo, ...], bool]:
        children = tuple(visit(c, self) for c in node.children)
        return children, any(new is not old for new, old in zip(children, node.children))

    def _leaf(self, node: TypeInfo) -> TypeInfo:
        return node

    visit_scalar = visit_time_window = visit_enum = visit_pickled = visit_opaque = _leaf
    # the table runtime's and CEP's serializer snapshots are the same on 1.20 and 2.x
    # (docs/flink-sql-state.md; tests/flink/test_sql_bootstrap_oracle.py on 1.20.1; the sorted map's
    # snapshot and values: tests/flink/test_sql_topn_oracle.py)
    visit_row_data = visit_table_data = visit_raw_value_data = visit_external = visit_cep = visit_sorted_map = _leaf

    def visit_tuple(self, node: TupleType) -> TypeInfo:
        children, changed = self._children(node)
        return TupleType(children, node.tuple_class) if changed else node

    def visit_row(self, node: RowType) -> TypeInfo:
        children, changed = self._children(node)
        return RowType(children, node.field_names, node.supports_row_kind) if changed else node

    def visit_list(self, node: ListType) -> TypeInfo:
        children, changed = self._children(node)
        return type(node)(children[0], node.snapshot_class) if changed else node

    visit_array_list = visit_list

    def visit_set(self, node: SetType) -> TypeInfo:
        raise self._fail(f"Flink 1.x has no Set serializer ({node.name}); write it for Flink 2.x")

    def visit_map(self, node: MapType) -> TypeInfo:
        children, changed = self._children(node)
        return MapType(*children) if changed else node

    def visit_nullable(self, node: NullableType) -> TypeInfo:
        children, changed = self._children(node)
        return NullableType(children[0], node.padding) if changed else node

    def visit_either(self, node: EitherType) -> TypeInfo:
        children, changed = self._children(node)
        return EitherType(*children) if changed else node

    def visit_generic_array(self, node: GenericArrayType) -> TypeInfo:
        children, changed = self._children(node)
        return GenericArrayType(children[0], node.component_class) if changed else node

    def visit_timer(self, node: TimerType) -> TypeInfo:
        children, changed = self._children(node)
        return TimerType(*children) if changed else node

    def visit_ttl(self, node: TtlType) -> TypeInfo:
        if node.snapshot_class == ASYNC_TTL_SNAPSHOT:
            raise self._fail("TTL state of Flink 2.x's asynchronous state API has no Flink 1.x serializer")
        children, changed = self._children(node)
        return TtlType(*children, snapshot_class=node.snapshot_class) if changed else node

    def visit_pojo(self, node: PojoType) -> TypeInfo:
        fields = [(name, declaring, None if t is None else self._pojo_field(t)) for name, declaring, t in node.fields]
        if all(new is old for (_, _, new), (_, _, old) in zip(fields, node.fields)):
            return node
        return PojoType(node.class_name, fields, node.registered, node.nonregistered)

    def _pojo_field(self, t: TypeInfo) -> TypeInfo:
        """A POJO field's type: 2.x's Nullable(List(Nullable(E))) and Nullable(Map(Nullable(K), V))
        become 1.x's List(E) and Map(K, V)."""
        if _is_plain_nullable(t):
            inner = t.inner
            if type(inner) is ListType and _is_plain_nullable(inner.element):
                return ListType(visit(inner.element.inner, self))
            if type(inner) is MapType and _is_plain_nullable(inner.key):
                return MapType(visit(inner.key.inner, self), visit(inner.value, self))
        return visit(t, self)




def state_meta_for_target(meta: StateMetaInfo, metadata_version: int, what: str) -> StateMetaInfo:
    """``meta`` with every serializer as the target release has it (the same object when unchanged)."""
    serializers = {role: type_for_target(t, metadata_version, f"{what}, state '{meta.name}'")
                   for role, t in meta.serializers.items()}
    if all(serializers[role] is t for role, t in meta.serializers.items()):
        return meta
    return dataclasses.replace(meta, serializers=serializers)


def check_copied_types(view, metadata_version: int) -> None:
    """Raise when an operator of a Flink 2.x savepoint, carried over byte for byte, has state whose
    serializers Flink 1.x does not have (its bytes would have to be re-encoded)."""
    if not is_flink_1(metadata_version) or is_flink_1(view.savepoint.metadata.version):
        return
    what = f"operator {view.display_name}"
    metas = []
    keyed_meta = view.keyed_meta if view.has_keyed_state else None
    if keyed_meta is not None:
        if type_for_target(keyed_meta.key_type, metadata_version, f"{what}, key") is not keyed_meta.key_type:
            raise InvalidArgumentError(f"{what}: its key serializer differs in Flink 1.x")
        metas.extend(keyed_meta.states)
    if view.operator_meta is not None:
        metas.extend(view.operator_meta.states)
    for meta in metas:
        if state_meta_for_target(meta, metadata_version, what) is not meta:
            raise InvalidArgumentError(
                f"{what}, state '{meta.name}': Flink 1.x serializes it differently from Flink 2.x (a POJO field of "
                "type List or Map); transform the state (its values are then written for Flink 1.x) or write the "
                "savepoint for Flink 2.x")


__all__ = ["type_for_target", "state_meta_for_target", "check_copied_types", "is_flink_1", "flink_line",
           "Flink1Types", "LAST_FLINK_1_METADATA_VERSION"]
