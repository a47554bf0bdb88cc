"""`pwh rederive` (issue 20, item 8): runs an older parser derived are re-derived from the archive,
one transaction each, and the upgraded warehouse equals a fresh ingest of the same files, table
by table (and, after `pwh build`, model by model).

An "older warehouse" is made the way an upgrade finds one: runs ingested, then their rows set
back to what the older parser wrote. For Kineto that is kineto_trace/1, which kept only the GPU
and runtime events (the CPU side's rows deleted, the run's counts changed, the version written
back); for the other formats every parser's version is bumped after the ingest (today's code
then reads as "the newer pwh"), and the stored rows are damaged so that only a real re-read can
restore them.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from tests import gen_vendor_traces as gen
from tests.conftest import EXAMPLES, ROOT
from warehouse.config import settings
from warehouse.ingesting import formats, readers, rederive, runmeta
from warehouse.ingesting.formats import kineto, kineto_gen, ncu_gen
from warehouse.ingesting.loader import ingest_file, ingest_paths

CPU_KINDS = ("cpu_op", "annotation", "gpu_annotation", "sync", "other")
OLD_KINETO = "kineto_trace/1"
PLACE_AND_TIME = ("archive_path", "ingested_at", "occurred_at")


# --------------------------------------------------------------------------- helpers


def pwh(*argv, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "warehouse.cli", *argv], capture_output=True,
                          text=True, cwd=cwd, env={**os.environ}, timeout=600)


def kineto_traces(folder: Path, n: int = 6) -> list[Path]:
    """Small generated Kineto traces: epoch and relative clocks, plain and gzip, with sidecars
    for some (series/label/captured_at from a sidecar must survive the re-derivation)."""
    out = []
    for i in range(n):
        gz = i % 3 == 2
        p = folder / "kin" / f"t{i}.pt.trace.json{'.gz' if gz else ''}"
        kineto_gen.write_file(p, gz=gz, steps=2 + i % 3, seed=i, relative=bool(i % 2))
        if i % 2:
            (p.parent / (p.name + ".meta.json")).write_text(json.dumps(
                {"series": "kin-side", "label": f"L{i}", "captured_at": f"2026-10-{i % 28 + 1:02d}T01:02:03Z"}))
        out.append(p)
    return out


def other_formats(folder: Path) -> list[Path]:
    """One file of every other source format (examples, generated vendor files)."""
    d = folder / "other"
    d.mkdir(parents=True)
    for f in sorted(EXAMPLES.glob("*.json")):
        shutil.copy(f, d / f.name)
    ks = gen.kernels(3, n=12, long_name_kb=1)
    files = {
        "n.sqlite": gen.nsys_sqlite(ks), "kern.csv": gen.nsys_kern_sum_csv(ks),
        "r.csv": gen.rocprof_csv(ks), "rs.csv": gen.rocprof_stats_csv(ks),
        "results.json": gen.rocprof_results_json(ks), "results.db": gen.rocprof_results_db(ks),
        "ncu.csv": ncu_gen.history(1, seed=3)[0].encode(),
    }
    for name, data in files.items():
        (d / name).write_bytes(data)
    return sorted(d.iterdir())


def raw_tables(con) -> list[str]:
    return [r[0] for r in con.execute(
        "SELECT table_name FROM duckdb_tables() WHERE schema_name = 'raw' ORDER BY 1").fetchall()]


def table_state(path: Path, schemas=("raw",)) -> dict[str, list]:
    """Every table of ``schemas``, rows sorted, without the columns that name this warehouse's
    place or the time a file entered it (raw.files and the marts that show them)."""
    con = duckdb.connect(str(path), read_only=True)
    try:
        out = {}
        for s, t in con.execute(
                "SELECT schema_name, table_name FROM duckdb_tables() WHERE list_contains(?, "
                "schema_name) ORDER BY 1, 2", [list(schemas)]).fetchall():
            cols = [r[0] for r in con.execute(
                "SELECT column_name FROM duckdb_columns() WHERE schema_name = ? AND "
                "table_name = ? ORDER BY column_index", [s, t]).fetchall()]
            cols = [c for c in cols if c not in PLACE_AND_TIME]
            rows = con.execute(f'SELECT {", ".join(cols)} FROM "{s}"."{t}"').fetchall()
            out[f"{s}.{t}"] = sorted(map(repr, rows))  # repr: NaN equals NaN
        return out
    finally:
        con.close()


def fresh_ingest_of(src, dst) -> None:
    """Ingest every archived file of warehouse ``src`` into ``dst`` as a new run with the same
    identity (series, label, captured_at and their source, original path): a fresh ingest of
    the same files by today's pwh."""
    con = duckdb.connect(str(src.warehouse), read_only=True)
    rows = con.execute("SELECT sha256, original_path, series, label, captured_at, meta_source "
                       "FROM raw.files ORDER BY ingested_at, sha256").fetchall()
    con.close()
    for sha, orig, series, label, captured, source in rows:
        r = ingest_file(dst, src.archive_dir / f"{sha}.json", original_path=orig,
                        meta=runmeta.RunMeta(series, label, captured, source))
        assert r.status == "ingested", r.message


def make_kineto_old(wh) -> int:
    """Set every Kineto run back to what kineto_trace/1 wrote: GPU and runtime rows only, the
    counts of trace_runs changed, the older version in the manifest. Returns the rows removed."""
    con = duckdb.connect(str(wh.warehouse))
    try:
        runs = [r[0] for r in con.execute(
            "SELECT sha256 FROM raw.files WHERE source_format = 'kineto_trace'").fetchall()]
        removed = con.execute(
            "SELECT count(*) FROM raw.trace_events WHERE kind IN (SELECT unnest(?)) AND run_id "
            "IN (SELECT unnest(?))", [list(CPU_KINDS), runs]).fetchone()[0]
        con.execute("DELETE FROM raw.trace_events WHERE kind IN (SELECT unnest(?)) AND run_id "
                    "IN (SELECT unnest(?))", [list(CPU_KINDS), runs])
        con.execute("UPDATE raw.trace_runs SET event_count = (SELECT count(*) FROM "
                    "raw.trace_events e WHERE e.run_id = trace_runs.run_id), metadata = '{}' "
                    "WHERE run_id IN (SELECT unnest(?))", [runs])
        con.execute("UPDATE raw.files SET parser_version = ? WHERE sha256 IN (SELECT unnest(?))",
                    [OLD_KINETO, runs])
        return removed
    finally:
        con.close()


def damage_every_run(wh) -> None:
    """Rows an older parser could have written differently: the first row of every raw table
    of every run gone (a re-read must restore it)."""
    con = duckdb.connect(str(wh.warehouse))
    try:
        for t in raw_tables(con):
            if t in ("files", "ingest_errors"):
                continue
            con.execute(f"DELETE FROM raw.{t} WHERE rowid IN (SELECT min(rowid) FROM raw.{t} "
                        "GROUP BY run_id)")
    finally:
        con.close()


def rederivations(wh) -> list[tuple[str, str, str]]:
    """meta.rederivations: (run, parser before, parser after), sorted; every row stamped."""
    con = duckdb.connect(str(wh.warehouse), read_only=True)
    try:
        rows = con.execute("SELECT run_id, parser_before, parser_version, rederived_at "
                           "FROM meta.rederivations").fetchall()
    finally:
        con.close()
    now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
    assert all(now - dt.timedelta(hours=1) < r[3] <= now for r in rows), rows  # UTC
    return sorted(r[:3] for r in rows)


@pytest.fixture
def two(tmp_path):
    """Two warehouses: ``old`` (to be upgraded) and ``fresh`` (today's ingest of its files)."""
    return settings(tmp_path / "old" / "warehouse.duckdb"), \
        settings(tmp_path / "fresh" / "warehouse.duckdb")


# --------------------------------------------------------------------------- tests


def test_versions_compare():
    assert rederive.compare_versions("kineto_trace/1", "kineto_trace/2") == -1
    assert rederive.compare_versions("kineto_trace/2", "kineto_trace/2") == 0
    assert rederive.compare_versions("kineto_trace/10", "kineto_trace/2") == 1
    assert rederive.compare_versions("kineto/1", "kineto_trace/2") == -1  # another spelling


def test_old_kineto_runs_upgrade_to_a_fresh_ingest(two, tmp_path):
    old, fresh = two
    files = kineto_traces(tmp_path)
    assert all(r.status == "ingested" for r in ingest_paths(old, files))
    removed = make_kineto_old(old)
    assert removed > 0
    fresh_ingest_of(old, fresh)
    assert table_state(old.warehouse) != table_state(fresh.warehouse)  # the old state differs
    con = duckdb.connect(str(old.warehouse), read_only=True)
    p = rederive.plan(con)
    con.close()
    assert [r.parser_version for r in p.stale] == [OLD_KINETO] * len(files)

    rep = rederive.rederive(old)
    assert [o.status for o in rep.outcomes] == ["rederived"] * len(files)
    assert {o.new_version for o in rep.outcomes} == {kineto.PARSER_VERSION}
    got, want = table_state(old.warehouse), table_state(fresh.warehouse)
    assert got.keys() == want.keys()
    for t in want:
        assert got[t] == want[t], f"{t} differs from a fresh ingest"
    con = duckdb.connect(str(old.warehouse), read_only=True)
    assert con.execute("SELECT count(*) FROM raw.trace_events WHERE kind = 'cpu_op'"
                       ).fetchone()[0] > 0
    sides = con.execute("SELECT DISTINCT series FROM raw.files ORDER BY 1").fetchall()
    con.close()
    assert sides == [("kin",), ("kin-side",)]  # identity from folder and sidecar kept
    # exactly once: nothing stale any more, a second call re-derives nothing
    again = rederive.rederive(old)
    assert again.outcomes == [] and again.plan.stale == []
    # each re-derivation recorded once (what the Dagster warehouse sensor reports)
    assert rederivations(old) == sorted(
        (o.run.run_id, OLD_KINETO, kineto.PARSER_VERSION) for o in rep.outcomes)


def test_every_format_rederives_to_a_fresh_ingest(two, tmp_path, monkeypatch):
    """Every format's runs (whole-document readers), after a version bump of every parser."""
    old, fresh = two
    files = other_formats(tmp_path)
    results = ingest_paths(old, files)
    assert all(r.status == "ingested" for r in results), [r.message for r in results]
    con = duckdb.connect(str(old.warehouse), read_only=True)
    fmts = {r[0] for r in con.execute("SELECT source_format FROM raw.files").fetchall()}
    con.close()
    assert len(fmts) >= 9, fmts
    damage_every_run(old)
    for mod in formats.ALL_FORMATS:
        name, n = mod.PARSER_VERSION.rsplit("/", 1)
        monkeypatch.setattr(mod, "PARSER_VERSION", f"{name}/{int(n) + 1}")
    fresh_ingest_of(old, fresh)
    rep = rederive.rederive(old)
    assert [o.status for o in rep.outcomes] == ["rederived"] * len(files), \
        [o.message for o in rep.outcomes]
    got, want = table_state(old.warehouse), table_state(fresh.warehouse)
    for t in want:
        assert got[t] == want[t], f"{t} differs from a fresh ingest"


def test_streamed_reader_rederives_too(two, tmp_path, monkeypatch):
    """Archived traces big enough to stream go through the streaming reader (parser process)."""
    old, fresh = two
    files = kineto_traces(tmp_path, 3)
    ingest_paths(old, files)
    make_kineto_old(old)
    monkeypatch.setattr(readers, "STREAM_MIN_BYTES", 1024)
    used = []
    from warehouse.ingesting import trace_stream

    real = trace_stream.TraceReader.tables

    def tables(self):
        used.append(self.shown)
        yield from real(self)

    monkeypatch.setattr(trace_stream.TraceReader, "tables", tables)
    rep = rederive.rederive(old)
    assert [o.status for o in rep.outcomes] == ["rederived"] * 3
    assert len(used) == 3  # the streaming reader read them
    monkeypatch.undo()
    fresh_ingest_of(old, fresh)
    assert table_state(old.warehouse) == table_state(fresh.warehouse)


# Every mart (and what they need)
MODELS = ("marts.hta_kernel_type_breakdown", "marts.hta_temporal_breakdown", "marts.kernel_metrics",
          "marts.audit_category_rollup", "marts.kernel_run_rollup", "marts.metric_trends",
          "marts.step_times", "marts.run_summary", "marts.kernel_trends", "marts.gpu_timeline",
          "marts.op_rollup", "marts.trace_trends", "staging.profile_samples")


def test_upgraded_models_equal_a_fresh_builds(two, tmp_path):
    """`pwh build` after the re-derivation rebuilds what changed: every staging and mart table
    equals the fresh warehouse's, built the same way."""
    old, fresh = two
    files = kineto_traces(tmp_path, 4) + [EXAMPLES / f for f in sorted(os.listdir(EXAMPLES))]
    ingest_paths(old, files)
    make_kineto_old(old)
    assert pwh("--warehouse", str(old.warehouse), "build", *MODELS).returncode == 0  # old rows
    fresh_ingest_of(old, fresh)
    r = pwh("--warehouse", str(old.warehouse), "rederive", "-q")
    assert r.returncode == 0, r.stderr
    assert "4 re-derived" in r.stdout and "pwh build" in r.stdout
    b = pwh("--warehouse", str(old.warehouse), "build", *MODELS)
    assert b.returncode == 0, b.stderr
    # incremental: exactly the 4 re-derived runs' rows of the run-incremental models (their
    # stamps changed with the manifest row), not the example runs'
    for model in ("marts.kernel_run_rollup", "marts.run_summary", "marts.gpu_timeline"):
        line = next(x for x in b.stdout.splitlines() if x.startswith(f"built {model}:"))
        assert "incremental: 4 run(s)/series rebuilt" in line, line
    assert pwh("--warehouse", str(fresh.warehouse), "build", *MODELS).returncode == 0
    got = table_state(old.warehouse, ("raw", "staging", "marts"))
    want = table_state(fresh.warehouse, ("raw", "staging", "marts"))
    assert got.keys() == want.keys()
    for t in want:
        assert got[t] == want[t], f"{t} differs from the fresh warehouse's"
    con = duckdb.connect(str(old.warehouse), read_only=True)
    assert con.execute("SELECT count(*) FROM marts.op_rollup").fetchone()[0] > 0
    con.close()


def test_missing_or_altered_archive_is_reported_and_skipped(two, tmp_path):
    old, _ = two
    files = kineto_traces(tmp_path, 3)
    ingest_paths(old, files)
    make_kineto_old(old)
    con = duckdb.connect(str(old.warehouse), read_only=True)
    shas = [r[0] for r in con.execute("SELECT sha256 FROM raw.files ORDER BY ingested_at").fetchall()]
    con.close()
    gone = old.archive_dir / f"{shas[0]}.json"
    kept = tmp_path / "kept.json"
    shutil.move(gone, kept)
    altered = old.archive_dir / f"{shas[1]}.json"
    original = altered.read_bytes()
    altered.write_bytes(original.replace(b'"ph": "X"', b'"ph":  "X"', 1))
    before = table_state(old.warehouse)

    r = pwh("--warehouse", str(old.warehouse), "rederive")
    assert r.returncode == 1
    assert "archived copy missing" in r.stderr and shas[0] in r.stderr
    assert "not the run's bytes" in r.stderr and shas[1][:12] in r.stderr
    assert "[3/3] ok" in r.stderr and "1 re-derived" in r.stdout and "2 failed" in r.stdout
    con = duckdb.connect(str(old.warehouse), read_only=True)
    versions = dict(con.execute("SELECT sha256, parser_version FROM raw.files").fetchall())
    con.close()
    assert versions == {shas[0]: OLD_KINETO, shas[1]: OLD_KINETO, shas[2]: kineto.PARSER_VERSION}
    assert rederivations(old) == [(shas[2], OLD_KINETO, kineto.PARSER_VERSION)]  # not the failed
    after = table_state(old.warehouse)
    for t in before:  # the failed runs' rows untouched
        assert [x for x in after[t] if shas[2] not in x] == \
            [x for x in before[t] if shas[2] not in x], t

    # the archive restored: the next run picks up exactly the two runs still old
    shutil.move(kept, gone)
    altered.write_bytes(original)
    dry = pwh("--warehouse", str(old.warehouse), "rederive", "--dry-run")
    assert dry.returncode == 0 and "2 run(s) would be re-derived" in dry.stdout
    assert shas[0][:12] in dry.stdout and shas[2][:12] not in dry.stdout
    r = pwh("--warehouse", str(old.warehouse), "rederive")
    assert r.returncode == 0, r.stderr
    assert "2 re-derived" in r.stdout and "[2/2] ok" in r.stderr


def test_dry_run_changes_nothing_and_newer_runs_are_left_alone(two, tmp_path):
    old, _ = two
    ingest_paths(old, kineto_traces(tmp_path, 2))
    make_kineto_old(old)
    con = duckdb.connect(str(old.warehouse))
    one = con.execute("SELECT min(sha256) FROM raw.files").fetchone()[0]
    con.execute("UPDATE raw.files SET parser_version = 'kineto_trace/99' WHERE sha256 = ?", [one])
    con.close()
    before = table_state(old.warehouse)
    dry = pwh("--warehouse", str(old.warehouse), "rederive", "--dry-run")
    assert dry.returncode == 0
    assert "1 run(s) would be re-derived" in dry.stdout and f"kineto_trace/1 -> {kineto.PARSER_VERSION}" \
        in dry.stdout
    assert "derived by a newer pwh" in dry.stderr and "kineto_trace/99" in dry.stderr
    assert table_state(old.warehouse) == before
    r = pwh("--warehouse", str(old.warehouse), "rederive", "--format", "conv_audit")
    assert r.returncode == 0 and "0 stale run(s)" in r.stdout
    assert pwh("--warehouse", str(old.warehouse), "rederive", "--format", "nope").returncode == 2
    r = pwh("--warehouse", str(old.warehouse), "rederive", "-q")
    assert r.returncode == 0 and "1 re-derived" in r.stdout and "[1/1]" not in r.stderr
    con = duckdb.connect(str(old.warehouse), read_only=True)
    assert con.execute("SELECT parser_version FROM raw.files WHERE sha256 = ?", [one]
                       ).fetchone()[0] == "kineto_trace/99"
    con.close()


def test_a_run_rederived_meanwhile_is_not_rederived_twice(two, tmp_path):
    """The version is read again inside the run's transaction (another process, or a first
    attempt that committed just before a kill, may have done it)."""
    old, _ = two
    ingest_paths(old, kineto_traces(tmp_path, 2))
    make_kineto_old(old)
    con = duckdb.connect(str(old.warehouse))
    try:
        stale = rederive.plan(con).stale
        first = rederive.rederive_run(old, con, stale[0])
        assert first.status == "rederived"
        events = con.execute("SELECT count(*) FROM raw.trace_events").fetchone()[0]
        again = rederive.rederive_run(old, con, stale[0])  # the plan made before it
        assert again.status == "skipped" and "already re-derived" in again.message
        assert con.execute("SELECT count(*) FROM raw.trace_events").fetchone()[0] == events
        assert con.execute("SELECT run_id FROM meta.rederivations").fetchall() == [
            (stale[0].run_id,)]  # recorded once
    finally:
        con.close()


def test_help_says_what_it_does():
    r = pwh("rederive", "--help")
    assert r.returncode == 0
    for words in ("archive", "older parser", "atomic per run", "pwh build", "--dry-run",
                  "ingested_at"):
        assert words in r.stdout, words
    top = pwh("--help")
    assert "rederive" in top.stdout


def test_identity_is_kept(two, tmp_path):
    """series, label, captured_at, meta_source, original path and ingested_at unchanged."""
    old, _ = two
    ingest_paths(old, kineto_traces(tmp_path, 2))
    make_kineto_old(old)
    cols = ("sha256, original_path, file_name, byte_size, ingested_at, series, label, "
            "captured_at, meta_source, archive_path")
    con = duckdb.connect(str(old.warehouse), read_only=True)
    before = con.execute(f"SELECT {cols} FROM raw.files ORDER BY 1").fetchall()
    con.close()
    rederive.rederive(old)
    con = duckdb.connect(str(old.warehouse), read_only=True)
    after = con.execute(f"SELECT {cols} FROM raw.files ORDER BY 1").fetchall()
    con.close()
    assert after == before
    assert all(isinstance(r[4], dt.datetime) for r in after)


def test_a_default_identity_takes_the_file_clock_of_todays_reader(two, tmp_path):
    """kineto_trace/2 took baseTimeNanoseconds alone as a trace's capture time (libkineto floors
    it to 3 months: every trace of a quarter at one instant); re-derived, a run without sidecar
    or option takes today's clock (base + first event), as a fresh ingest does, while a run whose
    capture time a sidecar gave keeps it."""
    old, fresh = two
    plain = tmp_path / "kin" / "rel.pt.trace.json"
    kineto_gen.write_file(plain, steps=2, seed=5, relative=True)
    side = tmp_path / "kin" / "side.pt.trace.json"
    kineto_gen.write_file(side, steps=2, seed=6, relative=True)
    (side.parent / (side.name + ".meta.json")).write_text(json.dumps(
        {"label": "S", "captured_at": "2026-10-01T01:02:03Z"}))
    cli = tmp_path / "cli" / "c.pt.trace.json"  # only --series given: its clock was default
    kineto_gen.write_file(cli, steps=2, seed=7, relative=True)
    ingest_paths(old, [plain, side])
    ingest_paths(old, [cli], series="given")
    ingest_paths(fresh, [plain])
    ingest_paths(fresh, [cli], series="given")
    base = dt.datetime(1970, 1, 1) + dt.timedelta(
        microseconds=(kineto_gen.EPOCH_START_NS - kineto_gen.EPOCH_START_NS % 10**9) // 1000)
    con = duckdb.connect(str(old.warehouse))
    try:  # what kineto_trace/2 recorded: the base alone
        con.execute("UPDATE raw.files SET parser_version = 'kineto_trace/2', captured_at = ? "
                    "WHERE meta_source <> 'sidecar'", [base])
        con.execute("UPDATE raw.files SET parser_version = 'kineto_trace/2'")
    finally:
        con.close()
    rep = rederive.rederive(old)
    assert [o.status for o in rep.outcomes] == ["rederived"] * 3, [o.message for o in rep.outcomes]
    q = "SELECT meta_source, captured_at FROM raw.files ORDER BY meta_source"
    con = duckdb.connect(str(old.warehouse), read_only=True)
    got = con.execute(q).fetchall()
    con.close()
    con = duckdb.connect(str(fresh.warehouse), read_only=True)
    want = con.execute(q).fetchall()
    con.close()
    assert got == [*want, ("sidecar", dt.datetime(2026, 10, 1, 1, 2, 3))]
    assert [w[0] for w in want] == ["cli", "default"] and all(w[1] > base for w in want)


SAMPLES = ROOT.parent / "shared" / "samples"


@pytest.mark.skipif(not (SAMPLES / "kineto").is_dir(), reason="no ../shared/samples")
def test_real_samples_upgrade_to_a_fresh_ingest(two, tmp_path):
    """Every real sample (Kineto set back to kineto_trace/1; the others' rows damaged and their
    version written back by one), re-derived: a fresh ingest, table by table."""
    old, fresh = two
    files = [p for p in sorted(SAMPLES.rglob("*")) if p.is_file() and not p.name.endswith(
        (".expected.json", ".md", ".meta.json")) and p.stat().st_size < (64 << 20)]
    results = ingest_paths(old, files)
    ok = [r for r in results if r.status == "ingested"]
    assert len(ok) >= 7, [r.message for r in results if r.status != "ingested"]
    make_kineto_old(old)
    damage_every_run(old)
    con = duckdb.connect(str(old.warehouse))
    con.execute("UPDATE raw.files SET parser_version = regexp_replace(parser_version, '/(\\d+)$', "
                "'/0') WHERE source_format <> 'kineto_trace'")
    n = con.execute("SELECT count(*) FROM raw.files").fetchone()[0]
    con.close()
    fresh_ingest_of(old, fresh)
    rep = rederive.rederive(old)
    assert [o.status for o in rep.outcomes] == ["rederived"] * n, \
        [o.message for o in rep.outcomes if not o.ok]
    got, want = table_state(old.warehouse), table_state(fresh.warehouse)
    for t in want:
        assert got[t] == want[t], f"{t} differs from a fresh ingest"
