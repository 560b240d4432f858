"""Build script for the optional compiled fast path; everything else is in pyproject.toml.

``fstate.savepoint._speedups`` (savepoint/_speedups.c, plain C against the CPython API) decodes
canonical keyed state several times faster than the pure-Python core. It is optional: when no C
compiler is available the build skips it and fstate runs the plain Python decoders, which are the
reference (set FSTATE_PURE_PYTHON=1 to force them). ``fstate.savepoint._columnar``
(savepoint/_columnar.c) decodes the same layout straight into Arrow buffers (savepoint/columnar.py);
it is optional in the same way. Both include savepoint/_wire.h (what they share about Flink's
bytes), so a change there rebuilds both. ``fstate.savepoint._sst`` (savepoint/_sst.c) reads RocksDB's
table files for the columnar decoder (savepoint/rocksdb_native.py; LZ4, ZSTD and XXH3 from the
system's libraries when present); without it rocksdict reads them. ``fstate.savepoint._encoding``
(savepoint/_encoding.c) is the keyed writer's compiled encoder (savepoint/pair_encoding.py), optional
in the same way.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "fstate.savepoint._speedups",
            sources=["savepoint/_speedups.c"],
            depends=[
                "savepoint/_wire.h",
                "savepoint/_speedups_values.h",
                "savepoint/_speedups_sink.h",
                "savepoint/_speedups_skip.h",
                "savepoint/_speedups_top.h",
                "savepoint/_speedups_scan.h",
                "savepoint/_speedups_hash.h",
                "savepoint/_speedups_split.h",
                "savepoint/_speedups_drop.h",
            ],
            optional=True,
        ),
        Extension(
            "fstate.savepoint._columnar",
            sources=["savepoint/_columnar.c"],
            depends=[
                "savepoint/_wire.h",
                "savepoint/_buf.h",
                "savepoint/_columnar_values.h",
                "savepoint/_columnar_rows.h",
                "savepoint/_columnar_identity.h",
                "savepoint/_columnar_native.h",
            ],
            optional=True,
        ),
        Extension(
            "fstate.savepoint._sst",
            sources=["savepoint/_sst.c"],
            depends=["savepoint/_buf.h", "savepoint/_sst_codecs.h", "savepoint/_sst_merge.h", "savepoint/_sst_frame.h"],
            libraries=["dl"],
            optional=True,
        ),
        Extension(
            "fstate.savepoint._encoding",
            sources=["savepoint/_encoding.c"],
            depends=["savepoint/_wire.h", "savepoint/_buf.h", "savepoint/_speedups_hash.h",
                     "savepoint/_encoding_blocks.h", "savepoint/_encoding_arrow.h"],
            optional=True,
        ),
    ],
)
