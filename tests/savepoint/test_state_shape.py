"""A keyed state's shape (keyed_codecs.StateShape) is computed once from its meta info, and every
decoder reads it: no decoder matches the state kind against the value serializer's type itself."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from fstate.savepoint import keyed_codecs, metainfo
from fstate.savepoint.types import LONG, STRING, ListType, MapType, OpaqueType

ROOT = Path(__file__).resolve().parents[2]
#: every decoder of keyed entries (Python, compiled rows, columnar); state_shape is the switch, and
#: state_codecs records each state's kind with its decoders
DECODERS = ("savepoint/keyed_codecs.py", "savepoint/_fastpath.py", "savepoint/columnar.py")


def _switches(path: Path) -> list[str]:
    """Places that look at a state's kind, backend type or value serializer, or at whether a type is
    a list or map serializer, outside state_shape."""
    found = []
    for function in ast.walk(ast.parse(path.read_text())):
        if not isinstance(function, ast.FunctionDef) or function.name in ("state_shape", "state_codecs"):
            continue
        for node in ast.walk(function):
            if isinstance(node, ast.Attribute) and node.attr in ("kind", "value_type", "backend_type", "namespace_type") \
                    and _is_meta_info(node.value):
                found.append(f"{path.name}:{node.lineno} {function.name}: .{node.attr}")
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "isinstance" and \
                    any(getattr(n, "id", None) in ("ListType", "MapType") for n in ast.walk(node.args[1])):
                found.append(f"{path.name}:{node.lineno} {function.name}: isinstance list/map")
    return found


def _is_meta_info(node: ast.expr) -> bool:
    """``info``, ``….info`` or ``meta.states[…]``: a StateMetaInfo."""
    if isinstance(node, ast.Subscript):
        node = node.value
    return (isinstance(node, ast.Name) and node.id == "info") or (isinstance(node, ast.Attribute)
                                                                  and node.attr in ("info", "states"))


@pytest.mark.parametrize("module", DECODERS)
def test_decoders_read_the_shape(module):
    assert _switches(ROOT / module) == []


def test_the_check_sees_a_switch(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def plan(codec):\n    info = codec.info\n    return info.kind == 'LIST' and info.value_type\n")
    assert len(_switches(bad)) == 2


def test_state_shapes():
    def shape(kind, value_type, backend=metainfo.KEY_VALUE):
        info = metainfo.StateMetaInfo("s", backend, {metainfo.KEYED_STATE_TYPE: kind},
                                      {metainfo.VALUE_SERIALIZER: value_type})
        return keyed_codecs.state_shape(STRING, info)

    opaque = OpaqueType("com.example.UnknownSerializerSnapshot", 1, b"")
    assert (shape("VALUE", LONG).form, shape("VALUE", LONG).value) == (keyed_codecs.VALUE, LONG)
    listed = shape("LIST", ListType(STRING))
    assert (listed.form, listed.value, listed.serializer) == (keyed_codecs.LIST, STRING, ListType(STRING))
    assert shape("LIST", opaque).form == keyed_codecs.RAW_LIST
    mapped = shape("MAP", MapType(STRING, LONG))
    assert (mapped.form, mapped.user_key, mapped.value, mapped.is_map) == (keyed_codecs.MAP, STRING, LONG, True)
    assert shape("MAP", opaque).form == keyed_codecs.RAW_MAP
    assert shape("VALUE", LONG, metainfo.PRIORITY_QUEUE).form == keyed_codecs.TIMER
    assert shape("VALUE", LONG).ambiguous is False  # (a VoidNamespace has a fixed length)
