"""Nsight Systems: the SQLite export and the ``nsys stats`` kernel summary CSV."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import sqlite3
from pathlib import Path

import pytest

from tests import gen_vendor_traces as gen
from tests.vendor_trace_checks import (
    RUN,
    all_text,
    check_schema,
    expected_sums,
    kernel_sums,
    load,
    samples,
)
from warehouse.errors import FormatError
from warehouse.ingesting.formats import (
    nsys_csv,
    nsys_sqlite,
    rocprof_csv,
    rocprof_db,
    rocprof_json,
    rocprof_stats,
)
from warehouse.ingesting.formats.trace import MAX_NAME

MINE = (rocprof_db, nsys_sqlite, nsys_csv, rocprof_csv, rocprof_stats, rocprof_json)
KS = gen.kernels(3, 30)


def claimed_by(data: bytes) -> list[str]:
    return [m.NAME for m in MINE if m.sniff(data[:65536], "f")]


# ----------------------------------------------------------------------------- samples


@pytest.mark.parametrize("sample", samples("nsys_sqlite", (".sqlite",)))
def test_nsys_sqlite_samples_match_expected(sample):
    data = sample.read_bytes()
    assert claimed_by(data) == ["nsys_sqlite"]
    p = nsys_sqlite.parse(data, str(sample), RUN)
    check_schema(p)
    assert kernel_sums(p) == expected_sums(sample)
    exp = json.loads(Path(str(sample) + ".expected.json").read_text())
    names = set(p.tables["trace_devices"]["name"].to_pylist())
    assert {g["name"] for g in exp.get("metadata", {}).get("gpus", [])} <= names


@pytest.mark.parametrize("sample", samples("nsys_stats_csv", (".csv",)))
def test_nsys_csv_samples_match_expected(sample):
    data = sample.read_bytes()
    assert claimed_by(data) == ["nsys_kern_sum_csv"]
    p = nsys_csv.parse(data, str(sample), RUN)
    check_schema(p)
    assert kernel_sums(p) == expected_sums(sample)


# ----------------------------------------------------------------------------- SQLite export


@pytest.mark.parametrize("old", [False, True], ids=["schema3", "old-schema"])
def test_nsys_sqlite_generated(old):
    data = gen.nsys_sqlite(KS, old_schema=old)
    assert claimed_by(data) == ["nsys_sqlite"]
    p = nsys_sqlite.parse(data, "gen.sqlite", RUN)
    check_schema(p)
    assert kernel_sums(p) == gen.expected(KS)
    run = p.tables["trace_runs"].to_pylist()[0]
    assert run["source_format"] == "nsys_sqlite"
    assert run["time_base"] == "session"
    assert run["origin_ns"] == 1_741_793_819_042_497_997  # the session start, exact
    assert run["tool_version"] == ("2021.5.2.53" if old else "2025.1.1.110")
    assert p.captured_at == dt.datetime(2025, 3, 12, 15, 36, 59, 42497)  # the file's own clock
    devs = p.tables["trace_devices"].to_pylist()
    assert [(d["device"], d["name"]) for d in devs] == [
        ("0", "NVIDIA H200"), ("1", "NVIDIA H100 80GB HBM3")]
    ev = [e for e in p.tables["trace_events"].to_pylist() if e["kind"] == "kernel"]
    assert [(e["start_ns"], e["dur_ns"], e["device"], e["stream"]) for e in ev] == [
        (k.start_ns, k.dur_ns, str(k.device), str(k.stream)) for k in KS]
    # launches pair with their runtime calls by correlation id
    rt = {e["correlation"]: e["name"] for e in p.tables["trace_events"].to_pylist()
          if e["kind"] == "runtime"}
    assert all(rt[e["correlation"]] == "cudaLaunchKernel_v7000" for e in ev)
    assert (ev[0]["mangled_name"] is None) == old


def test_nsys_sqlite_without_kernel_table_is_a_run_with_zero_kernels():
    p = nsys_sqlite.parse(gen.nsys_sqlite(KS, kernel_table=False), "nok.sqlite", RUN)
    check_schema(p)
    assert kernel_sums(p) == {}
    assert p.summary["kernels"] == 0
    assert p.tables["trace_runs"].num_rows == 1


def test_nsys_sqlite_kernels_launched_before_the_capture_have_no_runtime_partner():
    con = sqlite3.connect(":memory:")
    con.deserialize(gen.nsys_sqlite(KS))
    con.execute("delete from CUPTI_ACTIVITY_KIND_RUNTIME where rowid <= 5")
    con.commit()
    p = nsys_sqlite.parse(con.serialize(), "window.sqlite", RUN)
    assert kernel_sums(p) == gen.expected(KS)
    assert p.summary["runtime"] == len(KS) - 5


def test_nsys_sqlite_never_copies_environment_hosts_or_tokens():
    data = gen.nsys_sqlite(KS)
    for s in gen.SECRETS:
        assert s.encode() in data  # the file does carry them ...
    text = all_text(nsys_sqlite.parse(data, "gen.sqlite", RUN))
    for s in gen.SECRETS:
        assert s not in text  # ... the raw tables never do


def _rows(data: bytes, table: str) -> list[dict]:
    con = sqlite3.connect(":memory:")
    con.deserialize(data)
    strings = dict(con.execute("select id, value from StringIds"))
    cur = con.execute(f"select * from {table} order by rowid")  # noqa: S608
    cols = [d[0] for d in cur.description]
    return [{c: (strings[v] if c in ("demangledName", "shortName", "mangledName", "nameId")
                 and v is not None else v) for c, v in zip(cols, r, strict=True)} for r in cur]


def test_nsys_sqlite_rebuilds_event_rows_exactly():
    data = gen.nsys_sqlite(KS)
    p = nsys_sqlite.parse(data, "gen.sqlite", RUN)
    ev = p.tables["trace_events"].to_pylist()
    args = json.loads(ev[0]["args"])
    # names live in name / mangled_name only (never twice); other string ids are resolved
    assert "demangledName" not in args and "mangledName" not in args
    assert args["shortName"] == _rows(data, "CUPTI_ACTIVITY_KIND_KERNEL")[0]["shortName"]
    con = load(p)
    rebuilt = nsys_sqlite.rebuild(con, RUN)
    for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME",
              "CUPTI_ACTIVITY_KIND_MEMCPY"):
        assert rebuilt[t] == _rows(data, t), t


def _sqlite(script: str, *rows) -> bytes:
    con = sqlite3.connect(":memory:")
    con.executescript(script)
    for sql, params in rows:
        con.execute(sql, params)
    con.commit()
    return con.serialize()


def test_sqlite_file_that_is_not_nsys_is_refused_naming_the_rule():
    data = _sqlite("create table A (Index_ integer, KernelName text);")
    assert claimed_by(data) == ["nsys_sqlite"]
    with pytest.raises(FormatError, match="Nsight Systems export.*StringIds") as e:
        nsys_sqlite.parse(data, "results.db", RUN)
    assert e.value.path == "results.db"
    assert e.value.kind == "unknown_format"


def test_truncated_sqlite_is_refused():
    data = gen.nsys_sqlite(KS)[:3000]
    with pytest.raises(FormatError, match="readable SQLite database|readable rows|StringIds"):
        nsys_sqlite.parse(data, "cut.sqlite", RUN)


def _bad_kernel(start, end, name="k"):
    return _sqlite(
        "create table StringIds (id integer primary key, value text not null);"
        "create table META_DATA_EXPORT (name text, value text);"
        "create table CUPTI_ACTIVITY_KIND_KERNEL (start integer, end integer, deviceId integer,"
        " streamId integer, demangledName integer, shortName integer);",
        ("insert into StringIds values (1, ?)", (name,)),
        ("insert into CUPTI_ACTIVITY_KIND_KERNEL values (?, ?, 0, 7, 1, 1)", (start, end)),
    )


@pytest.mark.parametrize("start,end,rule", [
    (100, 50, r"rowid 1, column end: end >= start"),
    (-5, 50, r"column start: a non-negative timestamp"),
    (1.5, 50, r"column start: an integer timestamp"),
    (None, 50, r"column start: an integer timestamp"),
])
def test_nsys_sqlite_bad_times_refused_with_location(start, end, rule):
    with pytest.raises(FormatError, match=rule) as e:
        nsys_sqlite.parse(_bad_kernel(start, end), "bad.sqlite", RUN)
    assert "table CUPTI_ACTIVITY_KIND_KERNEL" in e.value.json_path


def test_nsys_sqlite_name_over_limit_refused_but_long_names_kept():
    long = "k<" + "x" * 5000 + ">"
    p = nsys_sqlite.parse(_bad_kernel(1, 2, long), "ok.sqlite", RUN)
    assert kernel_sums(p) == {long: (1, 1)}
    with pytest.raises(FormatError, match=f"at most {MAX_NAME} characters"):
        nsys_sqlite.parse(_bad_kernel(1, 2, "k" * (MAX_NAME + 1)), "big.sqlite", RUN)


def test_nsys_sqlite_missing_required_column_refused():
    data = _sqlite(
        "create table StringIds (id integer primary key, value text not null);"
        "create table META_DATA_EXPORT (name text, value text);"
        "create table CUPTI_ACTIVITY_KIND_KERNEL (start integer, deviceId integer,"
        " demangledName integer);")
    with pytest.raises(FormatError, match="missing end"):
        nsys_sqlite.parse(data, "x.sqlite", RUN)


# ----------------------------------------------------------------------------- kern_sum CSV


@pytest.mark.parametrize("old,preamble", [(False, True), (True, False), (False, False)])
def test_nsys_csv_generated(old, preamble):
    data = gen.nsys_kern_sum_csv(KS, old=old, preamble=preamble)
    assert claimed_by(data) == ["nsys_kern_sum_csv"]
    p = nsys_csv.parse(data, "sum.csv", RUN)
    check_schema(p)
    assert kernel_sums(p) == gen.expected(KS)
    run = p.tables["trace_runs"].to_pylist()[0]
    assert run["aggregated"] is True and run["event_count"] == 0
    assert ('"preamble_lines":5' in run["metadata"]) == preamble
    assert "report1.sqlite" not in all_text(p)  # the console preamble is never stored


def test_nsys_csv_keeps_long_quoted_names_with_commas_exactly():
    names = {k.name for k in KS}
    assert any("," in n and len(n) > 4000 for n in names)
    p = nsys_csv.parse(gen.nsys_kern_sum_csv(KS), "sum.csv", RUN)
    assert set(p.tables["trace_kernel_summaries"]["name"].to_pylist()) == names


def test_nsys_csv_rebuilds_rows_exactly():
    data = gen.nsys_kern_sum_csv(KS, preamble=False)
    con = load(nsys_csv.parse(data, "sum.csv", RUN))
    assert nsys_csv.rebuild(con, RUN) == data.decode()


SKIPPED_CONSOLE = (
    b"Generating SQLite file /home/alice/report1.sqlite from /home/alice/report1.nsys-rep\n"
    b"Processing [/home/alice/report1.sqlite] with [/opt/nvidia/nsight-systems/2024.5.1/"
    b"host-linux-x64/reports/cuda_gpu_kern_sum.py]... \n"
    b"SKIPPED: /home/alice/report1.sqlite does not contain CUDA kernel data.\n\n")


@pytest.mark.parametrize("data", [
    SKIPPED_CONSOLE,
    b"SKIPPED: report1.sqlite does not contain CUDA kernel data.\n",  # the CSV file alone
    b"SKIPPED: C:\\runs\\r.sqlite does not contain CUDA kernel data.",  # no newline
], ids=["console", "line-only", "no-newline"])
def test_nsys_csv_skipped_report_is_a_run_with_zero_kernels(data):
    assert claimed_by(data) == ["nsys_kern_sum_csv"]
    p = nsys_csv.parse(data, "sum.csv", RUN)
    check_schema(p)
    assert kernel_sums(p) == {}
    assert p.summary["kernels"] == 0
    run = p.tables["trace_runs"].to_pylist()[0]
    assert (run["source_format"], run["aggregated"]) == ("nsys_kern_sum_csv", True)
    assert json.loads(run["metadata"])["skipped"] == "does not contain CUDA kernel data"
    text = all_text(p)
    assert "alice" not in text and "report1" not in text and "runs" not in text  # no path
    assert nsys_csv.rebuild(load(p), RUN) == ""  # nsys wrote no table


def test_nsys_csv_header_without_rows_is_a_run_with_zero_kernels():
    p = nsys_csv.parse(_csv(HEAD), "sum.csv", RUN)
    assert kernel_sums(p) == {} and p.tables["trace_runs"].num_rows == 1


def test_nsys_csv_other_skipped_reports_or_text_after_skipped_are_refused():
    other = b"SKIPPED: report1.sqlite does not contain CUDA trace data.\n"
    assert claimed_by(other) == []  # another report's message: not a kernel summary
    with pytest.raises(FormatError, match="'Instances'"):
        nsys_csv.parse(other, "api.csv", RUN)
    more = SKIPPED_CONSOLE + b"Time (%),Total Time (ns)\n"
    with pytest.raises(FormatError, match="nothing but blank lines after") as e:
        nsys_csv.parse(more, "more.csv", RUN)
    assert e.value.json_path == "line 5"


def _csv(*rows) -> bytes:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(rows)
    return buf.getvalue().encode()


HEAD = ["Time (%)", "Total Time (ns)", "Instances", "Avg (ns)", "Med (ns)", "Min (ns)",
        "Max (ns)", "StdDev (ns)", "Name"]


@pytest.mark.parametrize("total,rule", [
    ("8.1097E+14", "scientific notation.*spreadsheet"),
    ("nan", "finite, non-negative"),
    ("-120", "non-negative"),
    ("1,234", "thousands separators"),
    ("12.5", "decimal"),
    ("", "empty"),
])
def test_nsys_csv_bad_totals_refused_naming_rule_and_location(total, rule):
    data = _csv(HEAD, ["50.0", "100", "2", "50.0", "50.0", "40", "60", "1.0", "a"],
                ["50.0", total, "2", "50.0", "50.0", "40", "60", "1.0", "b"])
    with pytest.raises(FormatError, match=rule) as e:
        nsys_csv.parse(data, "sum.csv", RUN)
    assert e.value.json_path == "line 3, column 'Total Time (ns)'"
    assert e.value.path == "sum.csv"


def test_nsys_csv_in_other_time_units_refused():
    head = [h.replace("(ns)", "(us)") for h in HEAD]
    data = _csv(head, ["100.0", "1.5", "1", "1.5", "1.5", "1.5", "1.5", "0.0", "k"])
    assert claimed_by(data) == ["nsys_kern_sum_csv"]
    with pytest.raises(FormatError, match="nanoseconds.*Total Time \\(us\\)"):
        nsys_csv.parse(data, "us.csv", RUN)


def test_nsys_csv_wrong_header_refused():
    data = _csv(["Time (%)", "Total Time (ns)", "Count", "Name"], ["100.0", "5", "1", "k"])
    assert claimed_by(data) == []
    with pytest.raises(FormatError, match="'Instances'") as e:
        nsys_csv.parse(data, "wrong.csv", RUN)
    assert e.value.json_path == "header"


def test_nsys_csv_ragged_row_and_trailing_table_refused():
    with pytest.raises(FormatError, match="line 2: 9 fields"):
        nsys_csv.parse(_csv(HEAD, ["1", "2"]), "r.csv", RUN)
    row = ["100.0", "5", "1", "5.0", "5.0", "5", "5", "0.0", "k"]
    with pytest.raises(FormatError, match="more rows follow the blank line 3"):
        nsys_csv.parse(_csv(HEAD, row) + b"\n" + _csv(HEAD, row), "two.csv", RUN)


def test_nsys_csv_one_megabyte_name_refused():
    data = _csv(HEAD, ["100.0", "5", "1", "5.0", "5.0", "5", "5", "0.0", "k" * (MAX_NAME + 1)])
    with pytest.raises(FormatError, match=f"line 2, column 'Name'.*at most {MAX_NAME}"):
        nsys_csv.parse(data, "big.csv", RUN)


@pytest.mark.parametrize("table", ["META_DATA_EXPORT", "CUPTI_ACTIVITY_KIND_KERNEL",
                                   "StringIds", "TARGET_INFO_GPU"])
def test_nsys_sqlite_with_a_corrupt_page_is_refused(table):
    data = bytearray(gen.nsys_sqlite(gen.kernels(4, 400)))
    con = sqlite3.connect(":memory:")
    con.deserialize(bytes(data))
    root = con.execute("select rootpage from sqlite_master where name = ?", [table]).fetchone()[0]
    data[(root - 1) * 4096:root * 4096] = b"\xee" * 4096  # the table's page, garbled
    with pytest.raises(FormatError, match="readable.*malformed") as e:
        nsys_sqlite.parse(bytes(data), "garbled.sqlite", RUN)
    assert e.value.path == "garbled.sqlite"


def test_nsys_sqlite_big_export_is_read_in_batches_with_the_same_rows(monkeypatch):
    from warehouse.ingesting.formats import tracebuild

    ks = gen.kernels(3, 40_000)  # 80,001 events: more than one FLUSH_ROWS
    data = gen.nsys_sqlite(ks)
    sizes: list[int] = []
    bulk = tracebuild.TraceBuilder.events_bulk

    def spy(self, kind, category, name, *a, **kw):
        sizes.append(len(name))
        return bulk(self, kind, category, name, *a, **kw)

    monkeypatch.setattr(tracebuild.TraceBuilder, "events_bulk", spy)
    batched = nsys_sqlite.parse(data, "big.sqlite", RUN)
    ev = batched.tables["trace_events"]
    assert max(sizes) == nsys_sqlite.BATCH_ROWS and sum(sizes) == ev.num_rows == 80_001
    # the builder held at most FLUSH_ROWS events as Python objects: the rest became Arrow
    assert ev.column("event_idx").num_chunks == -(-ev.num_rows // tracebuild.FLUSH_ROWS)
    assert kernel_sums(batched) == gen.expected(ks)
    monkeypatch.setattr(nsys_sqlite, "BATCH_ROWS", 1 << 30)
    monkeypatch.setattr(tracebuild, "FLUSH_ROWS", 1 << 30)
    sizes.clear()
    whole = nsys_sqlite.parse(data, "big.sqlite", RUN)
    assert sizes == [40_000, 1, 40_000]  # kernels, a memcpy, runtime calls: each in one go
    for t in ("trace_events", "trace_devices", "trace_runs"):
        assert batched.tables[t].combine_chunks().equals(whole.tables[t].combine_chunks()), t
    assert batched.summary == whole.summary
