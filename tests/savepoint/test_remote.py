"""Remote file systems: savepoints read in place from s3:// / s3a://, written there atomically, and
modified, verified and relocated there — against a real S3-protocol server (moto) that the test
suite starts on 127.0.0.1 (see the ``s3`` fixture in conftest.py).

Unit tests of the options, URI rules, retries and error messages need no server.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time

import pytest

from fstate.readers import tables
from fstate.savepoint import io as savepoint_io
from fstate.savepoint.builder import SavepointBuilder
from fstate.savepoint.errors import (ExternalPathError, FStateError, InvalidArgumentError, MissingStateFileError,
                                     SavepointNotFoundError, StorageError)
from fstate.savepoint.streams import resolve_path
from fstate.savepoint.loader import Savepoint
from fstate.savepoint.verify import verify
from tests.oracle_compare import assert_matches_dump, load_dump
from tests.support import sample_dirs, sample_snapshot

SAMPLES = sample_dirs()


def _remote(sample, scheme="s3") -> str:
    """The S3 URI of a shipped sample's snapshot (the fixture uploads samples/<name>/ to s3://samples/<name>/)."""
    snap = sample_snapshot(sample)
    return f"{scheme}://samples/{sample.name}/{snap.relative_to(sample).as_posix()}"


def _sample(name):
    return next(s for s in SAMPLES if s.name == name)


@pytest.fixture
def fs_defaults(s3):
    """The server's options as this process's defaults (what the CLI's --fs-option does)."""
    with savepoint_io.default_fs_options(s3.options):
        yield s3.options


# ---------------------------------------------------------------------------------------------
# options, URIs, retries (no server)


def test_option_spellings_and_scopes():
    c = savepoint_io.canonical_option
    assert c("endpoint") == c("endpoint_override") == c("Endpoint-URL") == "endpoint"
    assert c("s3.endpoint") == c("fs.s3a.endpoint") == c("s3a.endpoint") == "s3.endpoint"
    assert c("s3.path.style.access") == c("fs.s3a.path.style.access") == "s3.path_style"
    assert c("s3.access-key") == c("fs.s3a.access.key") == "s3.access_key"
    assert c("fs.s3a.endpoint.region") == "s3.region"
    assert c("gs.project_id") == "gcs.project_id"
    with pytest.raises(InvalidArgumentError, match="unknown file-system option 'endpoit'"):
        c("endpoit")
    with pytest.raises(InvalidArgumentError, match="unknown file-system option 'hdfs.region'"):
        c("hdfs.region")
    opts = savepoint_io.normalize_fs_options({"endpoint": "http://a:1", "s3.endpoint": "http://b:2", "path_style": True,
                                    "gcs.anonymous": "true"})
    assert savepoint_io.options_for("s3", opts) == {"endpoint": "http://b:2", "path_style": "true"}
    assert savepoint_io.options_for("gcs", opts) == {"endpoint": "http://a:1", "anonymous": "true"}
    assert "secret_key=***" in savepoint_io.describe_options(savepoint_io.normalize_fs_options({"secret_key": "hush"}))


def test_options_from_yaml_env_defaults_and_calls(tmp_path, monkeypatch):
    cfg = tmp_path / "fs.yaml"
    cfg.write_text("s3:\n  endpoint: http://from-yaml:9000\n  path.style.access: true\nregion: eu-west-1\n")
    monkeypatch.setenv(savepoint_io.FS_CONFIG_ENV, str(cfg))
    monkeypatch.setenv(savepoint_io.FS_OPTIONS_ENV, "region=us-east-2,retries=5")
    opts = dict(savepoint_io.resolve_fs_options())
    assert opts == {"s3.endpoint": "http://from-yaml:9000", "s3.path_style": "true", "region": "us-east-2",
                    "retries": "5"}
    monkeypatch.setenv(savepoint_io.FS_OPTIONS_ENV, json.dumps({"s3": {"region": "ap-south-1"}}))
    try:
        savepoint_io.set_default_fs_options({"retries": "2"})
        opts = dict(savepoint_io.resolve_fs_options({"retries": 7}))
    finally:
        savepoint_io.set_default_fs_options(None)
    assert opts["s3.region"] == "ap-south-1" and opts["retries"] == "7" and opts["region"] == "eu-west-1"
    cfg.write_text("- not a mapping\n")
    with pytest.raises(InvalidArgumentError, match="mapping"):
        savepoint_io.resolve_fs_options()
    assert savepoint_io.parse_fs_option_args(["a=b=c", " k = v "]) == {"a": "b=c", "k": "v"}
    with pytest.raises(InvalidArgumentError, match="key=value"):
        savepoint_io.parse_fs_option_args(["novalue"])


def test_uri_rules():
    assert savepoint_io.split_uri("s3a://bkt/a//b/./c/") == ("s3", "bkt", "a/b/c")
    assert savepoint_io.is_within("s3://bkt/sp/x", "s3a://bkt/sp") and savepoint_io.is_within("s3p://bkt/sp", "s3://bkt/sp/")
    assert not savepoint_io.is_within("s3://bkt/sp2/x", "s3://bkt/sp")          # another prefix
    assert not savepoint_io.is_within("s3://other/sp/x", "s3://bkt/sp")         # another bucket
    assert not savepoint_io.is_within("gs://bkt/sp/x", "s3://bkt/sp")           # another scheme
    assert not savepoint_io.is_within("s3://bkt/sp/../other/x", "s3://bkt/sp")  # '..' resolved
    assert not savepoint_io.is_within("/tmp/sp/x", "s3://bkt/sp") and not savepoint_io.is_within("s3://bkt/sp/x", "/tmp/sp")
    assert savepoint_io.join("s3://bkt/sp/", "f") == "s3://bkt/sp/f" and savepoint_io.parent_of("s3://bkt/sp/_metadata") == "s3://bkt/sp"
    assert savepoint_io.parent_of("s3://bkt/x") == "s3://bkt" and savepoint_io.canonical("s3a://bkt/a/") == "s3://bkt/a"
    assert resolve_path("s3://bkt/sp/f", "s3://bkt/sp") == "s3://bkt/sp/f"
    with pytest.raises(ExternalPathError, match="s3://other/sp/f lies outside"):
        resolve_path("s3://other/sp/f", "s3://bkt/sp")
    assert resolve_path("s3://other/sp/f", "s3://bkt/sp", allow_external=True) == "s3://other/sp/f"
    with pytest.raises(ExternalPathError):
        resolve_path("file:/etc/passwd", "s3://bkt/sp")
    with pytest.raises(StorageError, match="'abfs://' is not supported"):
        savepoint_io.io_for("abfs://c@acct/x")


class _FakeFile:
    def __init__(self, data):
        self.data = data

    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False

    def close(self):
        pass

    def size(self):
        return len(self.data)

    def read(self, n=None):
        return self.data

    def read_at(self, n, offset):
        return self.data[offset:offset + n]


class _FlakyFS:
    """Fails the first ``fail`` opens with ``error``, then serves ``data``."""

    def __init__(self, error, fail, data=b"0123456789"):
        self.error, self.fail, self.data, self.calls = error, fail, data, 0

    def open_input_file(self, path):
        self.calls += 1
        if self.calls <= self.fail:
            raise self.error
        return _FakeFile(self.data)

    def get_file_info(self, path):
        import pyarrow.fs as pafs

        return pafs.FileInfo(path, pafs.FileType.Directory)


def _flaky_io(error, fail, **opts):
    io = savepoint_io.RemoteFileIO("s3", "", savepoint_io.normalize_fs_options({"retry_wait": 0, "access_key": "k", "secret_key": "s",
                                                            **opts}))
    io._fs = _FlakyFS(error, fail)
    return io


def test_throttling_and_network_errors_are_retried_then_named():
    slow = OSError("When reading information for key 'x' in bucket 'b': AWS Error SLOW_DOWN during HeadObject "
                   "operation: Please reduce your request rate.")
    io = _flaky_io(slow, 2)
    assert io.read_range("s3://b/x", 2, 100) == b"23456789"  # never more than the object holds
    assert io._fs.calls == 3
    io = _flaky_io(slow, 10, retries=4)
    with pytest.raises(StorageError) as e:
        io.read("s3://b/x")
    assert io._fs.calls == 4 and e.value.transient
    assert str(e.value).startswith("s3://b/x: throttled by the server") and "4 attempts" in str(e.value)
    net = OSError("AWS Error NETWORK_CONNECTION during GetObject operation: curlCode: 7, Could not connect")
    io = _flaky_io(net, 1)
    assert io.read("s3://b/x") == b"0123456789" and io._fs.calls == 2


def test_denied_and_missing_are_not_retried():
    denied = OSError("When reading information for key 'x' in bucket 'b': AWS Error ACCESS_DENIED during HeadObject "
                     "operation: No response body.")
    io = _flaky_io(denied, 10)
    with pytest.raises(StorageError, match=r"^s3://b/x: access denied \(read\)"):
        io.read("s3://b/x")
    assert io._fs.calls == 1
    io = _flaky_io(FileNotFoundError(2, "Path does not exist 'b/x'"), 10)
    with pytest.raises(MissingStateFileError, match="^s3://b/x: file does not exist"):
        io.read("s3://b/x")
    assert io._fs.calls == 1


def test_no_credentials_message(monkeypatch, tmp_path):
    for k in ("AWS_ACCESS_KEY_ID", "AWS_PROFILE", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
              "AWS_CONTAINER_CREDENTIALS_FULL_URI"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    io = savepoint_io.RemoteFileIO("s3", "", savepoint_io.normalize_fs_options({"retry_wait": 0}))
    io._fs = _FlakyFS(OSError("AWS Error ACCESS_DENIED during HeadObject operation"), 10)
    with pytest.raises(StorageError, match="no AWS credentials found"):
        io.read("s3://b/x")


def test_gcs_file_system_from_options():
    import pyarrow.fs as pafs

    if not hasattr(pafs, "GcsFileSystem"):
        pytest.skip("pyarrow without GCS")
    io = savepoint_io.io_for("gs://bkt/sp", {"gcs.anonymous": "true", "gcs.endpoint": "http://127.0.0.1:9", "retries": 1})
    assert isinstance(io.fs, pafs.GcsFileSystem)  # made, not used: no request leaves the machine
    assert io._p("gs://bkt/sp/_metadata") == "bkt/sp/_metadata" and io.accepts("gcs://bkt/x")


# ---------------------------------------------------------------------------------------------
# reading in place


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda p: p.name)
def test_samples_read_from_s3_match_flink_dump(fs_defaults, sample):
    _, dump = load_dump(sample)
    assert assert_matches_dump(_remote(sample), dump) == len(dump["operators"])


def test_every_way_to_name_a_remote_savepoint(s3):
    sample = _sample("keyed-hashmap-checkpoint")
    uri = _remote(sample)
    for form in (uri, uri + "/", uri.replace("s3://", "s3a://"), uri + "/_metadata",
                 f"s3://samples/{sample.name}"):  # a directory holding exactly one chk-N
        sp = Savepoint.open(form, fs_options=s3.options)
        assert savepoint_io.canonical(sp.path) == savepoint_io.canonical(uri), form
        assert [o.uid for o in sp.operators] == [o.uid for o in Savepoint.open(str(sample_snapshot(sample))).operators]
    with pytest.raises(SavepointNotFoundError, match="no such file or directory"):
        Savepoint.open("s3://samples/nothing-here", fs_options=s3.options)
    with pytest.raises(StorageError, match="^s3://no-such-bucket/sp: bucket 'no-such-bucket' does not exist"):
        Savepoint.open("s3://no-such-bucket/sp", fs_options=s3.options)


def _big_keyed(target: str, n: int, options) -> None:
    """A keyed savepoint whose two streams are files of a few MB (written without Spark)."""
    from fstate.savepoint import handles
    from fstate.savepoint import keyed
    from fstate.savepoint.types import LONG, STRING
    from fstate.savepoint.types.hashing import key_group_for_hash, key_group_range

    maxp, p = 128, 2
    meta = keyed.KeyedBackendMeta(6, False, STRING, [keyed.value_state_meta("total", "VALUE", LONG)])
    enc = keyed.PairEncoder(meta, 0, maxp)
    b = SavepointBuilder(target, fs_options=options)
    op = b.operator("keyed", parallelism=p, max_parallelism=maxp)
    for sub in range(p):
        lo, hi = key_group_range(sub, p, maxp)
        by: dict = {}
        for i in range(n):
            k = f"key-{i}-" + "x" * 40
            kg = key_group_for_hash(STRING.java_hash(k), maxp)
            if lo <= kg <= hi:
                by.setdefault(kg, {}).setdefault(0, []).extend(enc.pairs(kg, k, i))
        data, offsets = keyed.encode_canonical_stream(meta, lo, hi, by)
        op.subtask(sub).managed_keyed = handles.KeyGroupsHandle(handles.SAVEPOINT_KEY_GROUPS, lo, offsets, b.stream(data))
    b.commit()


def test_no_state_file_is_read_whole_on_the_driver(s3, monkeypatch):
    s3.make_bucket("out")
    target, n = "s3://out/big/sp", 40000
    _big_keyed(target, n, s3.options)
    whole, ranges = [], []
    real_read, real_range = savepoint_io.RemoteFileIO.read, savepoint_io.RemoteFileIO.read_range

    def read(self, path):
        whole.append(path)
        return real_read(self, path)

    def read_range(self, path, offset, length):
        data = real_range(self, path, offset, length)
        ranges.append((path, offset, length, len(data)))
        return data

    monkeypatch.setattr(savepoint_io.RemoteFileIO, "read", read)
    monkeypatch.setattr(savepoint_io.RemoteFileIO, "read_range", read_range)
    monkeypatch.setattr(tables, "SPLIT_BYTES", 256 * 1024)  # big handles split into key-group ranges
    sp = Savepoint.open(target, fs_options=s3.options)
    sizes = {p: sp.io.size(p) for p in savepoint_io.io_for(target, s3.options).list_files(target)}
    assert sorted(sizes.values())[-1] > 1024 * 1024
    table = tables.keyed_table(sp.operator("keyed"))
    # planning: `_metadata` whole, the header of each big stream by a 64 KB probe
    assert [p for p in whole] == [target + "/_metadata"]
    assert ranges and all(n_read <= 64 * 1024 for *_, n_read in ranges), ranges
    assert len(table.partitions) > 4 and all(p.source.fs_options == sp.fs_options for p in table.partitions)
    whole.clear()
    ranges.clear()
    rows = sorted(table.rows())  # what the executors do, partition by partition
    assert not whole and len(ranges) >= 2 * len(table.partitions)
    assert all(n_read <= 2 * tables.SPLIT_BYTES for *_, n_read in ranges)
    assert rows == sorted((f"key-{i}-" + "x" * 40, i) for i in range(n))
    assert savepoint_io.io_for(target, s3.options).read_range(target + "/_metadata", 10, 1 << 40) == \
        real_read(sp.io, target + "/_metadata")[10:]  # a corrupt length never reads past the end


@pytest.mark.spark
def test_spark_executors_read_s3_with_the_options_of_the_call(spark, s3):
    from fstate.readers.reader import SavepointReader

    sample = _sample("keyed-hashmap-savepoint")
    local = SavepointReader(str(sample_snapshot(sample)), spark)
    remote = SavepointReader(_remote(sample, "s3a"), spark, fs_options=s3.options)  # executors have no defaults
    for uid in ("keyed", "window-agg"):
        assert sorted(map(repr, remote.keyed(uid).collect())) == sorted(map(repr, local.keyed(uid).collect()))
    assert remote.keyed("keyed").where("key = 'k-7'").count() == 1
    ops = _sample("operator-state-hashmap-savepoint")
    a = SavepointReader(_remote(ops), spark, fs_options=s3.options).list_state("lists", "longs").collect()
    b = SavepointReader(str(sample_snapshot(ops)), spark).list_state("lists", "longs").collect()
    assert sorted(a) == sorted(b) and a


def test_verify_remote(s3):
    for sample in SAMPLES:
        report = verify(_remote(sample), fs_options=s3.options)
        assert report.ok, report.to_dict()


# ---------------------------------------------------------------------------------------------
# writing


def _operator_stream(n: int) -> bytes:
    from fstate.savepoint import operator as operator_state
    from fstate.savepoint.types import LONG

    return operator_state.encode_operator_stream([(operator_state.list_state_meta("offsets", LONG), list(range(n)))])


def _build(target, options, n=5000, overwrite=False, fail=False):
    from fstate.savepoint import handles
    from fstate.savepoint import operator as operator_state
    from fstate.savepoint.types import LONG

    b = SavepointBuilder(target, overwrite=overwrite, fs_options=options)
    src = b.operator("src", parallelism=2, max_parallelism=128)
    for sub in range(2):
        data, offsets = operator_state.encode_operator_stream([(operator_state.list_state_meta("offsets", LONG),
                                                   list(range(sub * n, (sub + 1) * n)))])
        src.subtask(sub).managed_operator = handles.OperatorStreamHandle(offsets, b.stream(data))
    if fail:
        b.abort()
        return None
    return b.commit()


def _offsets(uri, options):
    sp = Savepoint.open(uri, fs_options=options)
    return sorted(v for _, _, v in sp.operator("src").list_state("offsets"))


def test_builder_writes_files_under_the_prefix_and_metadata_last(s3):
    opts = s3.options
    s3.make_bucket("out")
    target = "s3://out/builder/sp"
    from fstate.savepoint import handles

    b = SavepointBuilder(target, fs_options=opts)
    op = b.operator("src", parallelism=1, max_parallelism=128)
    from fstate.savepoint import operator as operator_state
    from fstate.savepoint.types import LONG

    data, offsets = operator_state.encode_operator_stream([(operator_state.list_state_meta("offsets", LONG), list(range(5000)))])
    op.subtask(0).managed_operator = handles.OperatorStreamHandle(offsets, b.stream(data))
    written = s3.keys(target)
    assert len(written) == 1 and "_metadata" not in written  # the state file is there, the savepoint is not
    with pytest.raises(SavepointNotFoundError):
        Savepoint.open(target, fs_options=opts)
    assert b.commit() == target
    assert s3.keys(target) == sorted(written + ["_metadata"])
    # an upload that did not arrive whole is caught before `_metadata` is written
    b = SavepointBuilder("s3://out/builder/short", fs_options=opts)
    op = b.operator("src", parallelism=1, max_parallelism=128)
    op.subtask(0).managed_operator = handles.OperatorStreamHandle(offsets, b.stream(data))
    (name,) = s3.keys("s3://out/builder/short")
    with s3.filesystem().open_output_stream(f"out/builder/short/{name}") as f:
        f.write(data[:-10])
    with pytest.raises(StorageError, match=f"short/{name}: uploaded state file has {len(data) - 10} bytes"):
        b.commit()
    assert s3.keys("s3://out/builder/short") == []
    assert _offsets(target, opts) == list(range(5000))
    with pytest.raises(InvalidArgumentError, match="target already exists"):
        SavepointBuilder(target, fs_options=opts)


def test_overwrite_replaces_and_abort_cleans_up(s3):
    opts = s3.options
    s3.make_bucket("out")
    target = "s3://out/overwrite/sp"
    s3.filesystem().open_output_stream("out/overwrite/sp/README").close()  # not ours: never deleted
    _build(target, opts, n=4000)
    first = set(s3.keys(target))
    _build(target, opts, n=3000, overwrite=True)
    second = set(s3.keys(target))
    assert _offsets(target, opts) == list(range(6000))
    assert "README" in second and not (first - {"_metadata", "README"}) & second  # old state files gone
    _build(target, opts, n=2000, overwrite=True, fail=True)
    assert set(s3.keys(target)) == second  # an aborted write leaves what was there
    assert _offsets(target, opts) == list(range(6000))
    with pytest.raises(StorageError, match="bucket 'no-such-bucket' does not exist"):
        _build("s3://no-such-bucket/sp", opts)


@pytest.mark.spark
def test_bootstrap_and_modify_on_s3(spark, s3):
    from fstate.readers.reader import SavepointReader
    from fstate.writers.modify import SavepointModifier
    from fstate.writers.writer import SavepointWriter

    opts = s3.options
    s3.make_bucket("out")
    rows = [(f"k-{i}", i, [f"e{i}"] * (i % 3)) for i in range(3000)]
    df = spark.createDataFrame(rows, "key string, total long, events array<string>")
    out = "s3://out/boot/sp"
    (SavepointWriter(128, spark, inline_threshold=1024, fs_options=opts)
     .with_keyed_state("keyed", df, parallelism=3)
     .with_list_state("src", "offsets", list(range(4000)), type="LONG", parallelism=2)
     .write(out))
    keys = s3.keys(out)
    assert "_metadata" in keys and len(keys) >= 4 and not any(k.endswith(".tmp") for k in keys)
    got = SavepointReader(out, spark, fs_options=opts).keyed("keyed").collect()
    assert sorted((r.key, r.total, list(r.events or [])) for r in got) == sorted(
        (k, t, e) for k, t, e in rows)
    assert verify(out, fs_options=opts).ok
    # modify with Spark: re-key to another max parallelism, remote to remote
    new = "s3://out/boot/rescaled"
    m = SavepointModifier(out, spark, fs_options=opts)
    m.set_max_parallelism("keyed", 256)
    m.write(new)
    sp = Savepoint.open(new, fs_options=opts)
    assert sp.operator("keyed").max_parallelism == 256
    again = SavepointReader(new, spark, fs_options=opts, allow_external_paths=True).keyed("keyed").collect()
    assert sorted(map(repr, again)) == sorted(map(repr, got))


def test_shallow_modify_deps_external_paths_and_relocate_between_buckets(s3):
    from fstate.writers.modify import SavepointModifier, dependencies, relocate

    opts = s3.options
    sample = _sample("keyed-hashmap-savepoint")
    base = s3.upload(sample_snapshot(sample), "s3://bucket-a/base")
    new = "s3://out/shallow/sp"
    SavepointModifier(base, fs_options=opts).remove_operator("window-agg").write(new)
    assert dependencies(new, fs_options=opts) == {base: 3}
    sp = Savepoint.open(new, fs_options=opts)
    with pytest.raises(ExternalPathError, match="s3://bucket-a/base/.* lies outside the savepoint directory"):
        list(tables.keyed_table(sp.operator("keyed")).rows())
    report = verify(new, fs_options=opts)
    assert not report.ok and all(p.startswith("s3://bucket-a/base/") for p in report.external)
    assert verify(new, fs_options=opts, allow_external_paths=True).ok
    expected = sorted(map(repr, tables.keyed_table(Savepoint.open(str(sample_snapshot(sample))).operator("keyed")).rows()))
    ext = Savepoint.open(new, fs_options=opts, allow_external_paths=True)
    assert sorted(map(repr, tables.keyed_table(ext.operator("keyed")).rows())) == expected
    # the base moves to another bucket: NEW breaks, relocate mends it
    moved = s3.upload(sample_snapshot(sample), "s3://bucket-b/moved")
    fs = s3.filesystem()
    fs.delete_dir_contents("bucket-a/base")
    with pytest.raises(MissingStateFileError, match="s3://bucket-a/base/"):
        list(tables.keyed_table(Savepoint.open(new, fs_options=opts, allow_external_paths=True)
                            .operator("keyed")).rows())
    # NEW's handles name another bucket, outside NEW: pointing them there needs the permission
    with pytest.raises(ExternalPathError, match="--allow-external-paths"):
        relocate(new, base.replace("s3://", "s3a://"), moved, fs_options=opts)
    assert relocate(new, base.replace("s3://", "s3a://"), moved, fs_options=opts, allow_external_paths=True) == 3
    assert "_metadata.before-relocate" in s3.keys(new)
    sp = Savepoint.open(new, fs_options=opts, allow_external_paths=True)
    assert sorted(map(repr, tables.keyed_table(sp.operator("keyed")).rows())) == expected
    assert dependencies(new, fs_options=opts) == {moved: 3}


def test_deep_modify_from_s3_is_self_contained(s3, tmp_path):
    from fstate.writers.modify import SavepointModifier, dependencies

    opts = s3.options
    sample = _sample("keyed-hashmap-savepoint")
    base = _remote(sample)
    for target in ("s3://out/deep/sp", str(tmp_path / "local-copy")):  # to S3, and from S3 to a local disk
        SavepointModifier(base, fs_options=opts).rename_uid("keyed", "keyed-v2").write(target, deep=True)
        assert dependencies(target, fs_options=opts) == {}
        report = verify(target, fs_options=opts)
        assert report.ok and not report.external, report.to_dict()
        sp = Savepoint.open(target, fs_options=opts)
        local = Savepoint.open(str(sample_snapshot(sample)))
        assert (sorted(map(repr, tables.keyed_table(sp.operator("keyed-v2")).rows()))
                == sorted(map(repr, tables.keyed_table(local.operator("keyed")).rows())))


# ---------------------------------------------------------------------------------------------
# the command line


def _cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "fstate.cli.app", *args], capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "200", **(env or {})}, timeout=600)


def _in_process(*args, env=None) -> subprocess.CompletedProcess:
    """``_cli`` in this process (the same command object, so the same exit codes and lines): for the
    cases after the one real process that shows a behaviour; ``env`` set for the call only."""
    res = _invoke(*args, env=env)
    return subprocess.CompletedProcess(args, res.exit_code, res.stdout, res.stderr)


def _invoke(*args, env=None):
    """A command in this process (one that runs Spark: on the test session's Spark, not a JVM start-up
    of its own): its exit code and what it printed."""
    from typer.testing import CliRunner

    from fstate.cli.app import app

    res = CliRunner().invoke(app, list(args), env={"COLUMNS": "200", **(env or {})})
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    return res


def _fs_args(s3):
    return [a for k, v in s3.options.items() for a in ("--fs-option", f"{k}={v}")]


def test_cli_info_verify_deps_modify_relocate_on_s3(s3, tmp_path):
    s3.make_bucket("out")  # not left to the module's earlier tests (the Spark ones run on another worker)
    sample = _sample("operator-state-hashmap-savepoint")
    uri = _remote(sample, "s3a")
    res = _cli("info", uri, "--json", *_fs_args(s3))
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["path"] == uri and {o["uid"] for o in data["operators"]} >= {"lists"}
    cfg = tmp_path / "fs.yaml"
    cfg.write_text("s3:\n  endpoint: %s\n  path.style.access: true\n" % s3.endpoint)  # keys from the environment
    # the rest in this process: what a real process adds (exit codes, one-line errors) is shown above
    # and by test_cli_errors_name_the_uri
    res = _in_process("verify", uri, "--fs-config", str(cfg))
    assert res.returncode == 0 and "OK" in res.stdout, res.stdout + res.stderr
    res = _in_process("modify", uri, "--out", "s3://out/cli/modified", "--remove", "lists", *_fs_args(s3))
    assert res.returncode == 0, res.stderr
    res = _in_process("deps", "s3://out/cli/modified", "--json",
                      env={savepoint_io.FS_OPTIONS_ENV: json.dumps(s3.options)})
    assert res.returncode == 0 and json.loads(res.stdout)["dependencies"], res.stderr
    res = _in_process("modify", uri, "--out", "s3://out/cli/modified", "--remove", "lists", *_fs_args(s3))
    assert res.returncode == 2 and "target already exists" in res.stderr


@pytest.mark.spark
def test_cli_read_and_bootstrap_on_s3(spark, s3, tmp_path):
    s3.make_bucket("out")
    sample = _sample("keyed-hashmap-savepoint")
    res = _invoke("read", _remote(sample), "--uid", "keyed", "--json", "-n", "1000", "--master", "local[2]",
                  *_fs_args(s3))
    assert res.exit_code == 0, res.stderr
    assert len(res.stdout.strip().splitlines()) == 1000
    data = tmp_path / "rows.json"
    data.write_text("\n".join(json.dumps({"user": f"u{i}", "total": i}) for i in range(2000)))
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"""max_parallelism: 128
operators:
  - uid: counter
    parallelism: 2
    keyed:
      source: {{path: {data}, format: json}}
      key: user
      states: {{total: LONG}}
""")
    out = "s3://out/cli/boot"
    res = _invoke("bootstrap", "--spec", str(spec), "--out", out, "--master", "local[2]", *_fs_args(s3))
    assert res.exit_code == 0, res.stderr
    rows = list(tables.keyed_table(Savepoint.open(out, fs_options=s3.options).operator("counter")).rows())
    assert sorted(rows) == sorted((f"u{i}", i) for i in range(2000))
    res = _invoke("bootstrap", "--spec", str(spec), "--out", out, *_fs_args(s3))
    assert res.exit_code == 2 and "target already exists" in res.stderr


def _one_line_exit_2(res, *needles):
    assert res.returncode == 2, res.stdout + res.stderr
    assert "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
    for n in needles:
        assert n in res.stderr, res.stderr


def test_cli_errors_name_the_uri(s3):
    fs = _fs_args(s3)
    _one_line_exit_2(_cli("info", "s3://no-such-bucket/sp", *fs), "s3://no-such-bucket/sp",
                     "bucket 'no-such-bucket' does not exist")
    # the other errors in this process (one real process above shows the exit code and the one line)
    _one_line_exit_2(_in_process("info", "s3://samples/missing/sp", *fs), "s3://samples/missing/sp",
                     "no such file or directory")
    dead = f"http://127.0.0.1:{_dead_port()}"
    _one_line_exit_2(_in_process("info", "s3://samples/x", "--fs-option", f"endpoint={dead}", "--fs-option",
                                 "retries=2", "--fs-option", "retry_wait=0"),
                     "s3://samples/x", "cannot reach the storage endpoint", "after 2 attempts")
    _one_line_exit_2(_in_process("info", "s3://samples/x", "--fs-option", "endpoint=x", "--fs-option", "colour=blue"),
                     "unknown file-system option 'colour'")
    _one_line_exit_2(_in_process("modify", _remote(_sample("operator-state-hashmap-savepoint")), "--out",
                                 "s3://no-such-bucket/sp", "--remove", "lists", *fs),
                     "s3://no-such-bucket/sp", "bucket 'no-such-bucket' does not exist")


def _dead_port() -> int:
    from tests.s3_support import free_port

    return free_port()  # nothing listens there


@pytest.fixture(scope="module")
def s3_auth(tmp_path_factory):
    """A second server that checks credentials (moto's IAM auth)."""
    from tests.s3_support import start_server

    server = start_server(tmp_path_factory.mktemp("moto-auth"), extra_env={"INITIAL_NO_AUTH_ACTION_COUNT": "0"})
    yield server
    server.stop()


def test_cli_access_denied_and_no_credentials(s3_auth, tmp_path):
    opts = {k: v for k, v in s3_auth.options.items() if k not in ("access_key", "secret_key")}
    fs = [a for k, v in {**opts, "retry_wait": 0}.items() for a in ("--fs-option", f"{k}={v}")]
    _one_line_exit_2(_cli("info", "s3://bkt/sp", *fs,
                          env={"AWS_ACCESS_KEY_ID": "AKIAWRONGWRONGWRONG", "AWS_SECRET_ACCESS_KEY": "wrong"}),
                     "s3://bkt/sp", "access denied")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_") and k != savepoint_io.FS_OPTIONS_ENV}
    env.update({"AWS_EC2_METADATA_DISABLED": "true", "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
                "AWS_CONFIG_FILE": str(tmp_path / "none"), "COLUMNS": "200"})
    res = subprocess.run([sys.executable, "-m", "fstate.cli.app", "info", "s3://bkt/sp", *fs], capture_output=True,
                         text=True, env=env, timeout=300)
    _one_line_exit_2(res, "s3://bkt/sp", "no AWS credentials found")


# ---------------------------------------------------------------------------------------------
# all or nothing under SIGKILL, on S3


def test_killed_writer_on_s3_leaves_no_partial_savepoint(s3, tmp_path, exhaustive):
    from tests.writers.test_kill import WRITER, kill_before_metadata, random_kills

    s3.make_bucket("out")
    env = {**os.environ, savepoint_io.FS_OPTIONS_ENV: json.dumps(s3.options)}
    t0 = time.time()
    subprocess.run([sys.executable, "-c", WRITER, "s3://out/kill/full", "60000"], check=True, capture_output=True,
                   env=env, timeout=300)
    full = time.time() - t0
    rng = random.Random(5)
    seen = set()
    for i in random_kills(exhaustive, 3, 6):
        target = f"s3://out/kill/sp{i}"
        proc = subprocess.Popen([sys.executable, "-c", WRITER, target, "60000"], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.05, full * 1.1))
        proc.kill()
        proc.wait()
        if "_metadata" in s3.keys(target):
            assert verify(target, fs_options=s3.options).ok
            seen.add("complete")
        else:
            with pytest.raises(FStateError):
                Savepoint.open(target, fs_options=s3.options)
            seen.add("absent")
    # one kill inside the write on every machine: all state objects uploaded, `_metadata` not
    target = "s3://out/kill/between"
    kill_before_metadata([sys.executable, "-c", WRITER, target, "60000"], env=env)
    assert s3.keys(target) and "_metadata" not in s3.keys(target)
    with pytest.raises(FStateError):
        Savepoint.open(target, fs_options=s3.options)


# ---------------------------------------------------------------------------------------------
# what fstate writes to S3 restores in real Flink


@pytest.mark.flink
@pytest.mark.spark
def test_bootstrapped_on_s3_restores_in_flink(spark, s3, tmp_path):
    from tests.flink import harness
    from tests.flink.restore import restore_and_dump
    from tests.oracle_compare import norm

    harness.require_flink("2.3.0")
    from fstate.writers.writer import SavepointWriter

    s3.make_bucket("out")
    rows = [(f"k-{i}", i * 3, [f"e{i}"] * (i % 3)) for i in range(500)]
    df = spark.createDataFrame(rows, "key string, total long, events array<string>")
    out = "s3://out/flink/sp"
    (SavepointWriter(128, spark, inline_threshold=1024, fs_options=s3.options)
     .with_keyed_state("keyed", df, parallelism=2)
     .with_list_state("src", "offsets", [3, 1, 4, 1, 5], type="LONG", parallelism=1)
     .write(out))
    local = s3.download(out, tmp_path / "sp")
    assert sorted(os.listdir(local)) == sorted(s3.keys(out)) and len(os.listdir(local)) > 2
    dump = restore_and_dump({"savepoint": str(local), "operators": [
        {"uid": "keyed", "kind": "keyed", "parallelism": 3, "key_type": "STRING", "states": [
            {"name": "total", "kind": "VALUE", "type": "LONG"}, {"name": "events", "kind": "LIST", "type": "STRING"}]},
        {"uid": "src", "kind": "operator", "parallelism": 1, "states": [
            {"name": "offsets", "mode": "SPLIT_DISTRIBUTE", "type": "LONG"}]}]})
    assert not dump.get("warnings"), dump["warnings"]
    keyed = {e["state"]: {norm(k): norm(v) for k, v in e["entries"]}
             for o in dump["operators"] if o["uid"] == "keyed" for e in o["keyed_state"]}
    assert keyed["total"] == {k: t for k, t, _ in rows}
    assert keyed["events"] == {k: e for k, _, e in rows if e}
    offsets = sorted(v for o in dump["operators"] if o["uid"] == "src" for e in o["list_state"] for v in e["values"])
    assert offsets == [1, 1, 3, 4, 5]


def test_cli_fs_options_last_as_long_as_the_command(tmp_path, monkeypatch):
    """--fs-option run in-process (CliRunner, a notebook): the process defaults and FSTATE_FS_OPTIONS in
    force after the command are those before it."""
    monkeypatch.delenv(savepoint_io.FS_OPTIONS_ENV, raising=False)
    monkeypatch.delenv(savepoint_io.FS_CONFIG_ENV, raising=False)
    before = savepoint_io.resolve_fs_options()
    res = _in_process("info", str(tmp_path / "missing"), "--fs-option", "region=us-east-1")
    assert res.returncode == 2
    assert savepoint_io.resolve_fs_options() == before
    assert savepoint_io.FS_OPTIONS_ENV not in os.environ
