"""Nsight Compute CSV exports (``ncu --csv``, details and raw layouts): detection, launches,
exact durations, losslessness (rebuild), privacy and refusals."""

from __future__ import annotations

import csv
import io
import json

import pytest

from tests import vendor_trace_checks
from warehouse.errors import FormatError
from warehouse.ingesting import formats, loader
from warehouse.ingesting.formats import ncu, ncu_csv, ncu_gen

RUN = "cd" * 32


def _load(p):
    return vendor_trace_checks.load(p, ncu.TABLES)


def _parse(text: str, path: str = "x.csv"):
    data = text.encode()
    fmt = formats.detect(data, path)
    assert fmt is ncu_csv
    return fmt.parse(data, path, RUN)


def _table_rows(text: str, drop=ncu_csv.PRIVATE) -> list[list[str]]:
    """The CSV table of an export (console lines left out), private columns dropped."""
    lines = [ln for ln in text.splitlines() if not ln.startswith("==")]
    rows = list(csv.reader(io.StringIO("\n".join(lines))))
    keep = [i for i, h in enumerate(rows[0]) if h not in drop]
    return [[r[i] for i in keep] for r in rows if r]


@pytest.mark.parametrize("layout", ["details", "raw"])
def test_generated_export_reads_every_launch_and_rebuilds(layout):
    lcs = ncu_gen.launches(3, extra_metrics=5)
    text = ncu_gen.details(lcs) if layout == "details" else ncu_gen.raw(lcs)
    p = _parse(text)
    runs = p.tables["ncu_runs"].to_pylist()[0]
    assert runs["layout"] == layout and runs["launch_count"] == len(lcs)
    launches = p.tables["ncu_launches"].to_pylist()
    assert [la["kernel"] for la in launches] == [lc["kernel"] for lc in lcs]
    for la, lc in zip(launches, lcs, strict=True):
        want = next(int(c.replace(",", "")) for _, n, _, c in lc["metrics"]
                    if n == "gpu__time_duration.sum")
        assert la["dur_ns"] == want and la["time_state"] == "ok"
        assert la["grid"] == list(lc["grid"]) and la["block"] == list(lc["block"])
        assert (la["context"], la["stream"], la["device"]) == (1, 7, "0")
        n = len(lc["metrics"]) - (layout == "raw")  # the raw page has no SOL "Duration"
        assert la["metric_count"] == n
    m = p.tables["ncu_metrics"].to_pylist()
    assert len(m) == sum(la["metric_count"] for la in launches)
    dram = next(r for r in m if r["name"] == "dram__bytes.sum")
    assert dram["value"] == float(dram["as_written"].replace(",", ""))  # "52,…" kept verbatim
    rebuilt = ncu_csv.rebuild(_load(p), RUN)
    assert list(csv.reader(io.StringIO(rebuilt))) == _table_rows(text)


def test_host_and_executable_never_reach_the_tables():
    for text in (ncu_gen.details(ncu_gen.launches(1)), ncu_gen.raw(ncu_gen.launches(1))):
        p = _parse(text)
        dump = json.dumps({t: p.tables[t].to_pylist() for t in p.tables}, default=str)
        assert ncu_gen.HOST not in dump and ncu_gen.PROCESS not in dump
        assert "alice" not in dump


def test_console_only_errors_are_refused_with_ncus_message(wh, tmp_path):
    text = ("==PROF== Connected to process 77 (/usr/bin/app)\n"
            "==ERROR== The application returned an error code (1).\n"
            "==WARNING== No kernels were profiled.\n")
    data = text.encode()
    assert formats.detect(data, "e.csv") is ncu_csv
    with pytest.raises(FormatError, match="profiled nothing.*returned an error code"):
        ncu_csv.parse(data, "e.csv", RUN)
    f = tmp_path / "errors.csv"
    f.write_text(text)
    (r,) = loader.ingest_paths(wh, [f])
    assert r.status == "failed" and "errors.csv" in r.message


def _one(cells: dict[str, str]) -> str:
    header = ["ID", "Kernel Name", "Section Name", "Metric Name", "Metric Unit", "Metric Value"]
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    w.writerow([cells.get(h, "") for h in header])
    return buf.getvalue()


@pytest.mark.parametrize(("name", "unit", "cell", "dur", "state"), [
    ("gpu__time_duration.sum", "nsecond", "1,234,567", 1234567, "ok"),
    ("gpu__time_duration.sum", "second", "4.0e-05", 40000, "ok"),
    ("gpu__time_duration.sum", "usecond", "3.49", 3490, "ok"),
    ("gpu__time_duration.sum", "msecond", "0.000123", 123, "ok"),
    ("gpu__time_duration.sum", "nsecond", "nan", None, "nan"),
    ("gpu__time_duration.sum", "nsecond", "n/a", None, "nan"),
    ("sm__throughput.avg.pct_of_peak_sustained_elapsed", "%", "12.5", None, "absent"),
])
def test_durations_are_exact_integer_ns_or_null(name, unit, cell, dur, state):
    p = _parse(_one({"ID": "0", "Kernel Name": "k", "Section Name": "s", "Metric Name": name,
                     "Metric Unit": unit, "Metric Value": cell}))
    (la,) = p.tables["ncu_launches"].to_pylist()
    assert (la["dur_ns"], la["time_state"]) == (dur, state)
    (m,) = p.tables["ncu_metrics"].to_pylist()
    if cell == "nan":
        assert m["value"] != m["value"]  # NaN kept, never 0
    if cell == "n/a":
        assert m["value"] is None and m["text_value"] == "n/a"


@pytest.mark.parametrize(("unit", "cell", "rule"), [
    ("usecond", "1.2345", "whole number of ns"),
    ("byte", "100", "time unit"),
    ("nsecond", "-5", "non-negative"),
])
def test_impossible_durations_are_refused_naming_the_rule(unit, cell, rule):
    text = _one({"ID": "0", "Kernel Name": "k", "Metric Name": "gpu__time_duration.sum",
                 "Metric Unit": unit, "Metric Value": cell})
    with pytest.raises(FormatError, match=rule):
        _parse(text, "bad.csv")


def test_a_launch_whose_rows_disagree_is_refused():
    text = ncu_gen.details(ncu_gen.launches(2, kernels=("k",), per_kernel=1), rules=False)
    lines = text.splitlines()
    last = lines[-1].replace('"(64, 1, 1)"', '"(65, 1, 1)"')
    with pytest.raises(FormatError, match="Grid Size"):
        _parse("\n".join(lines[:-1] + [last]) + "\n", "bad.csv")


def test_raw_layout_needs_its_units_row():
    text = ncu_gen.raw(ncu_gen.launches(2, kernels=("k",), per_kernel=1))
    lines = [ln for ln in text.splitlines() if not ln.startswith('"","",')]
    with pytest.raises(FormatError, match="units row"):
        _parse("\n".join(lines) + "\n", "bad.csv")


def test_a_row_with_the_wrong_field_count_is_refused_naming_the_line():
    text = ncu_gen.details(ncu_gen.launches(2, kernels=("k",), per_kernel=1))
    with pytest.raises(FormatError, match=r"line \d+"):
        _parse(text + '"0","1"\n', "bad.csv")


def test_two_kernels_sharing_a_short_name_stay_apart():
    long_a = "void Kernel<" + "A" * 5000 + ">(int)"
    long_b = "void Kernel<" + "B" * 5000 + ">(int)"
    lcs = ncu_gen.launches(4, kernels=(long_a, long_b), per_kernel=1)
    p = _parse(ncu_gen.details(lcs))
    assert [la["kernel"] for la in p.tables["ncu_launches"].to_pylist()] == [long_a, long_b]


def test_history_plants_a_slower_first_kernel():
    before, after = ncu_gen.history(2, change_at=1)
    d0 = _parse(before).tables["ncu_launches"].to_pylist()[0]["dur_ns"]
    d1 = _parse(after).tables["ncu_launches"].to_pylist()[0]["dur_ns"]
    assert 1.10 < d1 / d0 < 1.20
