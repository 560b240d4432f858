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
