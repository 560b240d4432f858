"""Lets Spark find fstate's ``flink-savepoint`` data source by itself.

Spark 4 looks, once per JVM, for top-level Python modules named ``pyspark_*`` holding a
``DefaultSource`` and registers each on every session: with fstate installed,
``spark.read.format("flink-savepoint")`` works on a plain SparkSession. ``fstate.readers.register(spark)``
installs the variant with key push-down (see readers/datasource.py). This folder is installed as
the top-level package ``pyspark_fstate``, not as part of ``fstate.readers``.
"""

try:
    from fstate.readers.datasource import SavepointDataSource as DefaultSource
except ImportError:  # a broken install must not break Spark's look-up of other data sources
    pass
