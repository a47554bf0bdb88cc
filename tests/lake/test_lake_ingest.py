"""Lake ingestion: one exactly-once commit per run, on SQLite and on PostgreSQL catalogs.

Concurrent writers racing on every run, a writer killed with SIGKILL at the two points of a
commit, a commit conflict forced between staging and committing, and the lake read back with
plain pyiceberg equal to what `pwh ingest` puts in a DuckDB warehouse.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import duckdb
import pytest

from tests.lake.conftest import ROOT, lake_args, pwh, run_files
from warehouse.config import settings
from warehouse.lake import schemas

WRITERS = 4


def plain_catalog(cfg):
    """The lake as any pyiceberg user opens it: no pwh code involved."""
    from pyiceberg.catalog import load_catalog

    return load_catalog("pwh", type="sql", uri=cfg.uri, warehouse=cfg.location)


def lake_rows(cfg) -> dict[str, list[dict]]:
    cat = plain_catalog(cfg)
    out = {}
    for name in schemas.raw_schemas():
        ns, t = name.split(".")
        out[name] = cat.load_table((ns, t)).scan().to_arrow().to_pylist() \
            if cat.table_exists((ns, t)) else []
    return out


def expected_counts(files: list[Path]) -> tuple[set[str], Counter]:
    """Run ids and rows per raw table, parsing every file in-process (the reference)."""
    from warehouse.ingesting import formats, loader

    runs, rows = set(), Counter()
    for f in files:
        data = f.read_bytes()
        sha = loader.sha256_file(data)
        if sha in runs:
            continue
        runs.add(sha)
        rows["raw.files"] += 1
        for t, tab in formats.parse(data, str(f), sha).tables.items():
            rows[f"raw.{t}"] += tab.num_rows
    return runs, rows


def assert_exactly_once(cfg, files: list[Path]) -> None:
    runs, want = expected_counts(files)
    got = lake_rows(cfg)
    shas = [r["sha256"] for r in got["raw.files"]]
    assert Counter(shas) == Counter(runs), "every run exactly once in raw.files"
    for name, rows in got.items():
        assert len(rows) == want[name], f"{name}: {len(rows)} rows, expected {want[name]}"
        assert {r.get("run_id", r.get("sha256")) for r in rows} <= runs
    from warehouse.lake import ledger
    from warehouse.lake.catalog import open_catalog

    cat = open_catalog(cfg)
    assert ledger.committed(cat.engine, cat.name) == runs


def assert_lake_equals_duckdb(cfg, files: list[Path], tmp_path) -> dict[str, list[dict]]:
    """``pwh ingest`` of ``files`` into a DuckDB warehouse gives the same rows, table by table
    and column by column, as the lake has (ingestion time and archive path aside)."""
    wh = settings(tmp_path / "duck" / "warehouse.duckdb")
    pwh("--warehouse", str(wh.warehouse), "ingest", *map(str, files))
    got = lake_rows(cfg)
    con = duckdb.connect(str(wh.warehouse), read_only=True)
    try:
        for name, rows in got.items():
            cols = [c for c in schemas.raw_schemas()[name].names
                    if c not in ("ingested_at", "archive_path")]
            want = con.sql(f"SELECT {', '.join(cols)} FROM {name}").fetchall()
            have = [tuple(r[c] for c in cols) for r in rows]
            assert sorted(have, key=repr) == sorted(want, key=repr), name
    finally:
        con.close()
    return got


def test_cli_ingest_equals_duckdb_ingest(lake, seeds, tmp_path):
    """Same tables, columns and rows as the DuckDB warehouse; a rerun is a no-op."""
    r = pwh("lake", "ingest", str(seeds["profile"]), str(seeds["audit"]), *lake_args(lake))
    assert "2 ingested" in r.stdout
    again = pwh("lake", "ingest", str(seeds["profile"]), str(seeds["audit"]), *lake_args(lake))
    assert "0 ingested, 2 already ingested" in again.stdout
    got = assert_lake_equals_duckdb(lake, [seeds["profile"], seeds["audit"]], tmp_path)
    assert len(got["raw.profile_samples"]) == 3 and len(got["raw.audit_kernels"]) == 79


def test_kernel_traces_ingest_as_pwh_ingest_does(sqlite_lake, tmp_path):
    """Kineto traces (one gzip-compressed, one with a sidecar) land in the lake's raw.trace_*
    tables through the same parsers, with the trace's own clock as captured_at."""
    from warehouse.ingesting.formats import kineto_gen

    src = tmp_path / "traces"
    kineto_gen.write_file(src / "a.pt.trace.json.gz", gz=True, steps=2, seed=1)
    kineto_gen.write_file(src / "b.pt.trace.json", steps=2, seed=2)
    (src / "b.pt.trace.json.meta.json").write_text(
        '{"series": "s1", "label": "b9", "captured_at": "2026-03-01T00:00:00Z"}')
    files = [src / "a.pt.trace.json.gz", src / "b.pt.trace.json"]
    r = pwh("lake", "ingest", *map(str, files), *lake_args(sqlite_lake))
    assert "2 ingested" in r.stdout, r.stdout
    got = assert_lake_equals_duckdb(sqlite_lake, files, tmp_path)
    assert len(got["raw.trace_runs"]) == 2
    assert got["raw.trace_events"] and {r["source_format"] for r in got["raw.files"]} \
        == {"kineto_trace"}
    assert {r["label"] for r in got["raw.files"]} == {"a.pt.trace.json", "b9"}


SAMPLES = ROOT.parent / "shared" / "samples"


def test_kineto_sample_ingests_as_pwh_ingest_does(sqlite_lake, tmp_path):
    """A real PyTorch-profiler trace (``../shared/samples/kineto``), kernels as expected."""
    import json

    sample = SAMPLES / "kineto" / "hta__amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz"
    if not sample.exists():
        pytest.skip(f"{sample} is absent (shared samples are not in the repository)")
    pwh("lake", "ingest", str(sample), *lake_args(sqlite_lake))
    got = assert_lake_equals_duckdb(sqlite_lake, [sample], tmp_path)
    truth = json.loads(sample.with_name(sample.name + ".expected.json").read_text())
    kernels = [e for e in got["raw.trace_events"] if e["kind"] == "kernel"]
    assert kernels and len(got["raw.trace_runs"]) == 1
    assert len(kernels) == truth["n_kernel_events"]
    assert len({e["name"] for e in kernels}) == truth["n_distinct_kernels"]


def test_concurrent_writers_race_on_every_run(lake, small_history):
    """4 processes each ingest every file of the history, in different orders: every run is
    committed exactly once, nothing lost, nothing doubled."""
    files = run_files(small_history)
    procs = []
    for i in range(WRITERS):
        order = files[:]
        random.Random(i).shuffle(order)
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "warehouse.cli", "lake", "ingest", "-q", *map(str, order),
             *lake_args(lake)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True))
    outs = [p.communicate(timeout=900) for p in procs]
    for p, (out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, out + err
    ingested = sum(int(out.strip().splitlines()[-1].split(" ingested")[0].split()[-1])
                   for out, _ in outs)
    assert ingested == len(files), "each run committed by exactly one writer"
    assert_exactly_once(lake, files)


KILLER = """
import os, sys, time
from pathlib import Path
from warehouse.config import settings
from warehouse.lake.catalog import LakeConfig, open_catalog
from warehouse.lake.ingest import ingest_file, prepare

cfg = LakeConfig(sys.argv[1], sys.argv[2])
stage, marker = sys.argv[3], Path(sys.argv[4])
cat = open_catalog(cfg)
prepare(cat)

def hook(at):
    if at == stage:
        marker.write_text(str(os.getpid()))
        time.sleep(600)

ingest_file(settings(sys.argv[5]), cat, cfg, Path(sys.argv[6]), hook=hook)
"""


@pytest.mark.parametrize("stage", ["staged", "in_transaction"])
def test_kill_9_mid_commit_leaves_nothing_and_rerun_completes(lake, seeds, tmp_path, stage):
    """SIGKILL with every file written (``staged``), or with every table pointer moved in the
    open database transaction (``in_transaction``): no row of the run is visible, the ledger
    does not have it; running the ingest again commits it once."""
    pwh("lake", "ingest", str(seeds["audit"]), *lake_args(lake))  # tables exist, one run in
    marker = tmp_path / "marker"
    p = subprocess.Popen([sys.executable, "-c", KILLER, lake.uri, lake.location, stage,
                          str(marker), str(tmp_path / "wh.duckdb"), str(seeds["profile"])],
                         cwd=ROOT, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 600  # bounds a hang only
    while not marker.exists():
        assert p.poll() is None, p.stderr.read()
        assert time.monotonic() < deadline, "the writer never reached the commit"
        time.sleep(0.1)
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    got = lake_rows(lake)
    assert len(got["raw.files"]) == 1 and got["raw.files"][0]["source_format"] == "conv_audit"
    for name in ("raw.profile_runs", "raw.profile_groups", "raw.profile_samples",
                 "raw.profile_sample_metadata"):
        assert got[name] == [], f"{name}: rows of the killed run are visible"
    r = pwh("lake", "ingest", str(seeds["profile"]), str(seeds["audit"]), *lake_args(lake))
    assert "1 ingested, 1 already ingested" in r.stdout
    assert_exactly_once(lake, [seeds["profile"], seeds["audit"]])


def test_commit_conflict_is_retried(lake, seeds):
    """Another writer commits between our staging and our commit: our compare-and-swap fails,
    the snapshots are rebuilt on the new metadata and the run commits; both runs are there."""
    from warehouse.config import settings as st
    from warehouse.lake.catalog import open_catalog
    from warehouse.lake.ingest import ingest_file, prepare

    cat, other = open_catalog(lake), open_catalog(lake)
    prepare(cat)
    retries, fired = [], []

    def hook(at):
        if at == "staged" and not fired:
            fired.append(1)
            r = ingest_file(st(None), other, lake, seeds["audit"])
            assert r.status == "ingested"

    r = ingest_file(st(None), cat, lake, seeds["profile"], hook=hook,
                    on_retry=lambda n, why: retries.append(why))
    assert r.status == "ingested"
    assert retries == ["raw.files moved"]
    assert_exactly_once(lake, [seeds["profile"], seeds["audit"]])


def test_writers_take_turns_for_the_commit(lake, seeds, tmp_path, monkeypatch):
    """While one writer holds its commit turn (stopped with its snapshots staged), another
    writer of the same catalog waits before loading and staging: it does not stage snapshots
    that the first one's commit would outdate. The turn is released when its holder is killed
    (kill -9), and the second writer then commits without a single conflict."""
    import contextlib
    import threading

    from bench import gen
    from warehouse.config import settings as st
    from warehouse.lake import commit
    from warehouse.lake.catalog import open_catalog
    from warehouse.lake.ingest import ingest_file

    pwh("lake", "ingest", str(seeds["audit"]), *lake_args(lake))  # tables exist, one run in
    third = tmp_path / "third.json"
    gen.write_profile(third, 50, seed=7)
    marker = tmp_path / "marker"
    p = subprocess.Popen([sys.executable, "-c", KILLER, lake.uri, lake.location, "staged",
                          str(marker), str(tmp_path / "wh.duckdb"), str(seeds["profile"])],
                         cwd=ROOT, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 600
        while not marker.exists():
            assert p.poll() is None, p.stderr.read()
            assert time.monotonic() < deadline, "the first writer never staged its commit"
            time.sleep(0.1)
        events, retries, out = [], [], {}
        turn = commit.commit_turn

        @contextlib.contextmanager
        def asking(cat):
            events.append("asking")
            with turn(cat):
                yield

        monkeypatch.setattr(commit, "commit_turn", asking)

        def second():
            out["r"] = ingest_file(st(tmp_path / "wh2.duckdb"), open_catalog(lake), lake, third,
                                   hook=events.append,
                                   on_retry=lambda n, why: retries.append(why))

        t = threading.Thread(target=second, daemon=True)
        t.start()
        deadline = time.monotonic() + 600
        while "asking" not in events:
            assert t.is_alive(), "the second writer ended before its commit"
            assert time.monotonic() < deadline, "the second writer never reached its commit"
            time.sleep(0.05)
        time.sleep(1.0)
        assert "staged" not in events, "the second writer staged while the first held its turn"
    finally:
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
    t.join(600)
    assert not t.is_alive(), "the second writer did not finish in 600 s"
    assert out["r"].status == "ingested", out["r"].message
    assert retries == [] and events[-2:] == ["staged", "in_transaction"]
    r = pwh("lake", "ingest", str(seeds["profile"]), *lake_args(lake))
    assert "1 ingested" in r.stdout
    assert_exactly_once(lake, [seeds["profile"], seeds["audit"], third])
