"""fstate: Apache Flink savepoints and checkpoints, read, written and modified from Python and Spark.

The public API, imported on first use (``import fstate`` starts neither Spark nor a JVM)::

    fstate.open(path)                        # state tables as Arrow, pandas, polars or Spark (no Spark
                                             #   unless asked for or above the size threshold)
    fstate.Savepoint.open(path)              # _metadata, operators, states (no Spark)
    fstate.SavepointReader(path)             # state tables as Spark DataFrames
    fstate.SavepointWriter(max_parallelism)  # bootstrap
    fstate.SavepointModifier(base)           # modify
    fstate.SavepointUpgrader(old, ...)       # carry state to a changed SQL query or Flink release
    fstate.verify(path)                      # check every file and state region
    fstate.state_sizes(path)                 # where the state is: sizes, top keys, skew, rescale preview
    fstate.state_growth(old, new)            # which operators, states and keys grew or shrank
    fstate.FStateError                       # the root of every error fstate raises for bad input
    fstate.spark_errors()                    # a with block: fstate errors inside Spark raised as themselves
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

#: public name -> the module that defines it
_EXPORTS = {
    "open": "fstate.readers.api",
    "SavepointState": "fstate.readers.api",
    "StateTable": "fstate.readers.api",
    "Savepoint": "fstate.savepoint.loader",
    "SavepointReader": "fstate.readers.reader",
    "SavepointWriter": "fstate.writers.writer",
    "SavepointModifier": "fstate.writers.modify",
    "SavepointUpgrader": "fstate.writers.upgrade",
    "UpgradeReport": "fstate.writers.upgrade",
    "verify": "fstate.savepoint.verify",
    "state_sizes": "fstate.readers.sizes",
    "SizesReport": "fstate.readers.sizes",
    "state_growth": "fstate.readers.sizes_growth",
    "GrowthReport": "fstate.readers.sizes_growth",
    "FStateError": "fstate.savepoint.errors",
    "InvalidArgumentError": "fstate.savepoint.errors",
    "CorruptStateError": "fstate.savepoint.errors",
    "SavepointNotFoundError": "fstate.savepoint.errors",
    "MissingStateFileError": "fstate.savepoint.errors",
    "UnknownOperatorError": "fstate.savepoint.errors",
    "UnknownStateError": "fstate.savepoint.errors",
    "SqlError": "fstate.savepoint.errors",
    "TransformError": "fstate.savepoint.errors",
    "StorageError": "fstate.savepoint.errors",
    "spark_errors": "fstate.savepoint.errors",
    "FStateWarning": "fstate.savepoint.errors",
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'fstate' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
