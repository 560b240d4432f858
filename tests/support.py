"""Shared test helpers: where the shipped samples are; encoding and decoding single values."""

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"


def sample_dirs() -> list[Path]:
    return sorted(p.parent for p in SAMPLES.glob("*/dump.json"))


def sample_snapshot(sample: Path) -> Path:
    dump = json.loads((sample / "dump.json").read_text())
    return sample / dump["snapshot_path"]


def enc(type_info, value) -> bytes:
    """A value encoded by a TypeInfo node's encoder."""
    out = bytearray()
    type_info.encoder()(out, value)
    return bytes(out)


def dec(type_info, data: bytes):
    """A value decoded by a TypeInfo node's decoder, which must consume exactly ``data``."""
    value, end = type_info.decoder()(data, 0)
    assert end == len(data), f"decoder consumed {end} of {len(data)} bytes"
    return value


def _shapes(arrow_type, into: set[str]) -> str:
    """The shape of an Arrow type (nesting and leaf types; struct field names left out), added to ``into``
    with the shape of every type nested in it."""
    import pyarrow as pa

    if pa.types.is_struct(arrow_type):
        shape = "struct<" + ",".join(_shapes(arrow_type.field(i).type, into) for i in range(arrow_type.num_fields)) + ">"
    elif pa.types.is_map(arrow_type):
        shape = f"map<{_shapes(arrow_type.key_type, into)},{_shapes(arrow_type.item_type, into)}>"
    elif pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        shape = f"list<{_shapes(arrow_type.value_type, into)}>"
    else:
        shape = str(arrow_type)
    into.add(shape)
    return shape


def covering(schemas: dict[str, "object"], each_sample: bool = True) -> list[str]:
    """The labels of a few of ``schemas`` (label -> pyarrow schema) that together hold every type shape
    all of them hold, and (``each_sample``) the first label of each sample (a label's part before ':').

    For comparisons whose subject is a type mapping (Spark's conversion of the embedded engine's Arrow
    batches, Spark's file writers): once per shape by default, every table with --exhaustive."""
    wanted = {label: set() for label in schemas}
    for label, schema in schemas.items():
        for field in schema:
            _shapes(field.type, wanted[label])
    chosen, held, samples = [], set(), set()
    for label in schemas:
        if each_sample and label.split(":")[0] not in samples:
            chosen.append(label)
            samples.add(label.split(":")[0])
            held |= wanted[label]
    while True:
        best = max(schemas, key=lambda label: len(wanted[label] - held))
        if not wanted[best] - held:
            return chosen
        chosen.append(best)
        held |= wanted[best]
