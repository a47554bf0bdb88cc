"""Review finding 1: one accepted trace whose times overflow BIGINT when added or summed must
never stop `pwh build`. The staging models sum in HUGEINT and leave such a run out; the trace
checks fail it (so it is marked failed), and every other run is still built.

Three poisons, each accepted by ingestion (every value fits BIGINT on its own):
- ``end``: start + duration past BIGINT (the reviewer's file);
- ``sum``: two kernels whose durations sum past BIGINT;
- ``summary``: an aggregated run (``nsys stats`` kernel summary CSV) whose kernels' totals
  sum past BIGINT on their device."""

from __future__ import annotations

import json

import pytest

from tests.conftest import ro
from warehouse import checks, db
from warehouse.cli import main

BIGINT_MAX = 2**63 - 1


def kernel(name: str, ts: int, dur: int, device: int = 0) -> dict:
    return {"ph": "X", "cat": "kernel", "name": name, "pid": device, "tid": 7, "ts": ts,
            "dur": dur, "args": {"device": device}}


def doc(*events: dict) -> str:
    return json.dumps({"schemaVersion": 1, "traceEvents": list(events)})


POISONS = {
    # the reviewer's repro: ts 9223372036854775 us = 9223372036854775000 ns, + 1000 us
    "end": doc(kernel("k", 9223372036854775, 1000)),
    # 5e15 us = 5e18 ns each: both fit, and so does each end; the sum does not
    "sum": doc(kernel("k", 0, 5_000_000_000_000_000), kernel("k", 1, 5_000_000_000_000_000)),
}
GOOD = doc(kernel("good", 100, 50), kernel("good", 200, 25, device=1))
E18 = str(5 * 10**18)
SUMMARY = "\n".join([  # nsys stats --report cuda_gpu_kern_sum --format csv
    "Time (%),Total Time (ns),Instances,Avg (ns),Med (ns),Min (ns),Max (ns),StdDev (ns),Name",
    f"50.0,{E18},1,{E18},{E18},{E18},{E18},0.0,a",
    f"50.0,{E18},1,{E18},{E18},{E18},{E18},0.0,b", ""])


@pytest.fixture(scope="module")
def poisoned(tmp_path_factory):
    root = tmp_path_factory.mktemp("overflow")
    w = ["--warehouse", str(root / "state" / "warehouse.duckdb")]
    files = [("good", "p.json", GOOD), *((f"poison-{k}", "p.json", v) for k, v in POISONS.items()),
             ("poison-summary", "s.csv", SUMMARY)]
    for folder, name, text in files:
        (root / folder).mkdir()
        (root / folder / name).write_text(text)
        assert main([*w, "ingest", str(root / folder), "-q"]) == 0  # accepted
    from warehouse.config import settings

    return w, settings(w[1])


def _runs(s) -> dict[str, tuple]:
    con = ro(s)
    try:
        return {r[0]: r[1:] for r in con.execute(
            "select series, run_id, check_status, failed_invariants, kernel_count, total_us "
            "from marts.run_summary").fetchall()}
    finally:
        con.close()


def test_build_never_overflows_and_the_checks_fail_the_poisoned_runs(poisoned, capsys):
    w, s = poisoned
    assert main([*w, "build"]) == 0, capsys.readouterr().err  # was: Overflow in addition
    assert main([*w, "build"]) == 0  # and again: no build is stopped by them
    runs = _runs(s)
    assert set(runs) == {"good", "poison-end", "poison-sum", "poison-summary"}
    # the good run is built in full; the poisoned ones have no kernel rows (nothing to sum)
    assert runs["good"][3:] == (1, 75.0)
    for series in ("poison-end", "poison-sum", "poison-summary"):
        assert runs[series][3:] == (0, 0), series
    con = ro(s)
    try:
        assert con.execute("select count(*) from staging.trace_kernels").fetchone() == (2,)
        assert con.execute("select max(kernel_ns) from staging.trace_devices").fetchone() == (
            50_000,)
    finally:
        con.close()

    # the trace checks fail exactly the poisoned runs, naming the broken rule
    with db.writer(s.warehouse) as con:
        results = checks.validate_runs(con, [r[0] for r in runs.values()])
        checks.record_results(con, results)
    ids = {series: r[0] for series, r in runs.items()}
    failed: dict[str, set[str]] = {}
    for r in results:
        if not r.success:
            assert r.critical and r.invariant_id == "SCHEMA", r
            failed.setdefault(r.run_id, set()).add(r.rule)
    assert set(failed) == {ids["poison-end"], ids["poison-sum"], ids["poison-summary"]}
    end_rule = "end >= start: start_ns + dur_ns >= start_ns and fits in BIGINT ns"
    fit_rule = ("the run's kernel time (sum of |durations|, or of summary totals and calls) "
                "and kernel time range (latest end - earliest start) fit in BIGINT ns")
    assert failed[ids["poison-end"]] == {end_rule}
    assert failed[ids["poison-sum"]] == {fit_rule}
    assert failed[ids["poison-summary"]] == {fit_rule}

    assert main([*w, "build"]) == 0
    after = _runs(s)
    assert after["good"][1] == "passed"
    for series in ("poison-end", "poison-sum", "poison-summary"):
        assert after[series][1:3] == ("failed", ["SCHEMA"]), series


def test_a_kernel_time_that_fits_exactly_is_kept(tmp_path, capsys):
    """The guard is not over-eager: a run whose kernel time is exactly BIGINT's maximum ns is
    built with its exact total."""
    d = tmp_path / "edge"
    d.mkdir()
    half = BIGINT_MAX // 2  # ns: the two durations sum to exactly BIGINT_MAX ns
    first_us, rest_ns = divmod(half, 1000)
    (d / "e.json").write_text(doc(kernel("k", 0, 0), kernel("k", 0, 0)).replace(
        '"dur": 0', f'"dur": {first_us}.{rest_ns:03d}', 1).replace(
        '"dur": 0', f'"dur": {(BIGINT_MAX - half) // 1000}.{(BIGINT_MAX - half) % 1000:03d}', 1))
    w = ["--warehouse", str(tmp_path / "state" / "warehouse.duckdb")]
    assert main([*w, "ingest", str(d), "-q"]) == 0
    assert main([*w, "build"]) == 0, capsys.readouterr().err
    from warehouse.config import settings

    con = ro(settings(w[1]))
    try:
        assert con.execute("select total_ns, last_end_ns from staging.trace_kernels"
                           ).fetchall() == [(BIGINT_MAX, BIGINT_MAX - half)]
    finally:
        con.close()
