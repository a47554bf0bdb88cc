"""Nsight Systems and rocprof files through the real loader: good files land, each hostile file
is refused with file, location and rule, quarantined, and leaves no row behind."""

from __future__ import annotations

import gzip
import json
import re
import sqlite3
from pathlib import Path

import pytest

from tests import gen_vendor_traces as gen
from tests.conftest import ro
from tests.test_formats_nsys import HEAD, _csv
from tests.test_formats_rocprof import TS_HEAD
from tests.vendor_trace_checks import SAMPLES, expected_sums
from warehouse.ingesting import loader

KS = gen.kernels(11, 24)
BIG = "k" * (1 << 20)  # a 1 MB kernel name

GOOD = {
    "good/report.sqlite": (gen.nsys_sqlite(KS), "nsys_sqlite"),
    "good/old_report.sqlite": (gen.nsys_sqlite(KS[:9], old_schema=True), "nsys_sqlite"),
    "good/nokernels.sqlite": (gen.nsys_sqlite(KS[:3], kernel_table=False), "nsys_sqlite"),
    "good/kern_sum.csv": (gen.nsys_kern_sum_csv(KS), "nsys_kern_sum_csv"),
    "good/timestamps.csv": (gen.rocprof_csv(KS), "rocprof_csv"),
    "good/results.csv": (gen.rocprof_csv(KS[:5], "results"), "rocprof_csv"),
    "good/kernel_trace.csv": (gen.rocprof_csv(KS[:7], "v3"), "rocprof_csv"),
    "good/kernel_stats.csv": (gen.rocprof_stats_csv(KS, v3=True), "rocprof_stats_csv"),
    "good/results.json": (gen.rocprof_results_json(KS), "rocprof_json"),
    "good/hip_results.json": (gen.rocprof_results_json(KS[:6], hip_trace=True), "rocprof_json"),
    "good/results.db": (gen.rocprof_results_db(KS), "rocprof_db"),
    # 0 kernels is a valid run in every format (CPU-only trace, export without kernels)
    "zero/skipped_kern_sum.csv": (b"Processing [r.sqlite] with [cuda_gpu_kern_sum.py]... \n"
                                  b"SKIPPED: r.sqlite does not contain CUDA kernel data.\n",
                                  "nsys_kern_sum_csv"),
    "zero/kern_sum_header.csv": (gen.nsys_kern_sum_csv([], preamble=False), "nsys_kern_sum_csv"),
    "zero/timestamps.csv": (gen.rocprof_csv([]), "rocprof_csv"),
    "zero/results.csv": (gen.rocprof_csv([], "results"), "rocprof_csv"),
    "zero/kernel_trace.csv": (gen.rocprof_csv([], "v3"), "rocprof_csv"),
    "zero/kernel_stats.csv": (gen.rocprof_stats_csv([], v3=True), "rocprof_stats_csv"),
    "zero/results.stats.csv": (gen.rocprof_stats_csv([]), "rocprof_stats_csv"),
    "zero/results.json": (gen.rocprof_results_json([]), "rocprof_json"),
    "zero/results.db": (gen.rocprof_results_db([]), "rocprof_db"),
    "zero/report.sqlite": (gen.nsys_sqlite([]), "nsys_sqlite"),
    "zero/cpu_only.pt.trace.json": (
        b'{"schemaVersion": 1, "traceEvents": [{"ph": "X", "cat": "cpu_op", "name": '
        b'"aten::add", "pid": 1, "tid": 1, "ts": 1.5, "dur": 2}]}', "kineto_trace"),
    # gzip is undone by the registry whatever the format
    "good/kern_sum.csv.gz": (gzip.compress(gen.nsys_kern_sum_csv(KS[:8]), mtime=0),
                             "nsys_kern_sum_csv"),
    "good/report.sqlite.gz": (gzip.compress(gen.nsys_sqlite(KS[:8]), mtime=0), "nsys_sqlite"),
}


def _other_sqlite() -> bytes:
    con = sqlite3.connect(":memory:")
    con.execute("create table A (Index_ integer, KernelName text, BeginNs integer)")
    con.commit()
    return con.serialize()


def _nsys_bad_end() -> bytes:
    con = sqlite3.connect(":memory:")
    con.deserialize(gen.nsys_sqlite(KS[:4]))
    con.execute("update CUPTI_ACTIVITY_KIND_KERNEL set end = start - 1 where rowid = 3")
    con.commit()
    return con.serialize()


def _rocprof_db_bad_end() -> bytes:
    con = sqlite3.connect(":memory:")
    con.deserialize(gen.rocprof_results_db(KS[:4]))
    con.execute("update OPS set EndNs = 'soon' where rowid = 2")
    con.commit()
    return con.serialize()


_SUM_ROW = ["100.0", "5", "1", "5.0", "5.0", "5", "5", "0.0", "k"]
_JSON = gen.rocprof_results_json(KS[:3])

# file name -> (bytes, location, rule), both regular expressions
HOSTILE = {
    "bad/not_nsys.db": (_other_sqlite(), r"\$", "Nsight Systems export"),
    "bad/cut.sqlite": (gen.nsys_sqlite(KS)[:6000], r"\$|table", "SQLite|StringIds|readable"),
    "bad/end_before_start.sqlite": (_nsys_bad_end(), r"table CUPTI_ACTIVITY_KIND_KERNEL, rowid 3",
                                    "end >= start"),
    "bad/results_bad_end.db": (_rocprof_db_bad_end(), r"table OPS, rowid 2, column EndNs",
                               "integer timestamp"),
    "bad/cut.csv.gz": (gzip.compress(gen.rocprof_csv(KS), mtime=0)[:300], r"byte \d+",
                       "gzip"),
    "bad/sum_spreadsheet.csv": (_csv(HEAD, [*_SUM_ROW[:1], "8.1097E+14", *_SUM_ROW[2:]]),
                                r"line 2, column 'Total Time \(ns\)'", "spreadsheet"),
    "bad/sum_nan.csv": (_csv(HEAD, [*_SUM_ROW[:1], "NaN", *_SUM_ROW[2:]]),
                        r"line 2, column 'Total Time \(ns\)'", "finite"),
    "bad/sum_negative.csv": (_csv(HEAD, [*_SUM_ROW[:2], "-1", *_SUM_ROW[3:]]),
                             r"line 2, column 'Instances'", "non-negative"),
    "bad/sum_wrong_header.csv": (_csv(["Time", "Total", "Count", "Kernel"], ["1", "2", "3", "k"]),
                                 r"\$", "known source format"),
    "bad/sum_big_name.csv": (_csv(HEAD, [*_SUM_ROW[:-1], BIG]), r"line 2, column 'Name'",
                             "at most"),
    "bad/ts_spreadsheet.csv": (_csv(TS_HEAD, ["0", "k", "2", "0", "8.1097E+14", "9"]),
                               r"line 2, column 'Start_Timestamp'", "spreadsheet"),
    "bad/ts_negative_duration.csv": (_csv(TS_HEAD, ["0", "k", "2", "0", "20", "10"]),
                                     r"line 2, column 'End_Timestamp'", "non-negative duration"),
    "bad/ts_nan.csv": (_csv(TS_HEAD, ["0", "k", "2", "0", "nan", "10"]),
                       r"line 2, column 'Start_Timestamp'", "finite"),
    "bad/ts_wrong_header.csv": (_csv(TS_HEAD[:-1] + ["Stop"], ["0", "k", "2", "0", "1", "2"]),
                                r"line 1", "End_Timestamp"),
    "bad/ts_big_name.csv": (_csv(TS_HEAD, ["0", BIG, "2", "0", "1", "2"]),
                            r"line 2, column 'Kernel_Name'", "at most"),
    "bad/stats_spreadsheet.csv": (
        _csv(["Name", "Calls", "TotalDurationNs", "AverageNs", "Percentage"],
             ["k.kd", "3", "1.2E+06", "400000", "100.0"]),
        r"line 2, column 'TotalDurationNs'", "spreadsheet"),
    "bad/results_truncated.json": (_JSON[: len(_JSON) // 2], r"\$|line", "truncated"),
    "bad/results_no_duration.json": (
        _JSON.replace(b'"DurationNs"', b'"X1"').replace(b'"BeginNs"', b'"X2"'),
        r"\$\.traceEvents\[\d+\]\.args\.DurationNs", "truncated to whole"),
    "bad/results_big_name.json": (
        _JSON.replace(KS[0].name.encode(), BIG.encode(), 1), r"\$\.traceEvents\[\d+\]\.name",
        "at most"),
}


@pytest.fixture
def corpus(tmp_path) -> Path:
    for name, (data, *_) in {**GOOD, **HOSTILE}.items():
        p = tmp_path / "in" / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    return tmp_path / "in"


def test_good_files_land_and_hostile_files_are_refused_and_quarantined(wh, corpus):
    results = {Path(r.path).relative_to(corpus).as_posix(): r
               for r in loader.ingest_paths(wh, [corpus])}
    assert set(results) == set(GOOD) | set(HOSTILE)
    for name, (_, fmt) in GOOD.items():
        r = results[name]
        assert (r.status, r.source_format) == ("ingested", fmt), (name, r.message)
    for name, (_, loc, rule) in HOSTILE.items():
        r = results[name]
        assert r.status == "failed", name
        shown = str(corpus / name)
        assert re.search(rf"{re.escape(shown)}: at ({loc})[^:]*: .*({rule})", r.message), \
            (name, r.message[:300])
        assert r.quarantine_path and Path(r.quarantine_path).read_bytes() == HOSTILE[name][0]
    good_ids = {results[n].sha256 for n in GOOD}
    con = ro(wh)
    try:
        for t in ("trace_runs", "trace_events", "trace_devices", "trace_kernel_summaries"):
            ids = {r[0] for r in con.execute(f"select distinct run_id from raw.{t}").fetchall()}
            assert ids <= good_ids, t  # nothing of a refused file, not even a partial run
        assert {r[0] for r in con.execute("select run_id from raw.trace_runs").fetchall()} \
            == good_ids
        errors = con.execute("select count(*) from raw.ingest_errors").fetchall()[0][0]
        assert errors == len(HOSTILE)
        # per-kernel sums in the warehouse equal the generator's for a dispatch file
        rid = results["good/timestamps.csv"].sha256
        got = dict(((n, (c, s)) for n, c, s in con.execute(
            "select name, count(*), sum(dur_ns) from raw.trace_events where run_id = ? "
            "and kind = 'kernel' group by name", [rid]).fetchall()))
        assert got == gen.expected(KS)
        for name in (n for n in GOOD if n.startswith("zero/")):
            rid = results[name].sha256
            assert con.execute(
                "select (select count(*) from raw.trace_runs where run_id = $r), "
                "(select count(*) from raw.trace_events where run_id = $r and kind = 'kernel'), "
                "(select count(*) from raw.trace_kernel_summaries where run_id = $r)",
                {"r": rid}).fetchall() == [(1, 0, 0)], name
        nok = results["good/nokernels.sqlite"].sha256
        assert con.execute("select count(*) from raw.trace_events where run_id = ? and "
                           "kind = 'kernel'", [nok]).fetchall() == [(0,)]
    finally:
        con.close()


def test_samples_through_pwh_ingest_match_expected(wh, tmp_path):
    files = [p for d in ("nsys_sqlite", "nsys_stats_csv", "rocprof") if (SAMPLES / d).is_dir()
             for p in sorted((SAMPLES / d).iterdir()) if not p.name.endswith(".expected.json")]
    if not files:
        pytest.skip(f"no samples in {SAMPLES}")
    results = loader.ingest_paths(wh, files)
    assert [r.status for r in results] == ["ingested"] * len(files), [r.message for r in results]
    con = ro(wh)
    try:
        for f, r in zip(files, results, strict=True):
            rows = con.execute(
                "select name, count(*), sum(dur_ns) from raw.trace_events where run_id = ? "
                "and kind = 'kernel' group by name union all "
                "select name, sum(calls), sum(total_ns) from raw.trace_kernel_summaries "
                "where run_id = ? group by name", [r.sha256, r.sha256]).fetchall()
            assert {n: (int(c), int(s)) for n, c, s in rows} == expected_sums(f), f.name
            exp = json.loads(Path(str(f) + ".expected.json").read_text())
            assert r.source_format.startswith(("nsys", "rocprof")), exp["format"]
    finally:
        con.close()
