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

- ``nsys stats --report cuda_gpu_trace --format csv``: ``Start (ns)``, ``Duration (ns)``,
  ``CorrId``, ``GrdX``, ``GrdY``, ``GrdZ``, ``BlkX``, ``BlkY``, ``BlkZ``, ``Reg/Trd``,
  ``StcSMem (MB)``, ``DymSMem (MB)``, ``Bytes (MB)``, ``Throughput (MB/s)`` (older:
  ``Throughput (MBps)``), ``SrcMemKd``, ``DstMemKd``, ``Device``, ``Ctx``, (newer:
  ``GreenCtx``), ``Strm``, ``Name``: one row per kernel, memcpy or memset on the GPU. A row with
  its grid and block (all six integers) is a ``kernel``; one without, named ``[CUDA memcpy ...]``
  / ``[CUDA memset ...]``, a ``memcpy`` / ``memset`` (another ``[...]`` name: ``other``); a row
  with part of a grid, or neither a grid nor a bracketed name, is refused. ``correlation`` =
  ``CorrId`` (``CorrID`` accepted: the launching call's ``CorrID`` in ``cuda_api_trace``),
  ``stream`` = ``Strm``; ``Device`` (``NVIDIA A100 (0)``: nsys writes ``name (deviceId)``)
  gives ``device`` = the id and the device's name in ``trace_devices``, as the SQLite export
  does (another spelling: ``device`` = the text, no name). The nsys 2021 layout (``Start(sec)``,
  microseconds) and ``--timeunit`` other than ns are refused naming the rule. A report of an
  export without GPU activity is no table but nsys's line ``SKIPPED: <file> does not contain
  GPU trace data.``: when no report this module reads is in the capture's first lines, that is
  a valid run with 0 kernels (``metadata.skipped``; the line's path is not stored), as for
  ``nsys_csv``; anything but blank lines after it up to the next report is refused.

nsys's ``vulkan_api_trace`` has the API trace's ``Start (ns)``, ``Duration (ns)``, ``Name`` and
``CorrID`` (its script selects ``"Start"``, ``"Duration"``, ``"Name"``, ``"Event Class"``,
``"Context"``, ``"CorrID"``, ``"Pid"``, ``"Tid"``, …): Vulkan calls, whose ``CorrID`` maps to
other Vulkan calls, not to CUDA kernels. It is refused naming the report (told by its
``Event Class`` column); ``nsys_trace_csv/2`` read it as CUDA API calls (``cuda_api_trace``).
So is any API trace with a column nsys's ``cuda_api_trace`` script does not select
(``API_COLUMNS``; ``nsys_trace_csv/4``, the column named in the error): another report's calls
are never read as CUDA API calls.
"""

from __future__ import annotations

import json
import re

from warehouse.errors import FormatError
from warehouse.ingesting.formats import nsys_csv, trace, tracecsv
from warehouse.ingesting.formats.base import Parsed
from warehouse.ingesting.formats.tracebuild import TraceBuilder, fetch_run

NAME = "nsys_trace_csv"
# /2: cuda_gpu_trace read (a GPU trace whose correlation column is spelled ``CorrID`` was read
# as cuda_api_trace by /1)
# /3: refuses nsys's vulkan_api_trace (/2 read its Vulkan calls as CUDA API calls)
# /4: refuses an API trace with a column cuda_api_trace lacks (/3 read it as CUDA API calls)
PARSER_VERSION = "nsys_trace_csv/4"
KIND = "text"
TABLES = trace.TABLES

API = ("Start (ns)", "Duration (ns)", "Name", "CorrID")
NVTX = ("Start (ns)", "End (ns)", "Name", "Lvl", "RangeId", "ParentId")
GPU = ("GrdX", "GrdY", "GrdZ", "BlkX", "BlkY", "BlkZ", "Strm", "Name")
GRID = GPU[:6]
CORR = ("CorrId", "CorrID")
EXPECTED = ("columns 'Start (ns)', 'Duration (ns)', 'Name', 'CorrID' (nsys stats cuda_api_trace), "
            "'Start (ns)', 'End (ns)', 'Name', 'Lvl', 'RangeId', 'ParentId' (nvtx_pushpop_trace) "
            "or 'Start (ns)', 'Duration (ns)', 'CorrId', 'GrdX'..'BlkZ', 'Strm', 'Name' "
            "(cuda_gpu_trace)")
# every column nsys's cuda_api_trace (cudaapitrace) script selects
API_COLUMNS = frozenset(API + ("Result", "Pid", "Tid", "T-Pri", "Thread Name"))
# a column of nsys's vulkan_api_trace that cuda_api_trace lacks (vulkan_api_trace.py)
VULKAN = "Event Class"
DEVICE = re.compile(r"(.*\S) \(([0-9]+)\)")  # nsys: printf('%s (%d)', gpu.name, deviceId)
# nsys's own message (cuda_gpu_trace.py) when the export has no kernel, memcpy or memset
SKIPPED = re.compile(r"SKIPPED: .* does not contain GPU trace data\.?")
SKIPPED_RULE = "does not contain GPU trace data"


def _report(fields: list[str]) -> str | None:
    # the GPU trace first: its grid columns tell it from an API trace (whatever the unit of its
    # times, checked by parse)
    if all(c in fields for c in GPU) and any(f.startswith("Start") for f in fields):
        return "cuda_gpu_trace"
    if all(c in fields for c in NVTX):
        return "nvtx_pushpop_trace"
    if all(c in fields for c in API):
        return "vulkan_api_trace" if VULKAN in fields else "cuda_api_trace"
    return None


def _looks_like(fields: list[str]) -> bool:
    return _report(fields) is not None


def sniff(head: bytes, path: str) -> bool:
    lines = tracecsv.head_lines(head)
    return (any(_looks_like(tracecsv.header_fields(line)) for line in lines if "Start" in line)
            or _skipped_at(lines) is not None)


def _skipped_at(lines: list[str]) -> int | None:
    """The index of nsys's SKIPPED line of a GPU trace among ``lines`` when no header this module
    reads is among them (a report it reads is read as before)."""
    head = lines[: tracecsv.MAX_PREAMBLE_LINES + 1]
    if any(_looks_like(tracecsv.header_fields(ln)) for ln in head if "Start" in ln):
        return None
    return next((i for i, ln in enumerate(head)
                 if ln.startswith("SKIPPED:") and SKIPPED.fullmatch(ln.rstrip())), None)


def _skipped(data: bytes, path: str, run_id: str) -> Parsed | None:
    """The 0-kernel run of a GPU trace nsys skipped, or ``None`` (then the table rules apply)."""
    at = nsys_csv.skipped_at(data, path, _skipped_at, SKIPPED_RULE)
    if at is None:
        return None
    meta = {"report": "cuda_gpu_trace", "columns": [], "skipped": SKIPPED_RULE,
            "preamble_lines": at}
    return TraceBuilder(run_id).parsed(NAME, PARSER_VERSION, tool="Nsight Systems (nsys stats)",
                                       tool_version=None, time_base="session", origin_ns=None,
                                       metadata=meta)


def parse(data: bytes, path: str, run_id: str) -> Parsed:
    skipped = _skipped(data, path, run_id)
    if skipped is not None:
        return skipped
    rows = tracecsv.read(data, path, _looks_like, EXPECTED, stop=nsys_csv.NEXT_REPORT)
    header = rows.header
    report = _report(header)
    if report == "cuda_gpu_trace":
        return _gpu_trace(rows, path, run_id)
    if report == "vulkan_api_trace":
        raise FormatError(path, f"line {rows.header_line}",
                          "a CUDA API trace (nsys stats cuda_api_trace), an NVTX push/pop trace "
                          "or a CUDA GPU trace; this is nsys stats vulkan_api_trace (a column "
                          f"{VULKAN!r}: Vulkan API calls, their CorrID maps to other Vulkan "
                          "calls, not to CUDA kernels)", kind="schema")
    if report == "cuda_api_trace":
        other = [h for h in header if h not in API_COLUMNS]
        if other:
            raise FormatError(path, f"line {rows.header_line}",
                              "a CUDA API trace's columns only (nsys stats cuda_api_trace: "
                              "Start, Duration, Name, Result, CorrID, Pid, Tid, T-Pri, Thread "
                              f"Name); found {', '.join(repr(h[:60]) for h in other[:4])}: no "
                              "cuda_api_trace has such a column", kind="schema")
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


def _gpu_trace(rows: tracecsv.CsvRows, path: str, run_id: str) -> Parsed:
    header = rows.header
    for want in ("Start (ns)", "Duration (ns)"):
        if want not in header:
            found = [h for h in header if h.startswith(want.split()[0])]
            raise FormatError(path, f"line {rows.header_line}",
                              f"times in exact nanoseconds (a column {want!r}); found "
                              f"{', '.join(repr(h) for h in found) or 'none'} (the nsys 2021 "
                              "layout writes Start in seconds, --timeunit other units): run "
                              "nsys stats again with a current nsys, without --timeunit",
                              kind="schema")
    col = tracecsv.require(rows, path, {"start": ("Start (ns)",), "dur": ("Duration (ns)",),
                                        "corr": CORR, "name": ("Name",), "strm": ("Strm",)})
    i_dev, i_pid = rows.index("Device"), rows.index("Pid")
    grid = [header.index(c) for c in GRID]
    rest = [(h, i) for i, h in enumerate(header) if i != col["name"]]
    corr_col = header[col["corr"]]
    kinds, names, starts, durs, args, corr, devs, streams = [], [], [], [], [], [], [], []
    devices: dict[str, tuple[str, str | None]] = {}
    for line, f in rows.rows:
        name = tracecsv.text(f[col["name"]], path, line, "Name")
        dims = [f[i].strip() for i in grid]
        if all(dims):
            for c, v in zip(GRID, dims, strict=True):
                tracecsv.integer(v, path, line, c, what="threads or blocks")
            kind = "kernel"
        elif any(dims):
            missing = next(c for c, v in zip(GRID, dims, strict=True) if not v)
            raise FormatError(path, tracecsv.where(line, missing),
                              "a kernel's whole grid and block (GrdX..BlkZ) or none (a memory "
                              "operation); this one is empty", kind="schema")
        elif name.startswith("[CUDA memcpy"):
            kind = "memcpy"
        elif name.startswith("[CUDA memset"):
            kind = "memset"
        elif name.startswith("[") and name.endswith("]"):
            kind = "other"
        else:
            raise FormatError(path, tracecsv.where(line, "GrdX"),
                              "a kernel's grid and block (GrdX..BlkZ), or a memory operation "
                              f"named '[CUDA memcpy ...]' / '[CUDA memset]'; got {name[:80]!r} "
                              "without a grid", kind="schema")
        kinds.append(kind)
        names.append(name)
        starts.append(tracecsv.integer(f[col["start"]], path, line, "Start (ns)"))
        durs.append(tracecsv.integer(f[col["dur"]], path, line, "Duration (ns)"))
        corr.append(tracecsv.integer(f[col["corr"]], path, line, corr_col, what="ids"))
        dev = None
        if i_dev is not None and f[i_dev].strip():
            text = f[i_dev]
            if text not in devices:
                m = DEVICE.fullmatch(text)
                devices[text] = (m.group(2), m.group(1)) if m else (text, None)
            dev = devices[text][0]
        devs.append(dev)
        streams.append(f[col["strm"]] or None)
        args.append({h: f[i] for h, i in rest})

    b = TraceBuilder(run_id)
    b.events_bulk(kinds, ["cuda_gpu_trace"] * len(names), names, starts, durs, args,
                  device=devs, stream=streams, correlation=corr,
                  pid=None if i_pid is None else [f[i_pid] for _, f in rows.rows])
    for dev, dev_name in devices.values():
        b.device(dev, dev_name)
    meta = {"report": "cuda_gpu_trace", "columns": header, "preamble_lines": rows.preamble_lines}
    if rows.ended_at is not None:
        meta["next_report_at_line"] = rows.ended_at
    return b.parsed(NAME, PARSER_VERSION, tool="Nsight Systems (nsys stats)", tool_version=None,
                    time_base="session", origin_ns=None, metadata=meta)


def rebuild(con, run_id: str) -> str:
    """The CSV table (header and rows) as ``nsys stats`` wrote it, from the raw tables."""
    run, events = fetch_run(con, run_id)
    meta = json.loads(run["metadata"])
    if meta.get("skipped"):
        return ""  # nsys wrote no table (the SKIPPED line names a path: not stored)
    header = meta["columns"]

    def rows():
        for e in events:
            r = json.loads(e["args"])
            r["Name"] = e["name"]
            yield r

    return tracecsv.rebuild_rows(header, rows())
