"""Review of the ncu_csv/3 changes (NVTX columns, a header repeated per table, later tables
numbering launches from 0 again, refusals, UTF-16).

Losslessness across tables: a launch is its table and ``ID`` (a later table may number its
launches from 0 again), so the rebuilt CSV must keep each later table's header (and a raw
table's units row) where it was: the rebuilt document is the file's table rows (console lines
left out, private columns dropped), and reading it again gives the same launches. Rebuilt as
one table, two appended runs' launch 0 were one launch (same process ID: their metrics merged
silently, the first duration lost) or refused ('the same Process ID on every row')."""

from __future__ import annotations

import csv
import io
import json

import pytest

from tests.test_formats_ncu_realhunt import HEAD, _row
from tests.vendor_trace_checks import load
from warehouse.errors import FormatError
from warehouse.ingesting import formats
from warehouse.ingesting.formats import ncu, ncu_csv

RUN = "ab" * 32



def _appended(pid2: int) -> str:
    """Two runs appended to one log (``>>``): the second table numbers from 0 again."""
    return (HEAD + _row(0, 100, "scale(float*)", "gpu__time_duration.sum", "nsecond", "1,000")
            + _row(1, 100, "add(float*)", "gpu__time_duration.sum", "nsecond", "700")
            + "==PROF== Disconnected from process 100\n"
            + "==PROF== Connected to process 100 (/bin/app)\n"
            + HEAD + _row(0, pid2, "scale(float*)", "gpu__time_duration.sum", "nsecond", "1,100")
            + _row(0, pid2, "scale(float*)", "dram__bytes.sum", "byte", "64"))


PUSH = "thread Domain:Push/Pop_Range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg"


def _raw(rows: list[list[str]]) -> list[str]:
    buf = io.StringIO()
    w = csv.writer(buf, quoting=csv.QUOTE_ALL, lineterminator="\n")
    w.writerows(rows)
    return buf.getvalue().splitlines()


RAW_HEAD, RAW_UNITS, RAW_0, RAW_1, RAW_0B = _raw([
    ["ID", "Process ID", "Process Name", "Host Name", PUSH, "Kernel Name", "Context", "Stream",
     "dram__bytes.sum", "gpu__time_duration.sum"],
    ["", "", "", "", "", "", "", "", "byte", "usecond"],
    ["0", "7", "python", "h", '1  "<default domain>:fwd"', "gemm(int)", "1", "7", "1,024", "12.25"],
    ["1", "7", "python", "h", "", "gemm(int)", "1", "7", "2,048", "10.50"],
    ["0", "7", "python", "h", "", "relu(int)", "1", "7", "512", "2.00"],
])


def _parse(text: str):
    data = text.encode()
    assert formats.detect(data, "ncu.csv") is ncu_csv
    return ncu_csv.parse(data, "ncu.csv", RUN)


def _table_rows(text: str) -> list[list[str]]:
    """The file's CSV rows (console lines and blank lines left out), private columns dropped."""
    rows = [r for r in csv.reader(io.StringIO("\n".join(
        ln for ln in text.splitlines() if not ln.startswith("==")))) if r]
    keep = [i for i, h in enumerate(rows[0]) if h not in ncu_csv.PRIVATE]
    return [[r[i] for i in keep] for r in rows]


def _launches(p) -> list[tuple]:
    return [(la["launch_id"], la["kernel"], la["dur_ns"], la["metric_count"],
             json.loads(la["extra"]).get("Process ID"), la["nvtx"])
            for la in p.tables["ncu_launches"].to_pylist()]


def _check_lossless(text: str) -> None:
    p = _parse(text)
    rebuilt = ncu_csv.rebuild(load(p, ncu.TABLES), RUN)
    assert list(csv.reader(io.StringIO(rebuilt))) == _table_rows(text)
    again = ncu_csv.parse(rebuilt.encode(), "rebuilt.csv", RUN)
    assert _launches(again) == _launches(p)
    assert again.tables["ncu_metrics"].to_pylist() == p.tables["ncu_metrics"].to_pylist()


@pytest.mark.parametrize("pid2", [200, 100], ids=["other-process", "same-process-id"])
def test_appended_tables_rebuild_with_their_header_and_read_back_the_same(pid2):
    text = _appended(pid2)
    p = _parse(text)
    assert [la[:4] for la in _launches(p)] == [
        ("0", "scale(float*)", 1000, 1), ("1", "add(float*)", 700, 1),
        ("0", "scale(float*)", 1100, 2)]
    _check_lossless(text)


def test_a_table_per_process_rebuilds_exactly():
    text = (HEAD + _row(0, 100, "scale(float*)", "gpu__time_duration.sum", "usecond", "3.49")
            + "==PROF== Disconnected from process 100\n\n"
            + HEAD + _row(1, 101, "scale(float*)", "gpu__time_duration.sum", "nsecond", "1,200")
            + _row(2, 101, "add(float*)", "gpu__time_duration.sum", "msecond", "0.002")
            + HEAD)  # a last header with no rows under it
    _check_lossless(text)


def test_raw_tables_rebuild_with_their_header_and_units_row():
    text = "\n".join([RAW_HEAD, RAW_UNITS, RAW_0, RAW_1, RAW_HEAD, RAW_UNITS, RAW_0B]) + "\n"
    p = _parse(text)
    assert [la[:4] for la in _launches(p)] == [
        ("0", "gemm(int)", 12250, 2), ("1", "gemm(int)", 10500, 2), ("0", "relu(int)", 2000, 2)]
    assert json.loads(p.tables["ncu_launches"]["nvtx"][0].as_py()) == {
        PUSH: '1  "<default domain>:fwd"'}
    _check_lossless(text)


def test_a_repeated_raw_header_without_its_units_row_is_refused_naming_the_line():
    # ncu writes the units row under every raw header; read as a launch row it rebuilt with a
    # units row the file did not have
    text = "\n".join([RAW_HEAD, RAW_UNITS, RAW_0, RAW_HEAD, RAW_0B]) + "\n"
    with pytest.raises(FormatError, match="line 5.*units row"):
        _parse(text)
