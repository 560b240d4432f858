"""The keyed writer's compiled encoder (``fstate.savepoint._encoding``, savepoint/_encoding.c), chosen
here, never by its callers: :func:`encode_rows` and :func:`key_group_blocks` give the compiled result or
None, and the caller then runs its Python code (the reference) on the same input.

Compiled: keys of String, Long, Integer, Short, Byte, Boolean, Double, Float (with Java's hashCode and
Flink's key group) and value, list and map states whose values (list elements, map keys and values)
are of those types or ``byte[]``, under a namespace whose bytes do not depend on the key (every state of
a keyed source is written under ``None``), and timers of such keys. Anything else (composite or TTL
types, a key and namespace of variable length both) has no plan; a value the C code does not encode
exactly as Python (another Python type, out of its Java range, a null key, list element, map key or
timestamp) makes it decline the whole batch. The same bytes either way: tests/writers/test_pair_encoding.py.

``FSTATE_PURE_PYTHON=1`` (read at every call) forces the Python code; so does a missing extension.
"""

from __future__ import annotations

from typing import Any

from . import metainfo
from ._compiled import compiled_extension, pure_python_forced
from ._fastpath import (BOOL, BYTE, DOUBLE, FLOAT, INT, LIST, LONG, MAP, SHORT, STRING, TIMER, VALUE,
                        FastPathSpecVisitor)
from .types import roles
from .types import NullableType, Scalar, TimeWindowType, TtlType, TupleType, TypeInfo, visit

ABI = 1  # the interface version of _encoding.c this module speaks

_encoding = compiled_extension("_encoding", ABI)


def available() -> bool:
    """Whether the compiled encoder is used (built, and not switched off by FSTATE_PURE_PYTHON)."""
    return _encoding is not None and not pure_python_forced()


class EncoderCodeVisitor(FastPathSpecVisitor):
    """The compiled encoder's code of a scalar type, or None when it does not encode it (the decoders'
    codes of the scalars it writes, and ``byte[]``; no composite, window or wrapper)."""

    _WRITTEN = {STRING, LONG, INT, SHORT, BYTE, BOOL, DOUBLE, FLOAT}

    def visit_scalar(self, node: Scalar) -> Any:
        if node.kind == "byte[]":
            return _encoding.BYTES if _encoding is not None else None
        code = super().visit_scalar(node)
        return code if code in self._WRITTEN else None

    def visit_time_window(self, node: TimeWindowType) -> Any:
        return None

    def visit_tuple(self, node: TupleType, fields) -> Any:
        return None

    def visit_nullable(self, node: NullableType, inner) -> Any:
        return None

    def visit_ttl(self, node: TtlType, value, timestamp) -> Any:
        return None


def _code(t: TypeInfo) -> int | None:
    return visit(t, EncoderCodeVisitor())


def _namespace_bytes(ns_type: TypeInfo) -> bytes | None:
    """The bytes of the namespace every pair of a keyed source is written under (None), or None when
    that namespace cannot be None (the Python code reports it)."""
    try:
        namespace = bytearray()
        ns_type.encoder()(namespace, None)
    except Exception:
        return None
    return bytes(namespace)


def plan(meta, key_type: TypeInfo, n_states: int, n_timers: int) -> tuple | None:
    """The compiled encoder's plan of a keyed source's rows (``meta``: its ``KeyedBackendMeta``: ``n_states``
    states, then ``n_timers`` timer states), or None when it has none (then its rows are encoded in Python)."""
    if _encoding is None or key_type != meta.key_type or len(meta.states) != n_states + n_timers:
        return None
    key_code = _code(key_type)
    # a key must have a value-based Java hashCode (byte[] has none: Python reports it)
    if key_code is None or key_code == _encoding.BYTES or not key_type.has_value_hash:
        return None
    states = []
    for sid, info in enumerate(meta.states):
        timer = roles.as_timer(info.value_type) if info.backend_type == metainfo.PRIORITY_QUEUE else None
        if (sid >= n_states) != (timer is not None):  # the states, then the timers (KeyedEncoding's rows)
            return None
        if timer is not None:
            namespace = _namespace_bytes(timer.namespace)
            if timer.key != key_type or namespace is None:
                return None
            states.append((TIMER, 0, 0, namespace))
            continue
        ns_type = info.namespace_type
        if key_type.length < 0 and ns_type.length < 0:  # lengths written after both: not compiled
            return None
        namespace = _namespace_bytes(ns_type)
        if namespace is None:
            return None
        vt = info.value_type
        if info.kind == "LIST":
            mode, first, second = LIST, _code(vt.element), 0
        elif info.kind == "MAP":
            mode, first, second = MAP, _code(vt.key), _code(vt.value)
        else:
            mode, first, second = VALUE, _code(vt), 0
        if first is None or second is None:
            return None
        states.append((mode, first, second, namespace))
    return key_code, tuple(states)


def encode_arrow(compiled_plan: tuple | None, arrays: list, max_parallelism: int, ranges: int
                 ) -> dict[int, bytes] | None:
    """:func:`encode_rows` of a batch's Arrow arrays (the key's and each state's) read in place, or None:
    the caller tries :func:`encode_rows` of their Python values (maps, unusual Arrow types)."""
    if compiled_plan is None or not available():
        return None
    key_code, states = compiled_plan
    columns = [array.__arrow_c_array__() for array in arrays]
    return _encoding.encode_arrow(columns, key_code, states, max_parallelism, ranges)


def encode_rows(compiled_plan: tuple | None, columns: list[list], max_parallelism: int, ranges: int
                ) -> dict[int, bytes] | None:
    """A batch's spill records by range (``columns``: the key's and each state's values), or None: the
    caller encodes it in Python."""
    if compiled_plan is None or not available():
        return None
    key_code, states = compiled_plan
    return _encoding.encode_rows(columns, key_code, states, max_parallelism, ranges)


def key_group_blocks(records: bytes, lo: int, hi: int) -> list[tuple[int, bytes]] | None:
    """Key groups ``lo..hi`` of one spill file's records as canonical blocks in ascending order, or
    None: the caller builds them in Python (which also reports a key written twice)."""
    if not available():
        return None
    return _encoding.key_group_blocks(records, lo, hi)
