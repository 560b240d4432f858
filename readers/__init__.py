"""Reading savepoint state: Spark-free tables (``tables``), the ``flink-savepoint`` Spark data source
(``datasource``, options in ``options``), :class:`SavepointReader`, SQL views and diffs (``views``).

The data source on any SparkSession, in one line::

    import fstate.readers
    fstate.readers.register(spark)
    spark.read.format("flink-savepoint").option("path", p).option("uid", u).load()

fstate's own helpers (``get_spark``, ``SavepointReader``, ``register_views``, ``diff``) register it on
the sessions they create or are given. Importing this package does not import pyspark.
"""

from __future__ import annotations

from .options import FORMAT, source_options

_LAZY = {"SavepointReader": ".reader", "register_views": ".views", "diff": ".views", "get_spark": ".session"}


def register(spark) -> None:
    """Make ``spark.read.format("flink-savepoint")`` available on ``spark`` (any SparkSession),
    with key push-down; calling it again is harmless."""
    from .datasource import register as register_data_source

    register_data_source(spark)


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["FORMAT", "register", "source_options", "SavepointReader", "register_views", "diff", "get_spark"]
