"""kill -9 at randomised points of `pwh check`, `pwh import` and `pwh export` (issue #15).

Like tests/reliability/test_kill.py: the real command runs in a child process, which is SIGKILLed
after a random number of its progress lines plus a random delay (seeded; the seed is printed).
After each kill the warehouse, the snapshot analysts read and every kept file must be as before
or as the finished command leaves them, and the next run of the command must complete.
Two deterministic kills hit the two instants of `pwh import` between its renames.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import duckdb
import pytest

from tests.reliability.conftest import (
    kill_hard,
    pwh,
    pwh_cmd,
    read_lines,
    spawn,
    wait_for,
    write_runs,
)
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


def kept_files_names(wh) -> list[str]:
    return [p.name for p in backup.kept_warehouses(wh.warehouse)]


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
    runs = write_runs(tmp_path / "in", 10, samples=50)
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
    phases = ["tables", "tables", "swap", "publish"]
    rng.shuffle(phases)
    # a kill that lands after the swap proves only "after": while none left the old state,
    # more attempts kill during the tables (up to 4 more, each right after fewer lines)
    phases += ["retry"] * 4
    for attempt, phase in enumerate(phases):
        if phase == "retry":
            if any(o[2] == "before" for o in outcomes):
                break
            phase = "tables"
        before = state(wh.warehouse)
        src, after = next(v for v in exports.values() if v[1] != before)
        kept0, snap0 = kept_files(wh), snapshot_state(wh)
        proc = spawn(pwh_cmd("--warehouse", w, "import", str(src), "--replace"))
        # it prints one line per table restored, then one for the archive; then it swaps the
        # files (a new kept name appears) and publishes a snapshot
        if phase == "publish":
            wait_for(lambda k=kept0, p=proc: set(kept_files_names(wh)) - set(k) or p.poll() is not None,
                     timeout=600, interval=0.005, what="the swap")
            time.sleep(rng.uniform(0.0, 0.5))
        else:
            retry = attempt >= 4
            read_lines(proc, (rng.randrange(0, 12) >> (attempt - 3) if retry else
                              rng.randrange(0, 12)) if phase == "tables" else 12)
            time.sleep(0.0 if retry else rng.uniform(0.0, 0.05))
        finished = proc.poll() is not None
        kill_hard(proc)
        ctx = f"seed {rng.seed_value}, attempt {attempt}, killed in phase {phase}"
        outcomes.append((phase, finished,
                         _assert_import_outcome(wh, before, after, kept0, snap0, ctx)))
    print("outcomes", outcomes)
    assert any(o[2] == "before" for o in outcomes), f"seed {rng.seed_value}: nothing interrupted"
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
        time.sleep(3600)
    def publish(*a, **k):  # killed right after the new file took the warehouse's name
        print("swapped", flush=True)
        time.sleep(3600)
    if sys.argv[3] == "linked":
        keep.link_new = link_new
    else:
        snapshot.publish = publish
    backup.restore(settings(sys.argv[1]), sys.argv[2], replace=True)
""")


def test_kill9_between_the_renames_of_an_import(wh, two_exports):
    """Killed right after linking the kept name (then: right after the rename), as before
    (then: completely after), and the next import completes and keeps what it replaces."""
    kept_states = []
    for stage, src in (("linked", two_exports["A"]), ("swapped", two_exports["B"])):
        before, after = state(wh.warehouse), export_state(src)
        kept0, snap0 = kept_files(wh), snapshot_state(wh)
        proc = spawn([sys.executable, "-c", WINDOW_CHILD, str(wh.warehouse), str(src), stage])
        assert read_lines(proc, 1) == [f"{stage}\n"], proc.stderr.read()
        kill_hard(proc)
        outcome = _assert_import_outcome(wh, before, after, kept0, snap0, stage)
        assert outcome == ("before" if stage == "linked" else "after"), stage
        assert snapshot_state(wh) == snap0  # not yet published in either case
        if stage == "linked":  # the new kept name is a second name of the live, old file
            (alias,) = set(kept_files_names(wh)) - set(kept0)
            assert (wh.state_dir / alias).stat().st_ino == wh.warehouse.stat().st_ino
        else:
            kept_states.append(before)
        r = pwh("--warehouse", str(wh.warehouse), "import", str(src), "--replace", "-q")
        assert r.returncode == 0, r.stderr
        assert state(wh.warehouse) == after and snapshot_state(wh)[1] == after, stage
        kept_states.append(before if stage == "linked" else after)
        # every warehouse replaced is kept exactly once, in order; none is the live file
        assert [v[1] for _, v in sorted(kept_files(wh).items())] == kept_states, stage
        assert all(v[0] != wh.warehouse.stat().st_ino for v in kept_files(wh).values())
        assert not list(wh.state_dir.glob(".warehouse.duckdb.import-*"))


# --------------------------------------------------------------------------- pwh export


def visible_exports(folder: Path) -> list[Path]:
    return [p for p in folder.iterdir() if not p.name.startswith(".")] if folder.is_dir() else []


def _complete_export(folder: Path) -> bool:
    m = json.loads((folder / backup.MANIFEST).read_text())
    return all((folder / t["file"]).is_file() for t in m["tables"]) and \
        len(list((folder / "archive").iterdir())) == m["archive"]["files"]


def test_kill9_during_export_then_rerun_completes(wh, tmp_path, rng):
    ingest_paths(wh, write_runs(tmp_path / "in", 10, samples=100))
    snapshot.publish(wh)
    w = str(wh.warehouse)
    before, snap0 = state(wh.warehouse), snapshot_state(wh)
    backups = wh.state_dir / "backups"
    interrupted, top = 0, 14
    for attempt in range(10):  # 3, and more (each after fewer lines) until one interrupted
        if attempt >= 3 and interrupted:
            break
        dest = [str(tmp_path / f"out{attempt}")] if attempt % 2 else []  # default: backups/
        exported = len(visible_exports(backups))
        proc = spawn(pwh_cmd("--warehouse", w, "export", *dest))
        seen = len(read_lines(proc, rng.randrange(0, top)))  # one line per table, then more
        time.sleep(rng.uniform(0.0, 0.02 * top / 14))
        kill_hard(proc)
        missed = Path(dest[0]).exists() if dest else len(visible_exports(backups)) > exported
        interrupted += not missed
        top = max(1, top // 2) if missed else top
        ctx = f"seed {rng.seed_value}, attempt {attempt}, after {seen} line(s)"
        assert state(wh.warehouse) == before, ctx
        assert snapshot_state(wh) == snap0, ctx
        visible = [Path(d) for d in dest if Path(d).exists()] + visible_exports(backups)
        assert all(_complete_export(p) for p in visible), f"{ctx}: a partial export is visible"
    assert interrupted, f"seed {rng.seed_value}: every export finished before the kill"
    for dest in ([], [str(tmp_path / "out1")]):  # the same commands again complete
        if dest and Path(dest[0]).exists():
            dest = [str(tmp_path / "out-again")]
        r = pwh("--warehouse", w, "export", *dest, "-q")
        assert r.returncode == 0, r.stderr
        out = Path(r.stdout.rsplit(" to ", 1)[1].strip())
        assert _complete_export(out) and export_state(out) == before
    assert not list(backups.glob(".*.partial-*")) and not list(tmp_path.glob(".*.partial-*"))


# --------------------------------------------------------------------------- pwh check

# `pwh check` imports Great Expectations first (8-25 s here, minutes with a second suite on 2
# cores: the waits below only bound a hang). So that each kill costs only the
# check itself, this child imports it once, then forks one process per command: each runs
# warehouse.cli.main (the code `pwh` runs) in its own session, output to a file, and is
# SIGKILLed like any other child. The only addition: a line after each group of runs validated
# (`pwh check` validates runs in groups sharing their suites), the progress that kill points
# are chosen from.
FORK_SERVER = textwrap.dedent("""
    import json, os, signal, sys
    from warehouse import checks
    from warehouse.cli import main
    checks.warm_up()
    real = checks.validate_runs
    def validate_runs(*a, **k):
        out = real(*a, **k)
        print("validated a group", flush=True)
        return out
    checks.validate_runs = validate_runs
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped automatically
    print("ready", flush=True)
    for line in sys.stdin:
        argv, out = json.loads(line)
        pid = os.fork()
        if pid == 0:
            os.setsid()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            code = 1
            try:
                code = main(argv)
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        print(pid, flush=True)
""")


class ForkServer:
    def __init__(self):
        # from a file, not `-c`: with the lake extra installed, Great Expectations imports
        # pyspark.sql.connect, which exits a `python -c` process (it takes it for a doctest run)
        script = Path(tempfile.mkdtemp(prefix="pwh-fork-")) / "fork_server.py"
        script.write_text(FORK_SERVER)
        self.proc = spawn([sys.executable, str(script)], stdin=subprocess.PIPE)
        ready = read_lines(self.proc, 1, timeout=600)
        assert ready == ["ready\n"], self.proc.stderr.read()

    def start(self, argv: list[str], out: Path) -> int:
        self.proc.stdin.write(json.dumps([argv, str(out)]) + "\n")
        self.proc.stdin.flush()
        return int(read_lines(self.proc, 1)[0])

    def close(self):
        kill_hard(self.proc)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _results(path: Path) -> list[tuple]:
    """Check results without their time: (run, suite, expectation, success, count)."""
    con = duckdb.connect(str(path), read_only=True)
    try:
        return sorted(con.execute("SELECT run_id, suite, expectation, success, unexpected_count "
                                  "FROM checks.results").fetchall(), key=repr)
    finally:
        con.close()


def test_kill9_during_check_then_rerun_completes(wh, tmp_path, rng):
    # one run per format: two groups of suites (their results are recorded in one transaction)
    ingest_paths(wh, write_runs(tmp_path / "in", 2, samples=100))
    snapshot.publish(wh)
    snap0 = snapshot_state(wh)
    raw0 = {k: v for k, v in state(wh.warehouse).items() if not k.startswith("checks.")}
    argv = ["--warehouse", str(wh.warehouse), "check"]
    server = ForkServer()
    try:
        observed = []
        for attempt in range(6):
            # between the two groups, then around the recording; then, while every check
            # finished before its kill, more kills between the groups, each sooner
            if attempt >= 2 and [] in [got for _, got in observed]:
                break
            out = tmp_path / f"check{attempt}.out"
            groups = attempt + 1 if attempt < 2 else 1
            pid = server.start(argv, out)
            wait_for(lambda out=out, pid=pid, g=groups: not _alive(pid) or (
                out.exists() and out.read_text().count("validated a group") >= g),
                timeout=600, interval=0.01, what="the check's progress")
            time.sleep(rng.uniform(0.0, 0.3 / (1 << max(0, attempt - 1))))
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
            wait_for(lambda pid=pid: not _alive(pid), what="the killed check to be reaped")
            ctx = f"seed {rng.seed_value}, attempt {attempt}, after {groups} group(s)"
            assert {k: v for k, v in state(wh.warehouse).items()
                    if not k.startswith("checks.")} == raw0, ctx
            assert snapshot_state(wh) == snap0, ctx
            observed.append((ctx, _results(wh.warehouse)))
        # the next run completes: every run validated
        pid = server.start(argv, tmp_path / "last.out")
        wait_for(lambda: not _alive(pid), timeout=600, interval=0.05, what="the last check")
        out = (tmp_path / "last.out").read_text()
        final = _results(wh.warehouse)
        assert out.count(": passed,") == 2, out  # both runs
        assert {r[0] for r in final} == {r[0] for r in state_runs(wh.warehouse)}
    finally:
        server.close()
    # after every kill: nothing of that check, or all of it
    for ctx, got in observed:
        assert got in ([], final), f"{ctx}: partial check results ({len(got)} of {len(final)})"
    assert [] in [got for _, got in observed], "every check finished before its kill"


def state_runs(path: Path) -> list[tuple]:
    con = duckdb.connect(str(path), read_only=True)
    try:
        return con.execute("SELECT sha256 FROM raw.files").fetchall()
    finally:
        con.close()
