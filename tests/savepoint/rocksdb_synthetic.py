"""A RocksDB database written as Flink's RocksDB backend writes it, for the RocksDB reader's tests
(tests/savepoint/test_rocksdb.py, test_columnar_layouts.py)."""

from __future__ import annotations

import gc
import os
from pathlib import Path
from typing import Iterable

from fstate.savepoint import keyed, rocksdb, streams


def write_database(path: Path, meta: keyed.KeyedBackendMeta, max_parallelism: int, lo: int, hi: int,
                   entries: Iterable[tuple[object, int, list[tuple[int, object]]]],
                   column_families: int | None = None) -> rocksdb.RocksDBSource:
    """Writes ``entries`` ((key, key group, [(state id, value), ...]), encoded by the canonical pair
    encoder) into a database at ``path`` with a column family for each of the first
    ``column_families`` states of ``meta`` (all by default), closes it, and gives its files as the
    RocksDBSource of key groups lo..hi (its meta-data stream: ``meta``'s proxy bytes)."""
    import rocksdict

    count = len(meta.states) if column_families is None else column_families
    encoders: dict[int, keyed.PairEncoder] = {}
    options = rocksdict.Options(raw_mode=True)
    options.create_if_missing(True)
    db = rocksdict.Rdict(str(path), options)
    families = [db.create_column_family(state.name, rocksdict.Options(raw_mode=True))
                for state in meta.states[:count]]
    for key, key_group, values in entries:
        for state_id, value in values:
            encoder = encoders.get(state_id)
            if encoder is None:
                encoder = encoders[state_id] = keyed.PairEncoder(meta, state_id, max_parallelism)
            for key_bytes, value_bytes in encoder.pairs(key_group, key, value):
                families[state_id][key_bytes] = value_bytes
    db.flush()
    del families
    db.close()
    del db
    gc.collect()  # rocksdict releases the database's files when its objects are gone
    files = tuple((name, streams.StreamSource(str(path / name), 0, (path / name).stat().st_size, label=name))
                  for name in sorted(os.listdir(path))
                  if name.endswith(".sst") or name.startswith("MANIFEST-") or name == "CURRENT")
    return rocksdb.RocksDBSource("synthetic", lo, hi,
                                 streams.StreamSource(None, data=keyed.proxy_bytes(meta), label="meta"), files)
