"""Every real Kineto trace in ``../shared/samples/kineto/`` against its ``.expected.json``.

The ground truth was computed independently (exact integer-ns sums of decimal ``dur``); the
warehouse must match it to the nanosecond, per kernel and per device, after ingest and build.
Skipped where the samples folder is absent.
"""

from __future__ import annotations

import decimal
import gzip
import json
from pathlib import Path

import pytest

from tests.conftest import ROOT
from warehouse import db
from warehouse.ingesting import loader
from warehouse.ingesting.formats import kineto
from warehouse.modelling import models

SAMPLES = ROOT.parent / "shared" / "samples" / "kineto"
FILES = sorted(SAMPLES.glob("*.json.gz")) if SAMPLES.is_dir() else []

pytestmark = pytest.mark.skipif(not FILES, reason=f"no Kineto samples in {SAMPLES}")


def _expected(f: Path) -> dict:
    return json.loads(Path(str(f) + ".expected.json").read_text())


def _ns(us) -> int:
    """The exact ns of an expected.json microsecond value (rounded to 3 decimals there)."""
    return int(decimal.Decimal(str(us)).scaleb(3).to_integral_exact())


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    from warehouse.config import settings

    s = settings(tmp_path_factory.mktemp("kineto-samples") / "state" / "warehouse.duckdb")
    results = loader.ingest_paths(s, FILES)
    assert [r.status for r in results] == ["ingested"] * len(FILES), [r.message for r in results]
    with db.writer(s.warehouse) as con:
        models.build(con)
    con = db.connect_rw(s.warehouse)
    yield con, {Path(r.path).name: r.sha256 for r in results}
    con.close()


@pytest.mark.parametrize("f", FILES, ids=lambda f: f.name[:40])
def test_per_kernel_calls_and_total_ns_equal_the_ground_truth(built, f):
    con, ids = built
    run = ids[f.name]
    exp = _expected(f)
    got = {name: (calls, total) for name, calls, total in con.execute(
        "select kernel, sum(calls)::bigint, sum(total_ns)::bigint from staging.trace_kernels "
        "where run_id = ? group by kernel", [run]).fetchall()}
    want = {k["name"]: (k["calls"], _ns(k["total_us"])) for k in exp["per_kernel"]}
    assert got == want
    assert len(got) == exp["n_distinct_kernels"]
    # the mart: same sums per kernel (over devices), shares summing to one
    mart = con.execute(
        "select count(distinct kernel), coalesce(sum(calls), 0), coalesce(sum(total_ns), 0), "
        "sum(share_of_run) from marts.kernel_run_rollup where run_id = ?", [run]).fetchone()
    assert mart[:3] == (exp["n_distinct_kernels"], exp["n_kernel_events"],
                        _ns(exp["total_kernel_time_us"]))
    if exp["n_kernel_events"]:
        assert mart[3] == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize("f", FILES, ids=lambda f: f.name[:40])
def test_per_device_kernel_time_and_busy_time(built, f):
    con, ids = built
    exp = _expected(f)
    got = {str(d): (calls, kns, bns) for d, calls, kns, bns in con.execute(
        "select device, kernel_calls, kernel_ns, busy_ns from staging.trace_devices "
        "where run_id = ?", [ids[f.name]]).fetchall()}
    want = {d: (v["events"], _ns(v["total_us"]), _ns(v["busy_union_us"]))
            for d, v in exp["devices"].items()}
    assert got == want


def test_cpu_only_trace_is_a_run_with_zero_kernels(built):
    con, ids = built
    cpu = [n for n in ids if "cpu_only" in n]
    if not cpu:
        pytest.skip("no CPU-only sample")
    row = con.execute(
        "select kernel_count, kernel_calls, total_us, tool from marts.run_summary "
        "where run_id = ?", [ids[cpu[0]]]).fetchone()
    assert row == (0, 0, 0, kineto.TOOL)


def _file_kernels(f: Path) -> list[dict]:
    doc = json.loads(gzip.decompress(f.read_bytes()), parse_float=decimal.Decimal)
    return [e for e in doc["traceEvents"]
            if e.get("ph") == "X" and str(e.get("cat", "")).lower() == "kernel"]


def _file_complete_events(f: Path) -> list[dict]:
    doc = json.loads(gzip.decompress(f.read_bytes()), parse_float=decimal.Decimal)
    return [e for e in doc["traceEvents"] if e.get("ph") == "X"]


@pytest.mark.parametrize("f", FILES, ids=lambda f: f.name[:40])
@pytest.mark.parametrize("which", ["kernels", "every complete event"])
def test_raw_layer_rebuilds_the_events_exactly(built, f, which):
    """Kernels, and every complete event (the CPU side: operators, annotations, their
    thread, times, input shapes in args) come back from the raw rows as the file wrote them."""
    con, ids = built
    rebuilt = kineto.rebuild(con, ids[f.name])
    if which == "kernels":
        rebuilt = [e for e in rebuilt if e["cat"].lower() == "kernel"]
        original = _file_kernels(f)
    else:
        original = _file_complete_events(f)
    assert len(rebuilt) == len(original)
    for r, o in zip(rebuilt, original, strict=True):
        for k in ("ts", "dur"):  # exact decimals, never floats
            assert decimal.Decimal(str(r[k])) == decimal.Decimal(o[k]), (k, r, o)
        r = {k: v for k, v in r.items() if k not in ("ts", "dur")}
        o = {k: v for k, v in o.items() if k not in ("ts", "dur")}
        assert json.loads(json.dumps(r), parse_float=decimal.Decimal) == o
