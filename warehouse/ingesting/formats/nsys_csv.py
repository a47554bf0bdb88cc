"""``nsys stats`` CUDA GPU kernel summary CSV (``cuda_gpu_kern_sum``, formerly ``gpukernsum``).

``nsys stats --report cuda_gpu_kern_sum --format csv`` writes one row per kernel name, already
aggregated: ``Time (%)``, ``Total Time (ns)``, ``Instances``, ``Avg (ns)``, ``Med (ns)``,
``Min (ns)``, ``Max (ns)``, ``StdDev (ns)``, ``Name`` (older versions: ``Time(%)``,
``Average``, ``Minimum``, ``Maximum``; the oldest ``Total Time`` without a unit, in ns). When
captured from the console, lines such as ``Processing [...] with [...]`` and
``** CUDA GPU Kernel Summary (cuda_gpu_kern_sum):`` precede the header: they are skipped and
counted, never stored. Rows land in ``raw.trace_kernel_summaries`` (``calls`` = Instances,
``total_ns`` = Total Time); the other columns stay verbatim in ``extra``.
"""

from __future__ import annotations

from warehouse.errors import FormatError
from warehouse.ingesting.formats import trace, tracecsv
from warehouse.ingesting.formats.base import Parsed
from warehouse.ingesting.formats.tracebuild import TraceBuilder, fetch_run, fetch_summaries

NAME = "nsys_kern_sum_csv"
PARSER_VERSION = "nsys_kern_sum_csv/1"
KIND = "text"
TABLES = trace.TABLES

TOTAL = ("Total Time (ns)", "Total Time")
CALLS = ("Instances",)
KNAME = ("Name",)
MIN = ("Min (ns)", "Minimum")
MAX = ("Max (ns)", "Maximum")
EXPECTED = "columns 'Total Time (ns)', 'Instances' and 'Name' (nsys stats cuda_gpu_kern_sum)"


def _looks_like(fields: list[str]) -> bool:
    """A kernel-summary header, whatever its time unit (the unit is checked by ``parse``)."""
    return ("Instances" in fields and "Name" in fields
            and any(f.startswith("Total Time") for f in fields))


def sniff(head: bytes, path: str) -> bool:
    return any(_looks_like(tracecsv.header_fields(line))
               for line in tracecsv.head_lines(head) if "Instances" in line)


def parse(data: bytes, path: str, run_id: str) -> Parsed:
    rows = tracecsv.read(data, path, _looks_like, EXPECTED)
    unit = next(h for h in rows.header if h.startswith("Total Time"))
    if unit not in TOTAL:
        raise FormatError(path, f"line {rows.header_line}",
                          f"times in nanoseconds (a column 'Total Time (ns)'); found {unit!r}: "
                          "run nsys stats again without --timeunit", kind="schema")
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
    meta = {"report": "cuda_gpu_kern_sum", "columns": header,
            "preamble_lines": rows.preamble_lines}
    return b.parsed(NAME, PARSER_VERSION, tool="Nsight Systems (nsys stats)", tool_version=None,
                    time_base="session", origin_ns=None, metadata=meta)


def rebuild(con, run_id: str) -> str:
    """The CSV table (header and rows) as ``nsys stats`` wrote it, from the raw tables."""
    import json

    run, _ = fetch_run(con, run_id)
    header = json.loads(run["metadata"])["columns"]
    name_col = next(h for h in header if h in KNAME)

    def rows():
        for s in fetch_summaries(con, run_id):
            r = json.loads(s["extra"])
            r[name_col] = s["name"]
            yield r

    return tracecsv.rebuild_rows(header, rows())
