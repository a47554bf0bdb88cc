"""rocprof, the CPU side (issue 20, item 1): HIP / HSA API calls (kind ``runtime``) and roctx
markers (kind ``annotation``) where the files carry them: rocprofv3's API-trace CSVs
(``hip_api_trace.csv`` & co.), rocprof v1's ``results.db`` (``HIP`` / ``HSA`` tables, read on
disk) and ``results.json`` (``CPU HIP API`` lanes). Expected values come from the CSV module
and SQLite, never from the parser."""

from __future__ import annotations

import csv
import io
import json
import re
import sqlite3

import pyarrow.compute as pc
import pytest

from tests import gen_vendor_traces as gen
from tests.test_formats_nsys import claimed_by
from tests.vendor_trace_checks import RUN, check_schema, load
from warehouse import db
from warehouse.errors import FormatError
from warehouse.ingesting import loader
from warehouse.ingesting.formats import nsys_sqlite, rocprof_csv, rocprof_db, rocprof_json

KS = gen.kernels(9, 25)
COLS = ("event_idx", "kind", "category", "name", "device", "stream", "pid", "tid", "start_ns",
        "dur_ns", "correlation", "args")


def _events(p, kind: str | None = None) -> list[dict]:
    ev = p.tables["trace_events"]
    if kind is not None:
        ev = ev.filter(pc.equal(ev["kind"], kind))
    return ev.to_pylist()


def test_api_trace_csv_calls_and_markers_as_written():
    data = gen.rocprof_api_trace_csv(KS)
    assert claimed_by(data) == ["rocprof_csv"]
    p = rocprof_csv.parse(data, "hip_api_trace.csv", RUN)
    check_schema(p)
    rows = list(csv.DictReader(io.StringIO(data.decode())))
    got = _events(p)
    assert len(got) == len(rows) == 3 * len(KS) + 2
    kinds = {"HIP_COMPILER_API": "runtime", "HIP_RUNTIME_API": "runtime",
             "HSA_CORE_API": "runtime", "MARKER_CORE_RANGE_API": "annotation",
             "MARKER_CONTROL_API": "other"}
    for r, e in zip(rows, got, strict=True):
        assert (e["kind"], e["category"], e["name"]) == (kinds[r["Domain"]], r["Domain"],
                                                         r["Function"])
        assert e["start_ns"] == int(r["Start_Timestamp"])
        assert e["dur_ns"] == int(r["End_Timestamp"]) - int(r["Start_Timestamp"])
        assert (e["pid"], e["tid"], e["correlation"]) == (r["Process_Id"], r["Thread_Id"],
                                                         int(r["Correlation_Id"]))
    meta = json.loads(p.tables["trace_runs"]["metadata"][0].as_py())
    assert meta["file_kind"] == "api_trace.csv"
    assert p.tables["trace_runs"]["tool"][0].as_py() == "rocprofv3"
    assert p.summary == {"kernels": 0, "runtime": 2 * len(KS) + 1, "annotation": len(KS),
                         "other": 1}
    # lossless: the table comes back (quoting aside)
    back = list(csv.DictReader(io.StringIO(rocprof_csv.rebuild(load(p), RUN))))
    assert back == rows


def test_api_calls_link_to_the_dispatches_of_kernel_trace_csv():
    """rocprofv3 numbers an API call and the dispatch it made with one Correlation_Id: the
    hipLaunchKernel of each kernel finds its dispatch, and it starts before it."""
    calls = rocprof_csv.parse(gen.rocprof_api_trace_csv(KS), "hip_api_trace.csv", RUN)
    disp = rocprof_csv.parse(gen.rocprof_csv(KS, "v3"), "kernel_trace.csv", RUN)
    by_corr = {e["correlation"]: e for e in _events(disp, "kernel")}
    launches = [e for e in _events(calls, "runtime") if e["name"] == "hipLaunchKernel"]
    assert len(launches) == len(KS) == len(by_corr)
    for e, k in zip(launches, KS, strict=True):
        d = by_corr[e["correlation"]]
        assert d["name"] == k.name and e["start_ns"] + e["dur_ns"] <= d["start_ns"]


@pytest.mark.parametrize("bad,rule", [
    ('"HIP_RUNTIME_API","hipMalloc",1,1,3,200,100', r"End_Timestamp >= Start_Timestamp"),
    ('"HIP_RUNTIME_API","hipMalloc",1,1,3,1.2E+14,100', r"Start_Timestamp.*scientific notation"),
    ('"HIP_RUNTIME_API","hipMalloc",1,1,x,100,200', r"Correlation_Id"),
])
def test_a_bad_api_row_is_refused_naming_line_and_column(bad, rule):
    data = ",".join(f'"{h}"' for h in gen.API_HEADER) + "\n" + bad + "\n"
    with pytest.raises(FormatError) as e:
        rocprof_csv.parse(data.encode(), "api.csv", RUN)
    assert "line 2" in str(e.value) and re.search(rule, str(e.value)), str(e.value)


def test_results_db_hip_calls_are_runtime_rows_read_on_disk(wh, tmp_path, monkeypatch):
    """rocprof v1 results.db: every HIP API row a ``runtime`` event (name without rocprof's
    quotes, exact times, every column in args); ingested from the file on disk in batches with
    the rows ``parse`` finds in memory."""
    data = gen.rocprof_results_db(KS)
    f = tmp_path / "results.db"
    f.write_bytes(data)
    con = sqlite3.connect(f"file:{f}?mode=ro", uri=True)
    want = con.execute('select "Name", "BeginNs", "EndNs" - "BeginNs", cast("tid" as text) '
                       'from HIP order by rowid').fetchall()
    con.close()
    p = rocprof_db.parse(data, str(f), RUN)
    hip = [e for e in _events(p, "runtime") if e["category"] == "HIP"]
    assert [(e["name"], e["start_ns"], e["dur_ns"], e["tid"]) for e in hip] == want
    monkeypatch.setattr(nsys_sqlite, "BATCH_ROWS", 4)
    small = rocprof_db.parse(data, str(f), RUN)
    assert small.tables["trace_events"].equals(p.tables["trace_events"])
    r = loader.ingest_file(wh, f)
    assert r.status == "ingested", r.message
    c = db.connect_rw(wh.warehouse)
    try:
        rows = c.execute(f"select {', '.join(COLS)} from raw.trace_events "  # noqa: S608
                         "order by event_idx").fetchall()
    finally:
        c.close()
    ev = rocprof_db.parse(data, str(f), r.sha256).tables["trace_events"]
    assert rows == list(zip(*(ev.column(c).to_pylist() for c in COLS), strict=True))


def test_results_json_hip_api_lane_is_runtime():
    p = rocprof_json.parse(gen.rocprof_results_json(KS, hip_trace=True), "results.json", RUN)
    calls = _events(p, "runtime")
    assert [(e["name"], e["start_ns"], e["dur_ns"]) for e in calls] == [
        ("hipLaunchKernel", k.start_ns - 5000, 1000) for k in KS]
    assert {e["category"] for e in calls} == {"CPU HIP API"}
