"""The compiled extension ``fstate.savepoint._speedups``, loaded in one place for all its users
(:mod:`._fastpath`: keyed state; :mod:`.binary`: Flink strings; :mod:`.types.hashing`: hash codes and
key groups).

``speedups`` is the module, or None when it is missing (an install without a C compiler) or was
built from other sources (a stale ``build_ext --inplace``: its ``ABI`` differs from :data:`ABI`;
rebuild with ``pip install -e .``). Its users fall back to their pure-Python code, which is the
reference. ``FSTATE_PURE_PYTHON=1`` forces that fallback too (:func:`pure_python_forced`).
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

ABI = 9  # the interface version of _speedups.c this package speaks


def compiled_extension(name: str, abi: int) -> ModuleType | None:
    """The package's C extension ``name`` when it is built from the sources its Python side speaks
    (its ``ABI`` equals ``abi``), else None: missing (no compiler) or stale (rebuild with
    ``pip install -e .``). Every extension is loaded by this one rule (_speedups here, _columnar,
    _encoding, _sst by their modules)."""
    try:
        module = importlib.import_module(f"{__package__}.{name}")
    except ImportError:  # built without a compiler: the Python path is the whole story
        return None
    return module if getattr(module, "ABI", None) == abi else None


speedups = compiled_extension("_speedups", ABI)


def pure_python_forced() -> bool:
    """Whether ``FSTATE_PURE_PYTHON`` asks for the pure-Python code (read at every call)."""
    return os.environ.get("FSTATE_PURE_PYTHON", "") not in ("", "0")
