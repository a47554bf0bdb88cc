"""Helpers of the Nsight Systems / rocprof format tests: sample discovery, per-kernel sums,
loading parsed tables into an in-memory DuckDB for ``rebuild``."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import duckdb
import pytest

from warehouse.ingesting.formats import trace
from warehouse.ingesting.formats.base import Parsed

SAMPLES = Path(__file__).resolve().parent.parent.parent / "shared" / "samples"
RUN = "ab" * 32


def samples(folder: str, suffixes: tuple[str, ...]) -> list:
    """pytest params for every sample file of ``folder`` (one skipped param when absent)."""
    d = SAMPLES / folder
    files = sorted(p for p in d.glob("*") if p.name.endswith(suffixes)
                   and not p.name.endswith(".expected.json")) if d.is_dir() else []
    if not files:
        return [pytest.param(None, marks=pytest.mark.skip(reason=f"no samples in {d}"))]
    return [pytest.param(p, id=p.name) for p in files]


def expected_sums(sample: Path) -> dict[str, tuple[int, int]]:
    """``name -> (calls, total_ns)`` from ``<file>.expected.json`` (µs read as decimals)."""
    exp = json.loads(Path(str(sample) + ".expected.json").read_text())
    out = {}
    for k in exp["per_kernel"]:
        ns = Decimal(str(k["total_us"])) * 1000
        assert ns == ns.to_integral_value()
        out[k["name"]] = (k["calls"], int(ns))
    assert sum(c for c, _ in out.values()) == exp["n_kernel_events"]
    return out


def kernel_sums(p: Parsed) -> dict[str, tuple[int, int]]:
    """``name -> (calls, total_ns)`` of the kernels in parsed tables (events or summaries)."""
    agg: dict[str, tuple[int, int]] = {}
    ev = p.tables[trace.EVENTS.name]
    for kind, name, dur in zip(ev["kind"].to_pylist(), ev["name"].to_pylist(),
                               ev["dur_ns"].to_pylist(), strict=True):
        if kind == "kernel":
            c, s = agg.get(name, (0, 0))
            agg[name] = (c + 1, s + dur)
    sm = p.tables[trace.SUMMARIES.name]
    for name, calls, total in zip(sm["name"].to_pylist(), sm["calls"].to_pylist(),
                                  sm["total_ns"].to_pylist(), strict=True):
        c, s = agg.get(name, (0, 0))
        agg[name] = (c + calls, s + total)
    return agg


def check_schema(p: Parsed) -> None:
    """Every table is there with exactly the contract's Arrow schema."""
    assert set(p.tables) == {t.name for t in trace.TABLES}
    for t in trace.TABLES:
        assert p.tables[t.name].schema == t.arrow_schema, t.name


def load(p: Parsed, tables=None):
    """An in-memory DuckDB holding the parsed tables in schema ``raw`` (for ``rebuild``):
    ``tables`` (default: the trace tables; e.g. ``ncu.TABLES``)."""
    con = duckdb.connect()
    con.execute("create schema raw")
    for t in trace.TABLES if tables is None else tables:
        con.execute(t.ddl())
        arrow = p.tables[t.name]  # noqa: F841 (read by DuckDB's replacement scan)
        con.execute(f"insert into raw.{t.name} select * from arrow")  # noqa: S608
    return con


def all_text(p: Parsed) -> str:
    """Every value of every table, as one string (to look for leaked secrets)."""
    return "\n".join(str(p.tables[t.name].to_pylist()) for t in trace.TABLES)


def ingest_one_and_roll_up(tmp_path: Path, name: str, data: bytes) -> tuple[str, list[tuple]]:
    """Write ``data`` as ``in/<name>``, ingest it into a fresh warehouse, build
    ``marts.kernel_run_rollup``; return (run id, [(kernel, device, calls, total_ns)] by kernel)."""
    from warehouse import db
    from warehouse.config import settings
    from warehouse.ingesting.loader import ingest_paths
    from warehouse.modelling import models

    f = tmp_path / "in" / name
    f.parent.mkdir(exist_ok=True)
    f.write_bytes(data)
    s = settings(tmp_path / "state" / "warehouse.duckdb")
    (r,) = ingest_paths(s, [f])
    assert r.status == "ingested", r.message
    with db.writer(s.warehouse) as con:
        models.build(con, select=["marts.kernel_run_rollup"])
    con = db.connect_rw(s.warehouse)
    try:
        return r.sha256, con.execute(
            "select kernel, device, calls::bigint, total_ns::bigint from marts.kernel_run_rollup "
            "where run_id = ? order by kernel", [r.sha256]).fetchall()
    finally:
        con.close()
