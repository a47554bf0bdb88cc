"""A 20-partition backfill through the real daemon succeeds with no DuckDB lock errors.

The backfill is launched like the UI's "Materialize" dialog does (GraphQL
``launchPartitionBackfill``) against ``dagster dev`` started by ``scripts/ui.py``; the daemon
launches one run per partition, up to 4 at a time (dagster.yaml), and every writing op takes
the ``duckdb_writer`` pool (limit 1). The test shows the pool serialised the writers (their
recorded execution intervals never overlap across runs) and that no run met a locked file.
"""

from __future__ import annotations

import re
import time

import dagster as dg
import duckdb
import pytest

from tests.test_dagster_devserver import DevServer
from warehouse import synth
from warehouse.config import settings
from warehouse.landing import stage

N = 20
TERMINAL = {"SUCCESS", "FAILURE", "CANCELED"}
LOCK_TROUBLE = re.compile(r"could not set lock|conflicting lock|locked by another process|"
                          r"is busy|WarehouseBusyError|database is locked", re.IGNORECASE)
WRITER_STEPS = ("raw_files", "raw_checks")


def _history(tmp_path):
    spec = synth.HistorySpec(labels=N // 2, repeats=2, single_repeat_every=0,
                             series=(synth.SeriesSpec("decoder-tile", "tile_profile"),),
                             plants=())
    synth.generate(tmp_path / "hist", spec)
    return sorted(p for p in (tmp_path / "hist" / "runs").rglob("*.json")
                  if not p.name.endswith(".meta.json"))


def _launch_backfill(server: DevServer, keys: list[str]) -> str:
    nodes = server.graphql("{ assetNodes { assetKey { path } groupName } }")["assetNodes"]
    raw = [{"path": n["assetKey"]["path"]} for n in nodes if n["groupName"] == "raw"]
    assert len(raw) == 9
    res = server.graphql(
        """mutation($p: LaunchBackfillParams!) { launchPartitionBackfill(backfillParams: $p) {
             __typename ... on LaunchBackfillSuccess { backfillId }
             ... on PythonError { message } ... on InvalidSubsetError { message } } }""",
        {"p": {"assetSelection": raw, "partitionNames": keys, "fromFailure": False,
               "title": "test backfill of 20 run files"}})["launchPartitionBackfill"]
    assert res["__typename"] == "LaunchBackfillSuccess", res
    return res["backfillId"]


def _wait(server: DevServer, backfill_id: str, timeout_s: float = 600) -> tuple[str, list]:
    q = """query($id: String!, $tags: [ExecutionTag!]) {
      partitionBackfillOrError(backfillId: $id) { ... on PartitionBackfill { status } }
      runsOrError(filter: {tags: $tags}) { ... on Runs { results { runId status } } } }"""
    deadline = time.monotonic() + timeout_s
    while True:
        d = server.graphql(q, {"id": backfill_id,
                               "tags": [{"key": "dagster/backfill", "value": backfill_id}]})
        status = d["partitionBackfillOrError"]["status"]
        runs = d["runsOrError"]["results"]
        if (len(runs) >= N and all(r["status"] in TERMINAL for r in runs)
                and status.startswith("COMPLETED")) or status in ("FAILED", "CANCELED"):
            return status, runs
        if time.monotonic() > deadline:
            raise AssertionError(f"backfill not done after {timeout_s} s: {status}, "
                                 f"{[r['status'] for r in runs]}\n{server.log()[-3000:]}")
        time.sleep(2)


def _writer_intervals(instance, run_id: str) -> list[tuple[float, float, str]]:
    starts, out = {}, []
    for e in instance.all_logs(run_id):
        de = e.dagster_event
        if de is None or de.step_key not in WRITER_STEPS:
            continue
        if de.event_type_value == "STEP_START":
            starts[de.step_key] = e.timestamp
        elif de.event_type_value in ("STEP_SUCCESS", "STEP_FAILURE"):
            out.append((starts[de.step_key], e.timestamp, f"{run_id[:8]}:{de.step_key}"))
    return out


@pytest.mark.slow
def test_backfill_of_20_partitions_has_no_lock_errors(tmp_path):
    files = _history(tmp_path)
    assert len(files) == N
    server = DevServer(tmp_path)
    s = settings(server.warehouse)
    keys = [stage(s, f) for f in files]  # what the landing sensor does for each file
    assert len(set(keys)) == N
    try:
        server.start()
        with dg.DagsterInstance.from_config(str(server.home)) as instance:
            instance.add_dynamic_partitions("run_files", keys)
            status, runs = _wait(server, _launch_backfill(server, keys))
            assert status == "COMPLETED_SUCCESS", (status, runs)
            assert len(runs) == N and {r["status"] for r in runs} == {"SUCCESS"}

            # the pool serialised every writer: no two writing steps ever ran at the same time
            intervals = sorted(iv for r in runs for iv in _writer_intervals(instance, r["runId"]))
            assert len(intervals) == 2 * N
            for (_s0, e0, a), (s1, _e1, b) in zip(intervals, intervals[1:], strict=False):
                assert e0 <= s1, f"{a} and {b} wrote at the same time"

            # and no run met a locked warehouse file (event log and compute logs)
            for r in runs:
                for e in instance.all_logs(r["runId"]):
                    assert not LOCK_TROUBLE.search(e.message or ""), e.message
        logs = [p for p in server.home.rglob("*") if p.is_file()
                and p.suffix in (".err", ".out", ".log")]
        for p in logs:
            hit = LOCK_TROUBLE.search(p.read_text(errors="replace"))
            assert not hit, f"{p}: {hit.group(0)}"
    finally:
        server.stop()

    con = duckdb.connect(str(server.warehouse), read_only=True)
    try:
        got = con.execute("SELECT sha256, count(*) FROM raw.files GROUP BY 1").fetchall()
        status_rows = con.execute(
            "SELECT status, count(*) FROM checks.run_status GROUP BY 1").fetchall()
    finally:
        con.close()
    assert sorted(k for k, _ in got) == sorted(keys) and all(n == 1 for _, n in got)
    assert status_rows == [("passed", N)]  # every run validated by its blocking raw checks
