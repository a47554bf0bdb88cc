"""rocprof: per-dispatch CSVs (v1 results.csv, omniperf timestamps.csv, rocprofv3
kernel_trace.csv), statistics CSVs and the v1 results.json."""

from __future__ import annotations

import csv
import io
import json
import sqlite3

import pytest

from tests import gen_vendor_traces as gen
from tests.test_formats_nsys import _csv, claimed_by
from tests.vendor_trace_checks import (
    RUN,
    check_schema,
    expected_sums,
    kernel_sums,
    load,
    samples,
)
from warehouse.errors import FormatError
from warehouse.ingesting.formats import rocprof_csv, rocprof_db, rocprof_json, rocprof_stats
from warehouse.ingesting.formats.trace import MAX_NAME

KS = gen.kernels(5, 30)


@pytest.mark.parametrize("sample", samples("rocprof", (".csv", ".json")))
def test_rocprof_samples_match_expected(sample):
    data = sample.read_bytes()
    mod = {"rocprof_csv": rocprof_csv, "rocprof_stats_csv": rocprof_stats,
           "rocprof_json": rocprof_json}
    names = claimed_by(data)
    assert len(names) == 1 and names[0] in mod
    p = mod[names[0]].parse(data, str(sample), RUN)
    check_schema(p)
    assert kernel_sums(p) == expected_sums(sample)
    if not expected_sums(sample):  # a valid run with no kernels
        assert p.tables["trace_runs"].num_rows == 1 and p.summary["kernels"] == 0


@pytest.mark.parametrize("variant,tool", [
    ("timestamps", "rocprof"), ("results", "rocprof"), ("v3", "rocprofv3")])
def test_rocprof_dispatch_csv_generated(variant, tool):
    data = gen.rocprof_csv(KS, variant)
    assert claimed_by(data) == ["rocprof_csv"]
    p = rocprof_csv.parse(data, "k.csv", RUN)
    check_schema(p)
    assert kernel_sums(p) == gen.expected(KS)
    run = p.tables["trace_runs"].to_pylist()[0]
    assert (run["source_format"], run["tool"]) == ("rocprof_csv", tool)
    ev = p.tables["trace_events"].to_pylist()
    assert [(e["start_ns"], e["dur_ns"], e["stream"]) for e in ev] == [
        (k.start_ns, k.dur_ns, str(k.stream)) for k in KS]
    assert [e["device"] for e in ev] == [str(k.device + 2) for k in KS]
    if variant == "v3":
        assert [e["correlation"] for e in ev] == list(range(1, len(KS) + 1))


def test_rocprof_names_keep_kd_suffixes_and_commas():
    p = rocprof_csv.parse(gen.rocprof_csv(KS), "t.csv", RUN)
    names = set(p.tables["trace_events"]["name"].to_pylist())
    assert "global_write(int*, int) [clone .kd]" in names
    assert "__amd_rocclr_fillBufferAligned.kd" in names
    assert names == {k.name for k in KS}


@pytest.mark.parametrize("variant", ["timestamps", "results", "v3"])
def test_rocprof_dispatch_csv_rebuilds_exactly(variant):
    data = gen.rocprof_csv(KS, variant)
    con = load(rocprof_csv.parse(data, "k.csv", RUN))
    assert rocprof_csv.rebuild(con, RUN) == data.decode()


@pytest.mark.parametrize("v3", [False, True])
def test_rocprof_stats_generated_and_rebuilt(v3):
    data = gen.rocprof_stats_csv(KS, v3=v3)
    assert claimed_by(data) == ["rocprof_stats_csv"]
    p = rocprof_stats.parse(data, "s.csv", RUN)
    check_schema(p)
    assert kernel_sums(p) == gen.expected(KS)
    assert p.tables["trace_runs"]["aggregated"].to_pylist() == [True]
    mins = p.tables["trace_kernel_summaries"]["min_ns"].to_pylist()
    assert all(m is not None for m in mins) == v3
    rebuilt = rocprof_stats.rebuild(load(p), RUN)
    assert list(csv.reader(io.StringIO(rebuilt))) == list(csv.reader(io.StringIO(data.decode())))


def test_rocprof_results_json_uses_exact_duration_ns():
    data = gen.rocprof_results_json(KS)
    assert claimed_by(data) == ["rocprof_json"]
    p = rocprof_json.parse(data, "results.json", RUN)
    check_schema(p)
    # dur strings are whole µs: summing them would lose the ns; args.DurationNs does not
    assert kernel_sums(p) == gen.expected(KS)
    assert sum(k.dur_ns // 1000 for k in KS) * 1000 != sum(k.dur_ns for k in KS)
    ev = p.tables["trace_events"].to_pylist()
    assert [e["start_ns"] for e in ev] == [k.start_ns for k in KS]
    assert [e["device"] for e in ev] == [str(k.device) for k in KS]
    devs = p.tables["trace_devices"].to_pylist()  # GPU agents of rocminfo, in order
    assert [(d["device"], d["name"]) for d in devs] == [
        ("0", "AMD Instinct MI250X"), ("1", "AMD Instinct MI250X / MI250")]
    # an integer above int64 in args does not fail the file and stays verbatim
    assert "10159970886766084423" in ev[0]["args"]
    rebuilt = rocprof_json.rebuild(load(p), RUN)
    assert [json.loads(r) for r in rebuilt] == [
        e for e in json.loads(data)["traceEvents"] if e.get("ph") == "X"]


def test_rocprof_results_json_kernel_without_duration_ns_refused():
    data = gen.rocprof_results_json(KS[:2]).replace(b'"DurationNs"', b'"Duration_"', 1)
    data = data.replace(b'"BeginNs"', b'"Begin_"', 1)
    with pytest.raises(FormatError, match=r"traceEvents\[\d+\]\.args\.DurationNs.*truncated"):
        rocprof_json.parse(data, "results.json", RUN)


def test_rocprof_results_json_bad_duration_refused():
    data = gen.rocprof_results_json(KS[:2])
    bad = data.replace(f'"DurationNs": "{KS[1].dur_ns}"'.encode(), b'"DurationNs": "4.1E+05"')
    assert bad != data
    with pytest.raises(FormatError, match=r"traceEvents\[4\]\.args\.DurationNs.*spreadsheet"):
        rocprof_json.parse(bad, "results.json", RUN)


def test_rocprof_results_json_truncated_refused():
    data = gen.rocprof_results_json(KS)
    with pytest.raises(FormatError, match="well-formed JSON.*truncated") as e:
        rocprof_json.parse(data[: len(data) // 2], "results.json", RUN)
    assert e.value.path == "results.json"


TS_HEAD = ["Dispatch_ID", "Kernel_Name", "GPU_ID", "queue-id", "Start_Timestamp",
           "End_Timestamp"]


@pytest.mark.parametrize("start,end,rule,col", [
    ("8.1097E+14", "810970000000001", "scientific notation.*spreadsheet", "Start_Timestamp"),
    ("100", "NaN", "finite, non-negative", "End_Timestamp"),
    ("-100", "50", "non-negative", "Start_Timestamp"),
    ("100", "50", "End_Timestamp >= Start_Timestamp", "End_Timestamp"),
    ("\uff11\uff12", "50", "an integer of ns; got", "Start_Timestamp"),  # full-width digits
])
def test_rocprof_csv_bad_timestamps_refused(start, end, rule, col):
    data = _csv(TS_HEAD, ["0", "k.kd", "2", "0", "10", "20"], ["1", "k.kd", "2", "0", start, end])
    assert claimed_by(data) == ["rocprof_csv"]
    with pytest.raises(FormatError, match=rule) as e:
        rocprof_csv.parse(data, "timestamps.csv", RUN)
    assert e.value.json_path == f"line 3, column {col!r}"


def test_rocprof_csv_wrong_header_refused():
    data = _csv(["Dispatch_ID", "Kernel_Name", "GPU_ID", "Start_Timestamp", "Stop"],
                ["0", "k", "2", "10", "20"])
    assert claimed_by(data) == ["rocprof_csv"]
    with pytest.raises(FormatError, match="'End_Timestamp' or 'EndNs'"):
        rocprof_csv.parse(data, "timestamps.csv", RUN)


def test_rocprof_csv_one_megabyte_name_refused():
    data = _csv(TS_HEAD, ["0", "k" * (MAX_NAME + 1), "2", "0", "10", "20"])
    with pytest.raises(FormatError, match=f"line 2, column 'Kernel_Name'.*at most {MAX_NAME}"):
        rocprof_csv.parse(data, "timestamps.csv", RUN)


def test_rocprof_stats_bad_total_refused():
    data = _csv(["Name", "Calls", "TotalDurationNs", "AverageNs", "Percentage"],
                ["k.kd", "3", "1.2E+06", "400000", "100.0"])
    with pytest.raises(FormatError, match="line 2, column 'TotalDurationNs'.*spreadsheet"):
        rocprof_stats.parse(data, "results.stats.csv", RUN)


def test_rocprof_results_json_with_hip_trace_counts_each_dispatch_once():
    data = gen.rocprof_results_json(KS, hip_trace=True)
    p = rocprof_json.parse(data, "results.json", RUN)
    assert kernel_sums(p) == gen.expected(KS)  # not twice: the dispatch-table copies are other
    kinds = p.tables["trace_events"]["kind"].to_pylist()
    assert kinds.count("other") == len(KS) + 1  # the copies and the barrier packet
    assert kinds.count("runtime") == len(KS)


@pytest.mark.parametrize("hip_trace,timestamps", [(True, True), (False, True), (True, False)])
def test_rocprof_results_db(hip_trace, timestamps):
    data = gen.rocprof_results_db(KS, hip_trace=hip_trace, timestamps=timestamps)
    assert claimed_by(data) == ["rocprof_db", "nsys_sqlite"]  # registry order: rocprof_db first
    p = rocprof_db.parse(data, "results.db", RUN)
    check_schema(p)
    assert kernel_sums(p) == gen.expected(KS)
    ev = [e for e in p.tables["trace_events"].to_pylist() if e["kind"] == "kernel"]
    assert [(e["start_ns"], e["device"]) for e in ev] == [(k.start_ns, str(k.device)) for k in KS]
    rebuilt = rocprof_db.rebuild(load(p), RUN)
    con = sqlite3.connect(":memory:")
    con.deserialize(data)
    for table, rows in rebuilt.items():
        cur = con.execute(f"select * from {table} order by rowid")  # noqa: S608
        cols = [d[0] for d in cur.description]
        original = [dict(zip(cols, r, strict=True)) for r in cur]
        for o in original:  # rocprof's enclosing quotes are not part of the name
            for c in ("KernelName", "Name"):
                if c in o and o[c].startswith('"'):
                    o[c] = o[c][1:-1]
        assert rows == original, table


def test_rocprof_results_db_bad_times_refused():
    con = sqlite3.connect(":memory:")
    con.deserialize(gen.rocprof_results_db(KS[:3], hip_trace=False))
    con.execute("update KERN set EndNs = BeginNs - 1 where rowid = 2")
    con.commit()
    with pytest.raises(FormatError, match="table KERN, rowid 2, column EndNs: EndNs >= BeginNs"):
        rocprof_db.parse(con.serialize(), "results.db", RUN)


def test_rocprof_csv_windows_line_ends_bom_and_trailing_comma():
    # the oldest rocprof wrote a trailing comma on every line; a spreadsheet-free Windows copy
    # adds a BOM and CRLF line ends: the same dispatches either way
    lines = ["Index,KernelName,DispatchNs,BeginNs,EndNs,CompleteNs,"]
    lines += [f'{i},"{k.name.replace(chr(34), chr(34) * 2)}",{k.start_ns - 9},{k.start_ns},'
              f'{k.start_ns + k.dur_ns},{k.start_ns + k.dur_ns + 9},' for i, k in enumerate(KS)]
    data = ("\ufeff" + "\r\n".join(lines) + "\r\n").encode()
    assert claimed_by(data) == ["rocprof_csv"]
    p = rocprof_csv.parse(data, "results.csv", RUN)
    assert kernel_sums(p) == gen.expected(KS)


def test_rocprof_results_json_duplicate_key_in_an_event_refused():
    data = gen.rocprof_results_json(KS[:3])
    bad = data.replace(b'"DurationNs": ', b'"DurationNs": "1", "DurationNs": ', 1)
    with pytest.raises(FormatError, match=r"traceEvents\[\d+\].*'DurationNs' twice"):
        rocprof_json.parse(bad, "results.json", RUN)


@pytest.mark.parametrize("table,col,value,rule", [
    ("KERN", "KernelName", None, "a non-empty text name; got NULL"),
    ("KERN", "KernelName", "", "a non-empty text name; got ''"),
    ("KERN", "KernelName", '""', "a non-empty text name; got '\"\"'"),
    ("OPS", "Name", None, "a non-empty text name; got NULL"),
])
def test_rocprof_results_db_null_or_empty_name_refused(table, col, value, rule):
    """Review finding: a NULL kernel name was stored as the name "None"."""
    con = sqlite3.connect(":memory:")
    con.deserialize(gen.rocprof_results_db(KS[:3], hip_trace=True))
    con.execute(f'update {table} set "{col}" = ? where rowid = 2', [value])  # noqa: S608
    con.commit()
    with pytest.raises(FormatError, match=f"table {table}, rowid 2, column {col}: ") as e:
        rocprof_db.parse(con.serialize(), "results.db", RUN)
    assert rule in str(e.value)


@pytest.mark.parametrize("value,rule", [
    ("9223372036854775808", "fits in 64 bits"),
    ("99999999999999999999999", "fits in 64 bits"),
    ("1.5e9", "scientific notation"),
    ("²", "an integer of ns"),
])
def test_rocprof_results_db_text_timestamp_out_of_range_refused_and_quarantined(
        value, rule, wh, tmp_path):
    """Review finding: a text timestamp past int64 was an internal error, nothing quarantined."""
    from warehouse.ingesting.loader import ingest_paths

    con = sqlite3.connect(":memory:")
    con.deserialize(gen.rocprof_results_db(KS[:3], hip_trace=False))
    # untyped columns (no INTEGER affinity turning the text into a REAL): text stays text
    cols = ", ".join(f'"{r[1]}"' for r in con.execute("pragma table_info(KERN)"))
    con.execute("ALTER TABLE KERN RENAME TO kern_typed")
    con.execute(f"CREATE TABLE KERN ({cols})")
    con.execute("INSERT INTO KERN SELECT * FROM kern_typed ORDER BY rowid")
    con.execute("DROP TABLE kern_typed")
    con.execute("update KERN set BeginNs = ?, EndNs = ? where rowid = 2", [value, value])
    con.commit()
    assert con.execute("select typeof(BeginNs) from KERN where rowid = 2").fetchone() == ("text",)
    data = con.serialize()
    with pytest.raises(FormatError, match=f"table KERN, rowid 2, column BeginNs: .*{rule}"):
        rocprof_db.parse(data, "results.db", RUN)
    f = tmp_path / "results.db"
    f.write_bytes(data)
    r = ingest_paths(wh, [f])[0]
    assert r.status == "failed" and "column BeginNs" in r.message, r.message
    assert r.quarantine_path and open(r.quarantine_path, "rb").read() == data
