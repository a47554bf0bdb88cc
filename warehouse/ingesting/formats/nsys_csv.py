"""``nsys stats`` CUDA GPU kernel summary CSV (``cuda_gpu_kern_sum``, formerly ``gpukernsum``).

``nsys stats --report cuda_gpu_kern_sum --format csv`` writes one row per kernel name, already
aggregated: ``Time (%)``, ``Total Time (ns)``, ``Instances``, ``Avg (ns)``, ``Med (ns)``,
``Min (ns)``, ``Max (ns)``, ``StdDev (ns)``, ``Name`` (older versions: ``Time(%)``,
``Average``, ``Minimum``, ``Maximum``; the oldest ``Total Time`` without a unit, in ns). When
captured from the console, lines such as ``Processing [...] with [...]`` and
``** CUDA GPU Kernel Summary (cuda_gpu_kern_sum):`` precede the header: they are skipped and
counted, never stored. Rows land in ``raw.trace_kernel_summaries`` (``calls`` = Instances,
``total_ns`` = Total Time); the other columns stay verbatim in ``extra``.

A report of an export without kernels is no table but the line ``SKIPPED: <file> does not
contain CUDA kernel data.`` (after the same console preamble, if any): that is a valid run with
0 kernels (``metadata.skipped``; the line's path is not stored), as is a header without rows.
Anything but blank lines after the SKIPPED line is refused. In a console capture of several
reports, nsys's ``Processing [...] with [...]...`` line of the next report ends the table (or the
SKIPPED line's report); the rest of the file is not read (``metadata.next_report_at_line``).

Only a kernel summary's own columns are read (``KERN_COLUMNS``: the ones nsys's
``cuda_gpu_kern_sum`` / ``gpukernsum`` scripts select, 2020 to 2025, and the grid and block of
``cuda_gpu_kern_gb_sum``, the same kernels one row per name and launch shape:
``metadata.report`` names it). Another report can have the same ``Total Time``, ``Instances``
and ``Name`` columns without being kernels: nsys's ``mpi_event_sum`` (its script selects
``"Time"``, ``"Total Time"``, ``"Instances"``, ``"Avg"``, ``"Med"``, ``"Min"``, ``"Max"``,
``"StdDev"``, ``"Source"``, ``"Name"``: one row per MPI call, ``MPI_Allreduce``, …) is refused
naming the report, and so is any header with a column no kernel summary has (named in the
error). Parser ``nsys_kern_sum_csv/1`` read an ``mpi_event_sum`` as kernels: ``pwh rederive``
re-reads its runs (such a run then fails, naming the report).
"""

from __future__ import annotations

import re

from warehouse.errors import FormatError
from warehouse.ingesting.formats import trace, tracecsv
from warehouse.ingesting.formats.base import Parsed
from warehouse.ingesting.formats.tracebuild import TraceBuilder, fetch_run, fetch_summaries

NAME = "nsys_kern_sum_csv"
# /2: refuses mpi_event_sum and any column no kernel summary has (/1 read an MPI event summary as
# kernels), names cuda_gpu_kern_gb_sum in metadata.report (/1 wrote cuda_gpu_kern_sum)
PARSER_VERSION = "nsys_kern_sum_csv/2"
KIND = "text"
TABLES = trace.TABLES

TOTAL = ("Total Time (ns)", "Total Time")
CALLS = ("Instances",)
KNAME = ("Name",)
MIN = ("Min (ns)", "Minimum")
MAX = ("Max (ns)", "Maximum")
# nsys's own message (cuda_gpu_kern_sum.py) when the export has no CUPTI_ACTIVITY_KIND_KERNEL
SKIPPED = re.compile(r"SKIPPED: .* does not contain CUDA kernel data\.?")
SKIPPED_RULE = "does not contain CUDA kernel data"
# nsys stats announces each report it runs: in a console capture of several reports, the next
# report's announcement ends the kernel summary (the rest is not read)
NEXT_REPORT = re.compile(r"Processing \[.*\] with \[.*\]\.\.\.\s*")
# every column nsys stats writes in a kernel summary: cuda_gpu_kern_sum (2022+), gpukernsum
# (2020: no unit, 2021: Time(%), Average, Minimum, Maximum, StdDev) and cuda_gpu_kern_gb_sum
KERN_COLUMNS = frozenset({
    "Time (%)", "Time(%)", "Total Time (ns)", "Total Time", "Instances", "Avg (ns)", "Average",
    "Med (ns)", "Min (ns)", "Minimum", "Max (ns)", "Maximum", "StdDev (ns)", "StdDev", "Name",
    "GridXYZ", "BlockXYZ",
    # the quartiles the 2024+ scripts select as "_Q1" / "_Q3" (hidden from nsys's own output)
    "_Q1", "_Q3"})
GRID_BLOCK = ("GridXYZ", "BlockXYZ")
# reports with the kernel summary's Total Time, Instances and Name that are no kernels, told by
# a column of their own (nsys's mpi_event_sum.py selects "Source" before "Name")
FOREIGN = {"Source": "nsys stats mpi_event_sum (MPI Event Summary: one row per MPI call, "
                     "e.g. MPI_Allreduce, no kernels)"}
EXPECTED = "columns 'Total Time (ns)', 'Instances' and 'Name' (nsys stats cuda_gpu_kern_sum)"


def _looks_like(fields: list[str]) -> bool:
    """A kernel-summary header, whatever its time unit (the unit is checked by ``parse``)."""
    return ("Instances" in fields and "Name" in fields
            and any(f.startswith("Total Time") for f in fields))


def _skipped_at(lines: list[str]) -> int | None:
    """The index of nsys's SKIPPED line among ``lines`` if no kernel-summary header precedes it."""
    for i, line in enumerate(lines[: tracecsv.MAX_PREAMBLE_LINES + 1]):
        if "Instances" in line and _looks_like(tracecsv.header_fields(line)):
            return None
        if line.startswith("SKIPPED:") and SKIPPED.fullmatch(line.rstrip()):
            return i
    return None


def sniff(head: bytes, path: str) -> bool:
    lines = tracecsv.head_lines(head)
    return (any(_looks_like(tracecsv.header_fields(line)) for line in lines if "Instances" in line)
            or _skipped_at(lines) is not None)


def skipped_at(data: bytes, path: str, at_of, rule: str) -> int | None:
    """The line (0-based) of nsys's ``SKIPPED: <file> <rule>`` message that makes ``data`` a
    report without rows (``at_of``: finds it among the decoded lines), once nothing but blank
    lines follow it up to the next report's ``Processing [...]`` line; None when ``data`` is no
    such report (then the table rules apply)."""
    head = data[:1 << 16]
    if "SKIPPED:" not in head.decode(tracecsv.encoding_of(head), errors="replace"):
        return None
    try:
        lines = tracecsv.decode(data).splitlines()
    except UnicodeDecodeError:
        return None  # tracecsv.read names the invalid byte
    at = at_of(lines)
    if at is None:
        return None
    for n, line in enumerate(lines[at + 1:], start=at + 2):
        if NEXT_REPORT.fullmatch(line):
            break
        if line.strip():
            raise FormatError(path, f"line {n}", "nothing but blank lines after nsys's "
                              f"'SKIPPED: ... {rule}' (line {at + 1}); found more text",
                              kind="schema")
    return at


def _skipped(data: bytes, path: str, run_id: str) -> Parsed | None:
    """The 0-kernel run of a report that nsys skipped, or ``None`` when ``data`` is no such
    report (then the table rules apply)."""
    at = skipped_at(data, path, _skipped_at, SKIPPED_RULE)
    if at is None:
        return None
    meta = {"report": "cuda_gpu_kern_sum", "columns": [], "skipped": SKIPPED_RULE,
            "preamble_lines": at}
    return TraceBuilder(run_id).parsed(NAME, PARSER_VERSION, tool="Nsight Systems (nsys stats)",
                                       tool_version=None, time_base="session", origin_ns=None,
                                       metadata=meta, aggregated=True)


def parse(data: bytes, path: str, run_id: str) -> Parsed:
    skipped = _skipped(data, path, run_id)
    if skipped is not None:
        return skipped
    rows = tracecsv.read(data, path, _looks_like, EXPECTED, stop=NEXT_REPORT)
    unit = next(h for h in rows.header if h.startswith("Total Time"))
    if unit not in TOTAL:
        raise FormatError(path, f"line {rows.header_line}",
                          f"times in nanoseconds (a column 'Total Time (ns)'); found {unit!r}: "
                          "run nsys stats again without --timeunit", kind="schema")
    _only_kernel_columns(rows, path)
    report = "cuda_gpu_kern_gb_sum" if all(c in rows.header for c in GRID_BLOCK) \
        else "cuda_gpu_kern_sum"
    col = tracecsv.require(rows, path, {"total": TOTAL, "calls": CALLS, "name": KNAME})
    imin, imax = rows.index(*MIN), rows.index(*MAX)
    header = rows.header
    b = TraceBuilder(run_id)
    for line, f in rows.rows:
        name = tracecsv.text(f[col["name"]], path, line, header[col["name"]])
        total = tracecsv.integer(f[col["total"]], path, line, header[col["total"]])
        calls = tracecsv.integer(f[col["calls"]], path, line, header[col["calls"]],
                                 what="instances")
        lo = None if imin is None else tracecsv.integer(f[imin], path, line, header[imin])
        hi = None if imax is None else tracecsv.integer(f[imax], path, line, header[imax])
        if calls == 0 and total != 0:
            raise FormatError(path, tracecsv.where(line, header[col["calls"]]),
                              "at least one instance for a kernel with time", kind="schema")
        if lo is not None and hi is not None and lo > hi:
            raise FormatError(path, tracecsv.where(line, header[imin]),
                              f"{header[imin]} <= {header[imax]}", kind="schema")
        extra = {h: v for h, v in zip(header, f, strict=True) if h != header[col["name"]]}
        b.summary(name, calls, total, min_ns=lo, max_ns=hi, extra=extra)
    meta = {"report": report, "columns": header, "preamble_lines": rows.preamble_lines}
    if rows.ended_at is not None:
        meta["next_report_at_line"] = rows.ended_at
    return b.parsed(NAME, PARSER_VERSION, tool="Nsight Systems (nsys stats)", tool_version=None,
                    time_base="session", origin_ns=None, metadata=meta, aggregated=True)


def _only_kernel_columns(rows: tracecsv.CsvRows, path: str) -> None:
    """Refuse a header with a column no nsys kernel summary has, naming the report when one of
    its columns tells it (a report read as kernels that is no kernels is never stored)."""
    other = [h for h in rows.header if h not in KERN_COLUMNS]
    if not other:
        return
    what = next((FOREIGN[h] for h in other if h in FOREIGN), None)
    found = ", ".join(repr(h[:60]) for h in other[:4])
    this = (f"this is {what}" if what else
            "no nsys stats kernel summary (cuda_gpu_kern_sum) has such a column")
    raise FormatError(path, f"line {rows.header_line}",
                      "a kernel summary's columns only (nsys stats cuda_gpu_kern_sum: Time, "
                      "Total Time, Instances, Avg, Med, Min, Max, StdDev, Name); found "
                      f"{found}: {this}", kind="schema")


def rebuild(con, run_id: str) -> str:
    """The CSV table (header and rows) as ``nsys stats`` wrote it, from the raw tables."""
    import json

    run, _ = fetch_run(con, run_id)
    meta = json.loads(run["metadata"])
    if meta.get("skipped"):
        return ""  # nsys wrote no table (the SKIPPED line names a path: not stored)
    header = meta["columns"]
    name_col = next(h for h in header if h in KNAME)

    def rows():
        for s in fetch_summaries(con, run_id):
            r = json.loads(s["extra"])
            r[name_col] = s["name"]
            yield r

    return tracecsv.rebuild_rows(header, rows())
