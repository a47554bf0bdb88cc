"""Kept files never collide and are never replaced (issue #15): the warehouse `pwh import
--replace` keeps, quarantined files, snapshots and exports, each under a name of its own."""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
from pathlib import Path

import duckdb
import pytest

from tests.reliability.conftest import pwh, pwh_cmd, spawn, write_runs
from warehouse import keep
from warehouse.ingesting.loader import ingest_paths
from warehouse.serving import backup, snapshot


def run_ids(path) -> frozenset[str]:
    con = duckdb.connect(str(path), read_only=True)
    try:
        return frozenset(r[0] for r in con.execute("SELECT sha256 FROM raw.files").fetchall())
    finally:
        con.close()


@pytest.fixture
def three_states(wh, tmp_path):
    """The issue's reproduction: 8 runs exported as e1, 8 more exported as e2, then 4 more in
    the live warehouse (so that the live state differs from both exports)."""
    runs = write_runs(tmp_path / "in", 20, samples=20)
    ingest_paths(wh, runs[:8])
    backup.export(wh, tmp_path / "e1")
    ingest_paths(wh, runs[8:16])
    backup.export(wh, tmp_path / "e2")
    ingest_paths(wh, runs[16:])
    return {"e1": tmp_path / "e1", "e2": tmp_path / "e2"}


class _Frozen(dt.datetime):
    """Every call to now() returns the same instant: imports 'in the same microsecond'."""

    @classmethod
    def now(cls, tz=None):
        return cls(2026, 12, 1, 14, 36, 0, tzinfo=dt.UTC)


def test_two_imports_in_the_same_instant_both_keep_their_warehouse(wh, three_states,
                                                                   monkeypatch):
    monkeypatch.setattr(keep.dt, "datetime", _Frozen)
    monkeypatch.setattr(backup.dt, "datetime", _Frozen)
    original = run_ids(wh.warehouse)
    first = backup.restore(wh, three_states["e1"], replace=True, publish=False)
    after_first = run_ids(wh.warehouse)
    second = backup.restore(wh, three_states["e2"], replace=True, publish=False)
    assert first["previous"] != second["previous"]
    kept = backup.kept_warehouses(wh.warehouse)
    assert sorted(map(str, kept)) == sorted([first["previous"], second["previous"]])
    assert run_ids(first["previous"]) == original and len(original) == 20
    assert run_ids(second["previous"]) == after_first and len(after_first) == 8
    assert len(run_ids(wh.warehouse)) == 16
    assert all(p.name.startswith("warehouse.duckdb.before-import-20261201T143600.000000Z-")
               for p in kept)


def test_pwh_import_replace_back_to_back_then_in_parallel_keeps_every_warehouse(wh,
                                                                              three_states):
    """As the issue reproduces it: two CLI imports right after each other; then two at once."""
    w = str(wh.warehouse)
    original = run_ids(wh.warehouse)
    outs = [pwh("--warehouse", w, "import", str(three_states[e]), "--replace", "-q")
            for e in ("e1", "e2")]
    assert [r.returncode for r in outs] == [0, 0], [r.stderr for r in outs]
    said = [r.stdout.rsplit("previous warehouse kept as ", 1)[1].strip() for r in outs]
    assert said[0] != said[1]
    assert sorted(map(str, backup.kept_warehouses(wh.warehouse))) == sorted(said)
    assert run_ids(said[0]) == original and len(original) == 20
    e1, e2 = run_ids(said[1]), run_ids(wh.warehouse)
    assert len(e1) == 8 and len(e2) == 16
    # in parallel: one import replaces the live warehouse (e2), the other what the first restored
    procs = [spawn(pwh_cmd("--warehouse", w, "import", str(three_states[e]), "--replace", "-q"))
             for e in ("e1", "e2")]
    outs = [(p.wait(timeout=600), p.stdout.read(), p.stderr.read()) for p in procs]
    assert [o[0] for o in outs] == [0, 0], outs
    new = [p for p in backup.kept_warehouses(wh.warehouse) if str(p) not in said]
    assert len(new) == 2, new
    final = run_ids(wh.warehouse)
    states = [run_ids(p) for p in new]
    assert e2 in states, "the warehouse live before the parallel imports is not kept"
    states.remove(e2)
    assert {states[0], final} == {e1, e2}, "the first parallel import's result is not kept"
    assert run_ids(snapshot.current(wh)) == final  # analysts see the final warehouse


def test_the_same_bad_file_quarantined_twice_keeps_both_records(wh, tmp_path):
    bad = tmp_path / "in" / "broken.json"
    bad.parent.mkdir()
    bad.write_bytes(b'{"rows": [')
    first = ingest_paths(wh, [bad])[0]
    bad.write_bytes(b'{"rows": [')  # same bytes, same name, failing again
    second = ingest_paths(wh, [bad])[0]
    assert first.status == second.status == "failed"
    assert first.quarantine_path != second.quarantine_path
    for r in (first, second):
        assert open(r.quarantine_path, "rb").read() == b'{"rows": ['
        assert os.path.exists(r.quarantine_path + ".error.json")
    assert len(list(wh.quarantine_dir.glob("*.error.json"))) == 2
    assert not list(wh.quarantine_dir.glob(".*"))  # no temporary file left


def test_exports_without_a_folder_get_new_names_and_never_replace(wh, tmp_path):
    ingest_paths(wh, write_runs(tmp_path / "in", 2, samples=20))
    w = str(wh.warehouse)
    outs = [pwh("--warehouse", w, "export", "-q") for _ in range(2)]
    assert [r.returncode for r in outs] == [0, 0], [r.stderr for r in outs]
    made = sorted((wh.state_dir / "backups").iterdir())
    assert len(made) == 2 and all(p.name.startswith("export-") for p in made)
    assert all(str(p) in "".join(r.stdout for r in outs) for p in made)
    # a folder that appears (non-empty) while an export runs is never replaced
    dest = tmp_path / "taken"
    work = tmp_path / ".taken.partial-x"
    (work / "data").mkdir(parents=True)
    dest.mkdir()
    (dest / "mine.txt").write_text("mine")
    with pytest.raises(backup.BackupError, match="appeared while exporting"):
        backup._claim_destination(work, dest)
    assert (dest / "mine.txt").read_text() == "mine"


@pytest.mark.parametrize("native", [True, False])
def test_keep_never_replaces_an_existing_file(tmp_path, monkeypatch, native):
    if not native:  # the fallback for file systems without renameat2
        monkeypatch.setattr(keep, "_renameat2", None)
    elif keep._renameat2 is None:
        pytest.skip("no renameat2 on this platform")
    f = tmp_path / "kept"
    keep.create_new(f, b"first")
    with pytest.raises(FileExistsError):
        keep.create_new(f, b"second")
    assert f.read_bytes() == b"first"
    (tmp_path / "d1").mkdir()
    (tmp_path / "d2").mkdir()
    (tmp_path / "d2" / "x").write_text("x")
    with pytest.raises(FileExistsError):
        keep.rename_noreplace(tmp_path / "d1", tmp_path / "d2")
    assert (tmp_path / "d2" / "x").read_text() == "x" and (tmp_path / "d1").is_dir()
    keep.rename_noreplace(tmp_path / "d1", tmp_path / "d3")
    assert (tmp_path / "d3").is_dir() and not (tmp_path / "d1").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d2", "d3", "kept"]
    # same instant, different names
    now = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)
    assert keep.tag(now) != keep.tag(now)
    assert keep.tag(now).startswith("20261201T000000.000000Z-")


def test_a_snapshot_is_never_published_over_an_existing_file(wh, tmp_path, monkeypatch):
    ingest_paths(wh, write_runs(tmp_path / "in", 2, samples=20))
    first = snapshot.publish(wh)
    monkeypatch.setattr(snapshot, "_new_version", lambda s: first.version)
    before = first.path.read_bytes()
    with pytest.raises(snapshot.SnapshotError, match="File exists"):
        snapshot.publish(wh, full=True)
    assert first.path.read_bytes() == before and snapshot.current(wh) == first.path


def test_export_removes_only_its_own_killed_work_folders(wh, tmp_path):
    """Review finding: `pwh export shared/mybackup` removed any `.*.partial-<pid>` folder beside
    it. Only a work folder of an export to the same name, holding pwh's marker, whose pid is
    gone, may go."""
    ingest_paths(wh, write_runs(tmp_path / "in", 1, samples=10))
    shared = tmp_path / "shared"
    dead = "4194399"  # beyond Linux's largest pid_max (2**22): never a live process
    thesis = shared / f".thesis.partial-{dead}"
    lookalike = shared / f".mybackup.partial-0badf00d-{dead}"  # right name, no marker
    other = shared / f".other.partial-0badf00d-{dead}"  # pwh's, but another export's name
    killed = shared / ".mybackup.partial-0badf00d-4194398"  # ours, killed: removed
    for d in (thesis, lookalike, other, killed):
        d.mkdir(parents=True)
        (d / "chapter1.tex").write_text("precious")
    for d in (other, killed):
        (d / ".pwh-export-partial").write_bytes(b"")  # backup.PARTIAL_MARKER
    # killed between creating its work folder and writing the marker: empty, removed
    bare = shared / ".mybackup.partial-1badf00d-4194397"
    bare.mkdir()
    # killed between removing the marker and the rename: pwh's manifest says it is ours
    finished = shared / ".mybackup.partial-2badf00d-4194396"
    (finished / "data").mkdir(parents=True)
    (finished / "data" / "raw.runs.parquet").write_bytes(b"PAR1")
    (finished / backup.MANIFEST).write_text(json.dumps({"format": backup.FORMAT}))
    # a manifest that is not pwh's does not make a folder ours
    foreign = shared / ".mybackup.partial-3badf00d-4194395"
    foreign.mkdir()
    (foreign / backup.MANIFEST).write_text(json.dumps({"format": "thesis/1"}))
    (foreign / "chapter1.tex").write_text("precious")
    r = pwh("--warehouse", str(wh.warehouse), "export", "-q", str(shared / "mybackup"))
    assert r.returncode == 0, r.stderr
    for d in (thesis, lookalike, other, foreign):
        assert (d / "chapter1.tex").read_text() == "precious", d
    assert not killed.exists() and not bare.exists() and not finished.exists()
    assert (shared / "mybackup" / backup.MANIFEST).is_file()
    assert not (shared / "mybackup" / ".pwh-export-partial").exists()
    assert sorted(p.name for p in shared.iterdir()) == sorted(
        [thesis.name, lookalike.name, other.name, foreign.name, "mybackup"])


def test_removing_a_work_folder_keeps_it_recognisable_until_the_end(tmp_path, monkeypatch):
    """A kill while a killed export's work folder is being removed must leave a folder the next
    export still recognises as pwh's: the marker is written first and removed last, after the
    manifest and the data."""
    work = tmp_path / ".out.partial-0badf00d-4194399"
    (work / "data").mkdir(parents=True)
    (work / "data" / "raw.runs.parquet").write_bytes(b"PAR1")
    (work / backup.MANIFEST).write_text(json.dumps({"format": backup.FORMAT}))
    order = []
    real_unlink, real_rmtree = os.unlink, shutil.rmtree
    monkeypatch.setattr(os, "unlink", lambda p, *a, **k: (order.append(Path(p).name),
                                                          real_unlink(p, *a, **k))[1])
    monkeypatch.setattr(Path, "unlink", lambda self, missing_ok=False: (
        order.append(self.name), real_unlink(self))[1])
    monkeypatch.setattr(shutil, "rmtree", lambda p, *a, **k: (order.append(Path(p).name),
                                                             real_rmtree(p, *a, **k))[1])
    backup._remove_stale_partials(tmp_path, "out")
    assert not work.exists()
    assert order[-2:] == [backup.MANIFEST, backup.PARTIAL_MARKER] and "data" in order[:-2]


def test_a_bad_file_with_a_very_long_name_is_quarantined(wh, tmp_path):
    """Review finding: a 195-byte file name overflowed 255 bytes once the tag, the temporary
    suffix and `.error.json` were added: nothing was quarantined."""
    bad = tmp_path / ("x" * 190 + ".json")
    bad.write_bytes(b'{"rows": [')
    r = ingest_paths(wh, [bad])[0]
    assert r.status == "failed" and "could not quarantine" not in r.message, r.message
    assert r.quarantine_path is not None
    q = Path(r.quarantine_path)
    assert q.read_bytes() == b'{"rows": ['
    assert q.name.endswith(".json") and q.name.startswith(r.sha256[:16])
    assert "x" * 20 in q.name  # the name stays recognisable
    side = Path(r.quarantine_path + ".error.json")
    assert json.loads(side.read_text())["path"] == str(bad.resolve())
    longest = len(os.fsencode(keep.temp_name(side).name))
    assert longest <= 255
    # two different long names with the same beginning never share a quarantine name stem
    bad2 = tmp_path / ("x" * 190 + "y.json")
    bad2.write_bytes(b'{"rows": [1,')
    r2 = ingest_paths(wh, [bad2])[0]
    assert r2.quarantine_path and Path(r2.quarantine_path).read_bytes() == b'{"rows": [1,'
    assert wh.quarantine_dir.joinpath(Path(r2.quarantine_path).name).exists()
    assert not list(wh.quarantine_dir.glob(".*"))


def test_a_quarantine_name_error_is_an_error_not_an_unreadable_source(wh, tmp_path,
                                                                       monkeypatch):
    """ENAMETOOLONG on the destination must surface, not pass as an unreadable source."""
    from warehouse.ingesting import loader

    bad = tmp_path / "short.json"
    bad.write_bytes(b"{")
    monkeypatch.setattr(loader, "quarantine_name", lambda prefix, t, name: "q" * 300,
                        raising=False)
    r = ingest_paths(wh, [bad])[0]
    assert r.status == "failed" and r.quarantine_path is None
    assert "could not quarantine" in r.message and "too long" in r.message.lower()
