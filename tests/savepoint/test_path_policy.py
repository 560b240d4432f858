"""The one path policy (savepoint/io/policy.py) at every entry point: crafted `_metadata` files whose
handles lead outside the savepoint directory are refused unless external paths are allowed, symlinks
are resolved, `deps` lists every outside file; a chk-N's own job shared/ and taskowned/ are inside."""

import dataclasses
import os
import shutil

import pytest
from typer.testing import CliRunner

from fstate.cli.app import app
from fstate.readers import tables
from fstate.savepoint import handles
from fstate.savepoint.errors import ExternalPathError
from fstate.savepoint.io.policy import PathPolicy, external_files
from fstate.savepoint.loader import Savepoint
from fstate.savepoint.metadata import write_metadata
from fstate.savepoint.verify import verify
from fstate.writers.modify import SavepointModifier, dependencies, relocate
from tests.support import sample_dirs, sample_snapshot

BASE = next(sample_snapshot(s) for s in sample_dirs() if s.name == "keyed-hashmap-savepoint")
STATE = "905444e7-6f1b-4c4c-9b84-82b75b6136ba"  # the keyed state file of subtask 0 (a relative handle)
runner = CliRunner()


def _craft(sp_dir, make_handle):
    """Replace subtask 0's keyed state handle of operator 'keyed' by ``make_handle(size)``."""
    sp = Savepoint.open(str(sp_dir))
    op = sp.operator("keyed").state
    s = op.subtasks[0]
    size = s.managed_keyed.delegate.size
    op.subtasks[0] = dataclasses.replace(s, managed_keyed=dataclasses.replace(s.managed_keyed,
                                                                               delegate=make_handle(size)))
    (sp_dir / "_metadata").write_bytes(write_metadata(sp.metadata))


def _setup(tmp_path, name):
    """(savepoint dir, the outside file) for one crafted case; the outside file is a copy of the real
    state file, so following it would read plausible rows (a wrong success)."""
    job = tmp_path / "job"
    sp_dir = job / "chk-7" if name.startswith("chk") else tmp_path / "sp"
    shutil.copytree(BASE, sp_dir)
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = outside / STATE
    shutil.copy(sp_dir / STATE, victim)
    for sub in ("shared", "taskowned", "chk-3"):
        (job / sub).mkdir(parents=True, exist_ok=True)
        shutil.copy(sp_dir / STATE, job / sub / STATE)
    if name == "rel-symlink":
        os.symlink(victim, sp_dir / "link")
    if name == "abs-symlink":
        os.symlink(victim, sp_dir / "link")
    if name == "rel-symlinked-dir":
        os.symlink(outside, sp_dir / "sub")
    if name == "state-file-symlinked":  # the very file the handle names is a symlink leading out
        os.remove(sp_dir / STATE)
        os.symlink(victim, sp_dir / STATE)
    return sp_dir, victim, job


def _handle(name, sp_dir, victim, job, size):
    return {
        "absolute": lambda: handles.FileHandle(str(victim), size),
        "file-uri": lambda: handles.FileHandle(f"file://{victim}", size),
        "file-uri-short": lambda: handles.FileHandle(f"file:{victim}", size),
        "etc-passwd": lambda: handles.FileHandle("/etc/passwd", os.path.getsize("/etc/passwd")),
        "abs-dotdot": lambda: handles.FileHandle(f"file:{sp_dir}/../outside/{STATE}", size),
        "rel-dotdot": lambda: handles.RelativeFileHandle(f"../outside/{STATE}", size),
        "rel-absolute": lambda: handles.RelativeFileHandle(str(victim), size),
        "rel-symlink": lambda: handles.RelativeFileHandle("link", size),
        "abs-symlink": lambda: handles.FileHandle(f"file:{sp_dir}/link", size),
        "rel-symlinked-dir": lambda: handles.RelativeFileHandle(f"sub/{STATE}", size),
        "state-file-symlinked": lambda: handles.RelativeFileHandle(STATE, size),
        "segment": lambda: handles.SegmentFileHandle(0, size, 0, f"file:{victim}", "logical-1"),
        "chk-other-exclusive": lambda: handles.FileHandle(f"file:{job}/chk-3/{STATE}", size),
        "chk-shared-escape": lambda: handles.FileHandle(f"file:{job}/shared/../chk-3/{STATE}", size),
        "chk-rel-other-exclusive": lambda: handles.RelativeFileHandle(f"../chk-3/{STATE}", size),
    }[name]()


OUTSIDE = ["absolute", "file-uri", "file-uri-short", "etc-passwd", "abs-dotdot", "rel-dotdot", "rel-absolute",
           "rel-symlink", "abs-symlink", "rel-symlinked-dir", "state-file-symlinked", "segment",
           "chk-other-exclusive", "chk-shared-escape", "chk-rel-other-exclusive"]


@pytest.fixture(params=OUTSIDE)
def crafted(request, tmp_path):
    name = request.param
    sp_dir, victim, job = _setup(tmp_path, name)
    _craft(sp_dir, lambda size: _handle(name, sp_dir, victim, job, size))
    return name, sp_dir, tmp_path


def _read(path, **kwargs):
    return list(tables.keyed_table(Savepoint.open(str(path), **kwargs).operator("keyed")).rows())


def test_core_api_refuses_by_default_and_allows_on_request(crafted):
    name, sp_dir, _ = crafted
    assert Savepoint.open(str(sp_dir)).allow_external_paths is False
    with pytest.raises(ExternalPathError) as e:
        _read(sp_dir)
    message = str(e.value)
    assert "\n" not in message and "outside the savepoint directory" in message
    assert "--allow-external-paths" in message and "allow_external_paths=True" in message
    if name != "etc-passwd":
        assert _read(sp_dir, allow_external_paths=True)


def test_deps_lists_every_outside_file(crafted):
    name, sp_dir, tmp_path = crafted
    found = dependencies(str(sp_dir))
    expected = "/etc" if name == "etc-passwd" else str(tmp_path / ("job/chk-3" if "chk" in name else "outside"))
    assert os.path.realpath(expected) in found, found
    res = runner.invoke(app, ["deps", str(sp_dir)])
    assert res.exit_code == 0 and "self-contained" not in res.output


def test_verify_reports_outside_files(crafted):
    _, sp_dir, _ = crafted
    report = verify(str(sp_dir))
    assert not report.ok and report.external
    assert any("outside the savepoint directory" in p for o in report.operators for p in o.problems)


@pytest.mark.parametrize("deep", [False, True])
def test_modify_neither_copies_nor_refers_to_outside_files(crafted, deep):
    _, sp_dir, tmp_path = crafted
    out = tmp_path / "new"
    with pytest.raises(ExternalPathError, match="--allow-external-paths"):
        SavepointModifier(str(sp_dir)).write(str(out), deep=deep)
    assert not out.exists()
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".")]


def test_cli_modify_deep_refuses_with_one_line(crafted):
    _, sp_dir, tmp_path = crafted
    out = tmp_path / "new"
    res = runner.invoke(app, ["modify", str(sp_dir), "--out", str(out), "--deep"])
    assert res.exit_code != 0 and not out.exists()
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "--allow-external-paths" in lines[0], res.output


def test_modify_deep_with_permission_makes_a_self_contained_copy(tmp_path):
    sp_dir, victim, job = _setup(tmp_path, "rel-symlink")
    _craft(sp_dir, lambda size: handles.RelativeFileHandle("link", size))
    out = tmp_path / "new"
    SavepointModifier(str(sp_dir), allow_external_paths=True).write(str(out), deep=True)
    assert dependencies(str(out)) == {} and not any(os.path.islink(out / n) for n in os.listdir(out))
    assert _read(out) == _read(BASE)


def test_chk_n_own_shared_and_taskowned_are_inside(tmp_path):
    """Flink's layout: an incremental checkpoint chk-N names files of <job dir>/shared by absolute
    paths (and taskowned/); they are the checkpoint's, read by default; deps still lists them."""
    for sub in ("shared", "taskowned"):
        root = tmp_path / sub
        root.mkdir()
        sp_dir, _, job = _setup(root, "chk")
        _craft(sp_dir, lambda size: handles.FileHandle(f"file:{job}/{sub}/{STATE}", size))
        assert _read(sp_dir) == _read(BASE)
        assert verify(str(sp_dir)).ok
        assert dependencies(str(sp_dir)) == {os.path.realpath(job / sub): 1}
    (tmp_path / "rel").mkdir()
    sp_dir, _, job = _setup(tmp_path / "rel", "chk")
    _craft(sp_dir, lambda size: handles.RelativeFileHandle(f"../shared/{STATE}", size))
    assert _read(sp_dir) == _read(BASE)


def test_relocate_refuses_to_point_outside(tmp_path):
    sp_dir, victim, _ = _setup(tmp_path, "absolute")
    _craft(sp_dir, lambda size: handles.FileHandle(f"file:{sp_dir}/{STATE}", size))
    with pytest.raises(ExternalPathError, match="--allow-external-paths"):
        relocate(str(sp_dir), str(sp_dir), str(tmp_path / "outside"))
    assert not (sp_dir / "_metadata.before-relocate").exists()
    res = runner.invoke(app, ["relocate", str(sp_dir), "--from", str(sp_dir), "--to", str(tmp_path / "outside")])
    assert res.exit_code != 0 and "--allow-external-paths" in res.output
    assert relocate(str(sp_dir), str(sp_dir), str(tmp_path / "outside"), allow_external_paths=True) == 1
    assert _read(sp_dir, allow_external_paths=True) == _read(BASE)


def test_policy_unit(tmp_path):
    policy = PathPolicy.for_snapshot("/ck/job/chk-4")
    assert policy.inside == ("/ck/job/chk-4", "/ck/job/shared", "/ck/job/taskowned")
    assert policy.is_inside("file:/ck/job/shared/x") and not policy.is_inside("/ck/job/chk-3/x")
    remote = PathPolicy.for_snapshot("s3://b/ck/job/chk-4")
    assert remote.is_inside("s3a://b/ck/job/shared/x") and not remote.is_inside("s3://b/ck/job/chk-3/x")
    assert not remote.is_inside("s3://other/ck/job/chk-4/x")
    with pytest.raises(ExternalPathError):
        remote.relative("../chk-3/x")
    assert PathPolicy.for_snapshot("/sp", allow_external=True).check("file:/etc/passwd") == "/etc/passwd"
    assert external_files(Savepoint.open(str(BASE)).metadata, str(BASE)) == {}


@pytest.mark.spark
def test_spark_entry_points_refuse_by_default(tmp_path, spark):
    from fstate.readers.options import source_options
    from fstate.readers.reader import SavepointReader
    from fstate.readers.views import diff, register, register_views

    sp_dir, victim, job = _setup(tmp_path, "rel-symlink")
    _craft(sp_dir, lambda size: handles.RelativeFileHandle("link", size))
    # the refusal happens while Spark plans the data source: Spark wraps it in its own exception
    with pytest.raises(Exception, match="outside the savepoint directory"):
        SavepointReader(str(sp_dir), spark).keyed("keyed").collect()
    assert SavepointReader(str(sp_dir), spark, allow_external_paths=True).keyed("keyed").count() > 0
    register(spark)
    with pytest.raises(Exception, match="outside the savepoint directory"):
        spark.read.format("flink-savepoint").options(**source_options(str(sp_dir), "keyed")).load().collect()
    allowed = source_options(str(sp_dir), "keyed", allow_external_paths=True)
    assert spark.read.format("flink-savepoint").options(**allowed).load().count() > 0
    with pytest.raises(Exception, match="outside the savepoint directory"):
        register_views(spark, str(sp_dir), "crafted")
    with pytest.raises(Exception, match="outside the savepoint directory"):
        diff(spark, str(BASE), str(sp_dir))
