"""kill -9 at randomised points of `pwh check`, `pwh import` and `pwh export` (issue #15).

Like tests/reliability/test_kill.py: the real command runs in a child process, which is SIGKILLed
after a random number of its progress lines plus a random delay (seeded; the seed is printed).
After each kill the warehouse, the snapshot analysts read and every kept file must be as before
or as the finished command leaves them, and the next run of the command must complete.
Two deterministic kills hit the two instants of `pwh import` between its renames.
"""

from __future__ import annotations

import json
import os
import sys
import textwrap
import time
from pathlib import Path

import duckdb
import pytest

from tests.reliability.conftest import kill_hard, pwh, pwh_cmd, read_lines, spawn, write_runs
from warehouse.ingesting.loader import ingest_paths
from warehouse.serving import backup, snapshot
from warehouse.serving.query import connect

SKIP = ("pwh_snapshot",)


def state(path: Path) -> dict[str, tuple]:
    """Every table's content fingerprint (row count, order-independent hash of the rows) and
    every view's definition: equal states compare equal."""
    con = duckdb.connect(str(path), read_only=True)
    try:
        out: dict[str, tuple] = {}
        for s, t in con.execute("SELECT schema_name, table_name FROM duckdb_tables() "
                                "WHERE NOT list_contains(?, schema_name)", [SKIP]).fetchall():
            out[f"{s}.{t}"] = tuple(backup.fingerprint(con, f'"{s}"."{t}"'))
        for s, v, sql in con.execute("SELECT schema_name, view_name, sql FROM duckdb_views() "
                                     "WHERE NOT internal").fetchall():
            out[f"view {s}.{v}"] = (sql,)
        return out
    finally:
        con.close()


def export_state(folder: Path) -> dict[str, tuple]:
    """The state a restore of this export produces (from its manifest)."""
    m = json.loads((folder / backup.MANIFEST).read_text())
    out = {t["name"]: tuple(t["fingerprint"]) for t in m["tables"]}
    out.update({f"view {v['name']}": (v["ddl"],) for v in m["views"]})
    return out


def kept_files(wh) -> dict[str, tuple[int, dict]]:
    """Kept warehouses: name -> (inode, state)."""
    return {p.name: (p.stat().st_ino, state(p)) for p in backup.kept_warehouses(wh.warehouse)}


def snapshot_state(wh) -> tuple[str, dict]:
    cur = snapshot.current(wh)
    assert cur is not None
    with connect(wh) as con:  # analysts can open it
        assert con.execute("SELECT version FROM pwh_snapshot.info").fetchone()[0] == \
            snapshot.version_of(cur)
    return cur.name, state(cur)


# --------------------------------------------------------------------------- pwh import


@pytest.fixture
def two_exports(wh, tmp_path):
    """Live warehouse B (10 runs, published), exports of states A (6 runs) and B."""
    runs = write_runs(tmp_path / "in", 10, samples=200)
    ingest_paths(wh, runs[:6])
    backup.export(wh, tmp_path / "eA")
    ingest_paths(wh, runs[6:])
    backup.export(wh, tmp_path / "eB")
    snapshot.publish(wh)
    return {"A": tmp_path / "eA", "B": tmp_path / "eB"}


def _assert_import_outcome(wh, before: dict, after: dict, kept0: dict, snap0: tuple, ctx: str
                           ) -> str:
    """Warehouse, kept files and snapshot are all 'as before' or 'completely after'; returns
    which ("before" or "after")."""
    live = state(wh.warehouse)
    assert live in (before, after), f"{ctx}: the warehouse is neither the old nor the new one"
    kept = kept_files(wh)
    new = {k: v for k, v in kept.items() if k not in kept0}
    assert {k: kept[k] for k in kept0} == kept0, f"{ctx}: a kept warehouse changed or vanished"
    outcome = "before" if live == before and before != after else "after"
    if outcome == "after":
        assert len(new) == 1, f"{ctx}: the replaced warehouse is not kept ({sorted(new)})"
        assert next(iter(new.values()))[1] == before, f"{ctx}: the kept file is not the old one"
    else:
        # only the documented instant between link and rename leaves a second name of the
        # live file (see test_kill9_between_the_renames_of_an_import); nothing else
        ino = wh.warehouse.stat().st_ino
        assert all(v[0] == ino for v in new.values()), f"{ctx}: a kept file appeared early"
    name, snap = snapshot_state(wh)
    assert (name, snap) == snap0 or snap == live, f"{ctx}: the snapshot is neither old nor new"
    return outcome


def test_kill9_during_import_then_rerun_completes(wh, two_exports, rng):
    w = str(wh.warehouse)
    exports = {k: (v, export_state(v)) for k, v in two_exports.items()}
    outcomes = []
    for attempt in range(4):
        before = state(wh.warehouse)
        src, after = next(v for v in exports.values() if v[1] != before)
        kept0, snap0 = kept_files(wh), snapshot_state(wh)
        proc = spawn(pwh_cmd("--warehouse", w, "import", str(src), "--replace"))
        seen = len(read_lines(proc, rng.randrange(0, 17)))
        time.sleep(rng.uniform(0.0, 0.3))
        alive = proc.poll() is None
        kill_hard(proc)
        ctx = f"seed {rng.seed_value}, attempt {attempt}, after {seen} line(s)"
        outcomes.append((_assert_import_outcome(wh, before, after, kept0, snap0, ctx), alive))
    assert any(alive for _, alive in outcomes), f"seed {rng.seed_value}: nothing interrupted"
    # the next run of the command completes
    before, kept0 = state(wh.warehouse), kept_files(wh)
    src, after = next(v for v in exports.values() if v[1] != before)
    r = pwh("--warehouse", w, "import", str(src), "--replace", "-q")
    assert r.returncode == 0, r.stderr
    assert state(wh.warehouse) == after
    new = {k: v for k, v in kept_files(wh).items() if k not in kept0}
    assert [v[1] for v in new.values()] == [before]
    assert snapshot_state(wh)[1] == after
    assert not list(wh.state_dir.glob(".warehouse.duckdb.import-*"))


WINDOW_CHILD = textwrap.dedent("""
    import sys, time
    from warehouse import keep
    from warehouse.config import settings
    from warehouse.serving import backup, snapshot
    real_link = keep.link_new
    def link_new(src, dst):  # killed right after the kept name is linked to the old file
        real_link(src, dst)
        print("linked", flush=True)
        time.sleep(60)
    def publish(*a, **k):  # killed right after the new file took the warehouse's name
        print("swapped", flush=True)
        time.sleep(60)
    if sys.argv[3] == "linked":
        keep.link_new = link_new
    else:
        snapshot.publish = publish
    backup.restore(settings(sys.argv[1]), sys.argv[2], replace=True)
""")


@pytest.mark.parametrize("stage", ["linked", "swapped"])
def test_kill9_between_the_renames_of_an_import(wh, two_exports, stage):
    src = two_exports["A"]
    before, after = state(wh.warehouse), export_state(src)
    kept0, snap0 = kept_files(wh), snapshot_state(wh)
    proc = spawn([sys.executable, "-c", WINDOW_CHILD, str(wh.warehouse), str(src), stage])
    assert read_lines(proc, 1) == [f"{stage}\n"], proc.stderr.read()
    kill_hard(proc)
    outcome = _assert_import_outcome(wh, before, after, kept0, snap0, stage)
    assert outcome == ("before" if stage == "linked" else "after")
    assert snapshot_state(wh) == snap0  # not yet published in either case
    if stage == "linked":  # the kept name is a second name of the live, old file
        (alias,) = backup.kept_warehouses(wh.warehouse)
        assert alias.stat().st_ino == wh.warehouse.stat().st_ino
    r = pwh("--warehouse", str(wh.warehouse), "import", str(src), "--replace")
    assert r.returncode == 0, r.stderr
    assert state(wh.warehouse) == after and snapshot_state(wh)[1] == after
    kept = [v[1] for v in kept_files(wh).values()]
    # every warehouse that was replaced is kept exactly once, none is the live file
    assert kept == ([before] if stage == "linked" else [before, after])
    assert all(v[0] != wh.warehouse.stat().st_ino for v in kept_files(wh).values())
    assert not list(wh.state_dir.glob(".warehouse.duckdb.import-*"))


# --------------------------------------------------------------------------- pwh export


def _complete_export(folder: Path) -> bool:
    m = json.loads((folder / backup.MANIFEST).read_text())
    return all((folder / t["file"]).is_file() for t in m["tables"]) and \
        len(list((folder / "archive").iterdir())) == m["archive"]["files"]


def test_kill9_during_export_then_rerun_completes(wh, tmp_path, rng):
    ingest_paths(wh, write_runs(tmp_path / "in", 10, samples=300))
    snapshot.publish(wh)
    w = str(wh.warehouse)
    before, snap0 = state(wh.warehouse), snapshot_state(wh)
    backups = wh.state_dir / "backups"
    interrupted = 0
    for attempt in range(4):
        dest = [str(tmp_path / f"out{attempt}")] if attempt % 2 else []  # default: backups/
        proc = spawn(pwh_cmd("--warehouse", w, "export", *dest))
        seen = len(read_lines(proc, rng.randrange(0, 16)))
        time.sleep(rng.uniform(0.0, 0.2))
        interrupted += proc.poll() is None
        kill_hard(proc)
        ctx = f"seed {rng.seed_value}, attempt {attempt}, after {seen} line(s)"
        assert state(wh.warehouse) == before, ctx
        assert snapshot_state(wh) == snap0, ctx
        visible = [Path(d) for d in dest if Path(d).exists()] + (
            [p for p in backups.iterdir() if not p.name.startswith(".")]
            if backups.is_dir() else [])
        assert all(_complete_export(p) for p in visible), f"{ctx}: a partial export is visible"
    assert interrupted, f"seed {rng.seed_value}: every export finished before the kill"
    for dest in ([], [str(tmp_path / "out1")]):
        if dest and Path(dest[0]).exists():
            dest = [str(tmp_path / "out-again")]
        r = pwh("--warehouse", w, "export", *dest, "-q")
        assert r.returncode == 0, r.stderr
        out = Path(r.stdout.rsplit(" to ", 1)[1].strip())
        assert _complete_export(out) and export_state(out) == before
    assert not list(backups.glob(".*.partial-*")) and not list(tmp_path.glob(".*.partial-*"))


# --------------------------------------------------------------------------- pwh check


def _results(wh) -> list[tuple]:
    con = duckdb.connect(str(wh.warehouse), read_only=True)
    try:
        return sorted(con.execute("SELECT run_id, suite, expectation, success, validated_at "
                                  "FROM checks.results").fetchall(), key=repr)
    finally:
        con.close()


def test_kill9_during_check_then_rerun_completes(wh, tmp_path, rng):
    runs = write_runs(tmp_path / "in", 8, samples=300)
    ingest_paths(wh, runs)
    snapshot.publish(wh)
    w = str(wh.warehouse)
    snap0 = snapshot_state(wh)
    raw0 = {k: v for k, v in state(wh.warehouse).items() if not k.startswith("checks.")}
    observed = []
    interrupted = 0
    for attempt in range(3):
        proc = spawn(pwh_cmd("--warehouse", w, "check"))
        assert "validating" in proc.stderr.readline()  # then GX loads and validation starts
        time.sleep(rng.uniform(0.0, 6.0))
        interrupted += proc.poll() is None
        kill_hard(proc)
        ctx = f"seed {rng.seed_value}, attempt {attempt}"
        assert {k: v for k, v in state(wh.warehouse).items()
                if not k.startswith("checks.")} == raw0, ctx
        assert snapshot_state(wh) == snap0, ctx
        observed.append(_results(wh))
        if observed[-1]:
            break  # one check completed: later ones have nothing left to validate
    assert interrupted, f"seed {rng.seed_value}: every check finished before the kill"
    r = pwh("--warehouse", w, "check")
    assert r.returncode == 0, r.stdout + r.stderr
    final = _results(wh)
    assert final and {x[0] for x in final} == {
        x[0] for x in duckdb.connect(str(wh.warehouse), read_only=True).execute(
            "SELECT sha256 FROM raw.files").fetchall()}
    # every state seen after a kill is nothing or the complete outcome of one check
    assert all(o in ([], final) for o in observed), f"seed {rng.seed_value}: partial results"
    assert os.path.exists(wh.warehouse)
