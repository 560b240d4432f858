"""Shared test helpers: where the shipped samples are."""

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"


def sample_dirs() -> list[Path]:
    return sorted(p.parent for p in SAMPLES.glob("*/dump.json"))


def sample_snapshot(sample: Path) -> Path:
    dump = json.loads((sample / "dump.json").read_text())
    return sample / dump["snapshot_path"]
