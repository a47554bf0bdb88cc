"""``nsys stats`` event-level CPU-side reports as CSV: CUDA API calls and NVTX push/pop ranges.

- ``nsys stats --report cuda_api_trace --format csv``: ``Start (ns)``, ``Duration (ns)``,
  ``Name``, ``Result``, ``CorrID``, ``Pid``, ``Tid``, ``T-Pri``, ``Thread Name``: one row per CUDA
  runtime or driver API call -> kind ``runtime``; ``correlation`` = ``CorrID`` (the ``CorrId`` of
  the kernel or memory operation it launched in ``cuda_gpu_trace``).
- ``nsys stats --report nvtx_pushpop_trace --format csv``: ``Start (ns)``, ``End (ns)``,
  ``Duration (ns)``, ``DurChild (ns)``, ``DurNonChild (ns)``, ``Name``, ``PID``, ``TID``,
  ``Lvl``, ``NumChild``, ``RangeId``, ``ParentId``, ``RangeStack``, ``NameTree``: one row per NVTX
  push/pop range -> kind ``annotation``; nsys's own nesting (``Lvl``, ``ParentId``,
  ``RangeStack``) stays in ``args``. ``End - Start`` must equal ``Duration``.

Up to 64 console lines before the header (``Processing [...]``) are skipped and counted, as for
the kernel summary (``nsys_csv``), and the next report's ``Processing [...]`` line ends the
table. Times are exact integer ns; ``name`` = ``Name`` verbatim (an NVTX range's name is written
by nsys with its domain, ``domain:range``); every other column stays verbatim in ``args``, so
``rebuild`` returns the table.
"""

from __future__ import annotations

import json

from warehouse.errors import FormatError
from warehouse.ingesting.formats import nsys_csv, trace, tracecsv
from warehouse.ingesting.formats.base import Parsed
from warehouse.ingesting.formats.tracebuild import TraceBuilder, fetch_run

NAME = "nsys_trace_csv"
PARSER_VERSION = "nsys_trace_csv/1"
KIND = "text"
TABLES = trace.TABLES

API = ("Start (ns)", "Duration (ns)", "Name", "CorrID")
NVTX = ("Start (ns)", "End (ns)", "Name", "Lvl", "RangeId", "ParentId")
EXPECTED = ("columns 'Start (ns)', 'Duration (ns)', 'Name', 'CorrID' (nsys stats cuda_api_trace) "
            "or 'Start (ns)', 'End (ns)', 'Name', 'Lvl', 'RangeId', 'ParentId' (nvtx_pushpop_trace)")


def _report(fields: list[str]) -> str | None:
    if all(c in fields for c in NVTX):
        return "nvtx_pushpop_trace"
    if all(c in fields for c in API):
        return "cuda_api_trace"
    return None


def _looks_like(fields: list[str]) -> bool:
    return _report(fields) is not None


def sniff(head: bytes, path: str) -> bool:
    return any(_looks_like(tracecsv.header_fields(line)) for line in tracecsv.head_lines(head)
               if "Start (ns)" in line)


def parse(data: bytes, path: str, run_id: str) -> Parsed:
    rows = tracecsv.read(data, path, _looks_like, EXPECTED, stop=nsys_csv.NEXT_REPORT)
    header = rows.header
    report = _report(header)
    nvtx = report == "nvtx_pushpop_trace"
    ix = {h: i for i, h in enumerate(header)}
    i_name, i_start = ix["Name"], ix["Start (ns)"]
    i_dur = ix.get("Duration (ns)")
    i_end = ix.get("End (ns)") if nvtx else None
    pid_col, tid_col = ("PID", "TID") if nvtx else ("Pid", "Tid")
    i_pid, i_tid = ix.get(pid_col), ix.get(tid_col)
    rest = [(h, i) for i, h in enumerate(header) if i != i_name]
    names, starts, durs, args, corr = [], [], [], [], []
    for line, f in rows.rows:
        names.append(tracecsv.text(f[i_name], path, line, "Name"))
        start = tracecsv.integer(f[i_start], path, line, "Start (ns)")
        if nvtx:
            end = tracecsv.integer(f[i_end], path, line, "End (ns)")
            if end < start:
                raise FormatError(path, tracecsv.where(line, "End (ns)"),
                                  f"End (ns) >= Start (ns) (a non-negative duration); got {end} "
                                  f"< {start}", kind="schema")
            dur = end - start
            if i_dur is not None and tracecsv.integer(f[i_dur], path, line,
                                                      "Duration (ns)") != dur:
                raise FormatError(path, tracecsv.where(line, "Duration (ns)"),
                                  f"Duration (ns) = End (ns) - Start (ns) = {dur}",
                                  kind="schema")
        else:
            dur = tracecsv.integer(f[i_dur], path, line, "Duration (ns)")
            corr.append(tracecsv.integer(f[ix["CorrID"]], path, line, "CorrID", what="ids"))
        starts.append(start)
        durs.append(dur)
        args.append({h: f[i] for h, i in rest})

    def column(i):
        return None if i is None else [f[i] for _, f in rows.rows]

    b = TraceBuilder(run_id)
    b.events_bulk("annotation" if nvtx else "runtime", [report] * len(names), names, starts,
                  durs, args, pid=column(i_pid), tid=column(i_tid),
                  correlation=None if nvtx else corr)
    meta = {"report": report, "columns": header, "preamble_lines": rows.preamble_lines}
    if rows.ended_at is not None:
        meta["next_report_at_line"] = rows.ended_at
    return b.parsed(NAME, PARSER_VERSION, tool="Nsight Systems (nsys stats)", tool_version=None,
                    time_base="session", origin_ns=None, metadata=meta)


def rebuild(con, run_id: str) -> str:
    """The CSV table (header and rows) as ``nsys stats`` wrote it, from the raw tables."""
    run, events = fetch_run(con, run_id)
    header = json.loads(run["metadata"])["columns"]

    def rows():
        for e in events:
            r = json.loads(e["args"])
            r["Name"] = e["name"]
            yield r

    return tracecsv.rebuild_rows(header, rows())
