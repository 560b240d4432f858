"""fstate: Apache Flink savepoints and checkpoints, read, written and modified from Python and Spark."""

__version__ = "0.1.0"
