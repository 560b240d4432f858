"""The serializers fstate writes for an older release are exactly that release's, and those it writes
for Flink 2.3 from a 1.20 savepoint exactly Flink 2.3's: the state headers of the TypesJob savepoint
one release wrote, turned into the other release's types (writers/flink_target.py) and written
again, are byte for byte those of the TypesJob savepoint the other release wrote (POJO fields of type
List lose, or gain, Flink 2.x's nullable wrapping; everything else, Kryo's snapshot included, is the
same). Checked for 1.20; with FSTATE_FLINK_ALL=1 for every release of ``harness.RELEASES``. And each
release is written with the `_metadata` version it writes itself."""

from __future__ import annotations

import dataclasses

import pytest

from fstate.savepoint import handles, keyed_proxy, streams
from fstate.savepoint import operator as operator_state
from fstate.savepoint.binary import DataOutput
from fstate.savepoint.errors import InvalidArgumentError
from fstate.savepoint.loader import Savepoint
from fstate.savepoint.builder import metadata_version_for, operator_proxy_version_for
from fstate.savepoint.types import LONG, STRING, ListType, NullableType, PojoType, SetType
from fstate.writers.flink_target import is_flink_1, keyed_meta_for_target, state_meta_for_target, type_for_target
from tests.flink import harness

pytestmark = pytest.mark.flink


def _headers(version: str) -> dict[tuple[str, str], bytes]:
    harness.require_flink(version)
    res = harness.generate("TypesJob", version, "hashmap", "savepoint")
    sp = Savepoint.open(str(res.snapshot_dir))
    out = {}
    for op in sp.metadata.operators:
        first = op.subtasks.get(0)
        if first is None:
            continue
        if isinstance(first.managed_keyed, handles.KeyGroupsHandle):
            data = streams.read_source(streams.stream_source(first.managed_keyed.delegate, str(res.snapshot_dir)))
            out[(op.operator_id.hex(), "keyed")] = data[:keyed_proxy.read_keyed_proxy(data).header_size]
        if first.managed_operator is not None:
            data = streams.read_source(streams.stream_source(first.managed_operator.delegate, str(res.snapshot_dir)))
            out[(op.operator_id.hex(), "operator")] = data[:operator_state.read_operator_proxy(data).header_size]
    return out


def _for_release(kind: str, header: bytes, metadata_version: int, source_version: int,
                 operator_proxy_version: int = 6) -> bytes:
    """A header of a release's savepoint (of `_metadata` ``source_version``) as fstate writes it for the
    release of ``metadata_version`` and ``operator_proxy_version``."""
    out = DataOutput()
    if kind == "keyed":
        meta = keyed_meta_for_target(keyed_proxy.read_keyed_proxy(header), metadata_version, "operator",
                                     source_version)
        keyed_proxy.write_keyed_proxy(out, meta)
    else:
        meta = operator_state.read_operator_proxy(header)
        meta = dataclasses.replace(meta, version=operator_proxy_version,
                                   states=[state_meta_for_target(s, metadata_version, "state", source_version)
                                           for s in meta.states])
        operator_state.write_operator_proxy(out, meta)
    return out.getvalue()


@pytest.mark.parametrize("version", ["1.20.1"] + [v for v in harness.RELEASES if harness.ALL_RELEASES
                                                  and v not in ("1.20.1", harness.DEFAULT_VERSION)])
def test_types_for_a_release_are_its_own_byte_for_byte(version):
    written_by_2_3, written_by_release = _headers(harness.DEFAULT_VERSION), _headers(version)
    assert set(written_by_2_3) == set(written_by_release)
    if is_flink_1(harness.release(version).metadata_version):
        differing = [key for key in written_by_2_3 if written_by_2_3[key] != written_by_release[key]]
        assert differing, "the two releases wrote the same headers: nothing left to prove"
    for key, header in sorted(written_by_2_3.items()):
        assert _for_release(key[1], header, metadata_version_for(version), 6, operator_proxy_version_for(version)) \
            == written_by_release[key], key


@pytest.mark.parametrize("version", list(harness.RELEASES))
def test_each_release_is_written_with_its_metadata_version(version):
    """What the writers give a release (``flink_version="1.18"`` or ``"1.18.1"``) is the `_metadata`
    version that release writes (harness.RELEASES, checked against Flink's own savepoints by
    test_harness and test_oracle)."""
    expected = harness.release(version).metadata_version
    assert metadata_version_for(version) == expected
    assert metadata_version_for(".".join(version.split(".")[:2])) == expected


def test_types_for_flink_2_3_from_1_20_are_flink_2_3s_byte_for_byte():
    written_by_2_3, written_by_1_20 = _headers("2.3.0"), _headers("1.20.1")
    assert set(written_by_2_3) == set(written_by_1_20)
    for key, header in sorted(written_by_1_20.items()):
        assert _for_release(key[1], header, 6, 4) == written_by_2_3[key], key
        assert _for_release(key[1], header, 4, 4) == header, key  # 1.20 to 1.20: as it is


def test_what_flink_1_has_no_serializer_for():
    pojo = PojoType("com.acme.Order", [("tags", "com.acme.Order", NullableType(ListType(NullableType(STRING))))])
    assert type_for_target(pojo, 6, "s") is pojo
    flink_1 = type_for_target(pojo, 4, "s")
    assert flink_1 == PojoType("com.acme.Order", [("tags", "com.acme.Order", ListType(STRING))])
    assert type_for_target(flink_1, 6, "s", source_version=4) == pojo  # and back
    assert type_for_target(flink_1, 4, "s", source_version=4) is flink_1
    assert type_for_target(NullableType(ListType(NullableType(LONG))), 4, "s") == NullableType(
        ListType(NullableType(LONG)))  # outside a POJO: as given
    with pytest.raises(InvalidArgumentError, match="state 'x': Flink 1.x has no Set serializer"):
        type_for_target(ListType(SetType(STRING)), 4, "state 'x'")
