"""rocprof per-dispatch CSVs: one row per kernel dispatch.

Four spellings of the same facts, told apart by their header:

- rocprof v1 ``results.csv`` (``--timestamp on`` / ``--stats``): ``Index``, ``KernelName``,
  ``gpu-id``, ``queue-id``, ``pid``, ``tid``, …, ``BeginNs``, ``EndNs`` (optionally
  ``DurationNs`` and counter columns);
- omniperf / rocprofiler-compute ``timestamps.csv`` (rocprof v1 underneath):
  ``Dispatch_ID``, ``Kernel_Name``, ``GPU_ID``, ``queue-id``, …, ``Start_Timestamp``,
  ``End_Timestamp``;
- rocprofv2 (file plugin) and omniperf on MI300 ``timestamps.csv``: ``Dispatch_ID``,
  ``GPU_ID``, ``Queue_ID``, ``PID``, ``TID``, …, ``Kernel_Name``, ``Start_Timestamp``,
  ``End_Timestamp``, ``Correlation_ID``;
- rocprofv3 ``kernel_trace.csv``: ``Kind``, ``Agent_Id``, ``Queue_Id``, ``Stream_Id``,
  ``Thread_Id``, ``Dispatch_Id``, ``Kernel_Name``, ``Correlation_Id``, ``Start_Timestamp``,
  ``End_Timestamp``, ….

And rocprofv3's API traces (``--hip-trace``, ``--hsa-trace``, ``--marker-trace``, …:
``hip_api_trace.csv``, ``hsa_api_trace.csv``, ``marker_api_trace.csv``, one header for all):
``Domain``, ``Function``, ``Process_Id``, ``Thread_Id``, ``Correlation_Id``,
``Start_Timestamp``, ``End_Timestamp``: one row per call, ``name`` = ``Function`` verbatim,
``category`` = ``Domain``; kind ``annotation`` for the roctx markers (``MARKER_*`` domains but
``MARKER_CONTROL_API`` / ``MARKER_NAME_API``, which are ``other``), else ``runtime`` (HIP, HSA,
RCCL, … API calls), their ``correlation`` the one the kernel dispatches of ``kernel_trace.csv``
carry.

rocprofv2's file-plugin API traces (``hip_api_trace_<pid>.csv``: ``Domain``, ``Function``,
``Kernel_Name`` (empty but for launches), ``Start_Timestamp``, ``End_Timestamp``,
``Correlation_ID``; ``hsa_api_trace_<pid>.csv`` the same without ``Kernel_Name``; a blank
line under the header; layout of ROCm/rocprofiler ``plugin/file/file.cpp`` and its CHANGELOG)
are read the same way (``Domain`` ``HIP_API_DOMAIN`` / ``HSA_API_DOMAIN``: kind ``runtime``;
``Kernel_Name`` stays in ``args``), tool ``rocprofv2``: never as kernel dispatches. Its HIP
activity trace ``hcc_ops_trace_<pid>.csv`` (``Domain``, ``Operation``, ``Kernel_Name``,
``Start_Timestamp``, ``Stop_Timestamp``, ``Correlation_ID``: kernels, copies and barriers in one
list) is refused naming ``Stop_Timestamp``: its dispatches are in the file plugin's
``results_<pid>.csv``.

rocprofv2's file-plugin HSA async-copy trace (``async_copy_trace_<pid>.csv``: ``Domain``
(``HSA_OPS_DOMAIN``), ``Operation``, ``Start_Timestamp``, ``Stop_Timestamp``,
``Correlation_ID``; ``plugin/file/file.cpp`` ``WriteHeader``) is read as memory operations:
kind ``memcpy`` when the operation names a copy (``copy`` in its name, any case), else ``other``;
``name`` = ``Operation`` verbatim, ``category`` = ``Domain``, tool ``rocprofv2``, never kernel
dispatches. Its roctx trace (``roctx_trace_<pid>.csv``: ``Domain``, ``ROCTX_ID``, ``Message``,
``Timestamp``) is refused naming the rule: one instant per roctx call, the call (push, pop or
mark) not written and a pop's message empty, so its ranges cannot be rebuilt.

*One dispatch per XCC* (rocprofv2 on MI300 with ``ROCPROFILER_INDIVIDUAL_XCC_MODE``, which
rocprofiler-compute sets for its MI300 runs but flattens to one row per dispatch before writing its
own CSVs, so such rows come from rocprofv2's ``results_<pid>.csv``:
``src/core/hsa/queues/queue.cpp`` writes ``xcc_count`` records per dispatch, "separate records but
with same record-id and kernel dispatch info" (CHANGELOG, ROCm 5.7), an ``XCC_Index`` column
before the counters when counters are collected, else identical rows): the rows of a dispatch
CSV with a ``Dispatch_ID`` column that share ``Dispatch_ID``, process, GPU and queue are one
dispatch, counted once; its span is the
earliest start to the latest end of its rows (upstream they are equal). Its first row is the
event's ``args``; the others stay in ``args.__xcc_rows`` with their row positions, so the file
rebuilds exactly. Rows sharing that key but naming another kernel or correlation id are refused
naming both lines.

rocprofv3's ``memory_copy_trace.csv`` (``Kind``, ``Direction``, ``Source_Agent_Id``,
``Destination_Agent_Id``, ``Correlation_Id``, ``Start_Timestamp``, ``End_Timestamp``; rocprofiler-sdk
``generateCSV.cpp``, the rocpd CSV adds ``Guid`` and ``Stream_Id``) is read as copies: kind
``memcpy``, ``name`` = ``Direction`` (``MEMORY_COPY_HOST_TO_DEVICE``, …), ``category`` = ``Kind``,
``device`` the GPU end (the destination, the source of a ``…DEVICE_TO_HOST`` copy, none for
``…HOST_TO_HOST``; an agent id read as ``Agent_Id`` is), like rocprofv3's ``results.json``.

A counter collection in long form (rocprofv3 ``counter_collection.csv``, rocprofiler-compute's
``pmc_perf.csv`` from a rocpd database: a ``Counter_Name`` and a ``Counter_Value`` column, one
row per dispatch *and counter*) has the same kernel and timestamp columns but is no dispatch
list: it is refused naming the rule (read as dispatches, every dispatch would count once per
counter). So is a dispatch CSV without timestamps (rocprof ``-i counters.txt`` without
``--timestamp on``).

Parser ``rocprof_csv/2`` reads rocprofv2's id spellings (``rocprof_csv/1`` left them null) and
refuses the counter collections /1 read as dispatches: ``pwh rederive`` re-reads /1 runs (a
counter collection's run then fails to re-derive, naming the rule). ``rocprof_csv/3`` reads
rocprofv2's API traces as calls: /2 refused them, or read a HIP API trace whose every call named a
kernel (launches only) as dispatches. ``rocprof_csv/4`` counts a dispatch written once per XCC once
(/3 counted it once per XCC) and reads rocprofv2's async-copy trace (/3 found no format in it).
``rocprof_csv/5`` reads rocprofv3's ``Agent_Id`` ``GPU <n>`` as device ``<n>`` (/4 kept the text)
and rocprofv3's ``memory_copy_trace.csv`` (no earlier version found a format in it).

*Device labels across versions.* ``device`` is the GPU as the file names it: rocprof v1
``gpu-id`` (the GPU's position among the GPU agents) and rocprofv2's ``GPU_ID`` (the GPU's
node: ``queue.cpp`` passes ``getNumaNode()``) as written; rocprofv3 ``Agent_Id`` depends on the
version and ``--agent-index`` (rocprofiler-sdk ``lib/output/metadata.cpp`` ``get_agent_index``,
``ROCPROF_AGENT_INDEX``): early rocprofv3 wrote the agent's KFD node id (``2``: CPUs numbered
first), later ones ``Agent <n>`` (``relative``, the default: the logical node id, CPUs counted;
``absolute``: the node id) or ``GPU <n>`` (``type-relative``: the logical GPU index, read as
``<n>``). Only ``GPU <n>`` is the logical GPU index that v1 and rocprofv3's JSON write; a node id
cannot be turned into one without the run's ``agent_info.csv``, so it stays as written and
labels the same GPU differently from a v1 run.

Duration = end - start in integer ns (both exact integers; end >= start). The kernel name is
kept exactly as written, ``.kd`` / ``[clone .kd]`` suffixes included. Every column but the name
stays verbatim in ``args`` (so the rows rebuild exactly). Timestamps are the HSA system clock
of the machine (``time_base`` ``session``, no epoch origin).
"""

from __future__ import annotations

import json
import re

from warehouse.errors import FormatError
from warehouse.ingesting.formats import trace, tracecsv
from warehouse.ingesting.formats.base import Parsed
from warehouse.ingesting.formats.tracebuild import TraceBuilder, fetch_run

NAME = "rocprof_csv"
PARSER_VERSION = "rocprof_csv/5"
KIND = "text"
TABLES = trace.TABLES

KNAME = ("Kernel_Name", "KernelName")
START = ("Start_Timestamp", "BeginNs")
END = ("End_Timestamp", "EndNs")
DEVICE = ("GPU_ID", "gpu-id", "Agent_Id")
STREAM = ("Stream_Id", "queue-id", "Queue_Id", "Queue_ID")
PID = ("pid", "PID")
TID = ("Thread_Id", "tid", "TID")
CORR = ("Correlation_Id", "Correlation_ID")
EXPECTED = ("columns 'Kernel_Name' (or 'KernelName'; an API trace: 'Function'), "
            "'Start_Timestamp' (or 'BeginNs') and 'End_Timestamp' (or 'EndNs')")
# a counter collection in long form: one row per dispatch and counter (refused)
COUNTER = ("Counter_Name", "Counter_Value")
# API traces (rocprofv3; rocprofv2 spells Correlation_ID): every column but these is optional
API = ("Domain", "Function", "Start_Timestamp", "End_Timestamp")
# marker domains that are no annotation (profiler control, naming a thread or stream)
MARKER_OTHER = ("MARKER_CONTROL_API", "MARKER_NAME_API")
# rocprofv2's HSA async-copy trace (async_copy_trace_<pid>.csv) and roctx trace (refused)
COPY = ("Domain", "Operation", "Start_Timestamp", "Stop_Timestamp", "Correlation_ID")
ROCTX_V2 = ("Domain", "ROCTX_ID", "Message", "Timestamp")
# rocprofv3's memory copy trace (memory_copy_trace.csv)
MCOPY_V3 = ("Direction", "Source_Agent_Id", "Destination_Agent_Id", "Start_Timestamp",
            "End_Timestamp")
# rocprofv3 Agent_Id of --agent-index type-relative (lib/output/metadata.cpp get_agent_index)
_GPU_N = re.compile(r"GPU[ -]?(\d+)")
# the columns naming one dispatch of a rocprofv2 / omniperf CSV (its per-XCC rows share them)
XCC_KEY = ("Dispatch_ID", "PID", "pid", "GPU_ID", "Queue_ID", "queue-id")


def _is_api(fields: list[str]) -> bool:
    """An API trace's header (rocprofv3's, or rocprofv2's with or without ``Kernel_Name``)."""
    return all(k in fields for k in API) and any(k in fields for k in CORR)


def _is_copy(fields: list[str]) -> bool:
    """rocprofv2's async-copy trace header (hcc_ops_trace has a Kernel_Name too: refused)."""
    return all(k in fields for k in COPY) and not any(k in fields for k in KNAME)


def _looks_like(fields: list[str]) -> bool:
    """A dispatch header (a kernel-name column; without timestamps it is refused naming them),
    an API trace's, rocprofv2's async-copy trace's or its roctx trace's (refused)."""
    return ((any(k in fields for k in KNAME) and "TotalDurationNs" not in fields)
            or _is_api(fields) or _is_copy(fields) or all(k in fields for k in ROCTX_V2)
            or all(k in fields for k in MCOPY_V3))


def _api_kind(domain: str) -> str:
    if domain.startswith("MARKER_"):
        return "other" if domain in MARKER_OTHER else "annotation"
    return "runtime"


def sniff(head: bytes, path: str) -> bool:
    lines = tracecsv.head_lines(head, 3)
    return bool(lines) and _looks_like(tracecsv.header_fields(lines[0]))


def _variant(header: list[str]) -> tuple[str, str]:
    """``(tool, file kind)`` from the header's spelling."""
    if _is_api(header):
        return ("rocprofv3" if "Correlation_Id" in header else "rocprofv2"), "api_trace.csv"
    if _is_copy(header):
        return "rocprofv2", "async_copy_trace.csv"
    if all(k in header for k in MCOPY_V3):
        return "rocprofv3", "memory_copy_trace.csv"
    if "Kind" in header and "Agent_Id" in header:
        return "rocprofv3", "kernel_trace.csv"
    if "Kernel_Name" in header:
        return "rocprof", "timestamps.csv"
    return "rocprof", "results.csv"


def parse(data: bytes, path: str, run_id: str) -> Parsed:
    rows = tracecsv.read(data, path, _looks_like, EXPECTED)
    if rows.preamble_lines:
        raise FormatError(path, "line 1", f"the CSV header on line 1 ({EXPECTED})",
                          kind="schema")
    if all(c in rows.header for c in COUNTER):
        raise FormatError(path, f"line {rows.header_line}", "one row per kernel dispatch; this "
                          "is a counter collection in long form (columns 'Counter_Name' and "
                          "'Counter_Value': one row per dispatch and counter, so its rows are "
                          "not dispatches): ingest the kernel trace (rocprofv3 --kernel-trace) "
                          "instead", kind="schema")
    if all(k in rows.header for k in ROCTX_V2):
        raise FormatError(path, f"line {rows.header_line}", "timed rows; this is rocprofv2's "
                          "roctx trace (roctx_trace: columns 'ROCTX_ID', 'Message', 'Timestamp': "
                          "one instant per roctx call, whether a push, pop or mark not written and "
                          "a pop's message empty, so its ranges cannot be rebuilt): ingest "
                          "rocprofv3's marker_api_trace.csv or rocprof v1's results.db instead",
                          kind="schema")
    if ("Stop_Timestamp" in rows.header and not any(k in rows.header for k in END)
            and not _is_copy(rows.header)):
        raise FormatError(path, f"line {rows.header_line}", "one row per kernel dispatch with an "
                          "'End_Timestamp' (or 'EndNs') column; this is rocprofv2's HIP activity "
                          "trace (hcc_ops_trace: columns 'Operation' and 'Stop_Timestamp', kernels, "
                          "copies and barriers in one list): ingest the file plugin's kernel "
                          "dispatches (results_<pid>.csv) or rocprofv3's kernel_trace.csv instead",
                          kind="schema")
    if not any(k in rows.header for k in START + END):
        raise FormatError(path, f"line {rows.header_line}", "the dispatch timestamps, columns "
                          "'Start_Timestamp'/'End_Timestamp' (or 'BeginNs'/'EndNs'); this rocprof "
                          "CSV has none (counters collected without --timestamp on): profile "
                          "again with timestamps or a kernel trace", kind="schema")
    tool, kind = _variant(rows.header)
    api = kind == "api_trace.csv"
    copy = kind == "async_copy_trace.csv"
    mcopy = kind == "memory_copy_trace.csv"
    col = tracecsv.require(rows, path, {
        "name": ("Function",) if api else ("Operation",) if copy else ("Direction",) if mcopy
        else KNAME,
        "start": START, "end": ("Stop_Timestamp",) if copy else END})
    header = rows.header
    opt = {k: rows.index(*v) for k, v in
           {"device": DEVICE, "stream": STREAM, "pid": ("Process_Id",) if api else PID,
            "tid": TID, "corr": CORR}.items()}
    ikind = rows.index("Domain" if api or copy else "Kind")
    ik, i0, i1 = col["name"], col["start"], col["end"]
    rest = [(h, i) for i, h in enumerate(header) if i != ik]
    names, starts, durs, args = [], [], [], []
    for line, f in rows.rows:
        names.append(tracecsv.text(f[ik], path, line, header[ik]))
        start = tracecsv.integer(f[i0], path, line, header[i0])
        end = tracecsv.integer(f[i1], path, line, header[i1])
        if end < start:
            raise FormatError(path, tracecsv.where(line, header[i1]),
                              f"{header[i1]} >= {header[i0]} (a non-negative duration); "
                              f"got {end} < {start}", kind="schema")
        starts.append(start)
        durs.append(end - start)
        args.append({h: f[i] for h, i in rest})

    def column(key):
        i = opt[key]
        return None if i is None else [f[i] for _, f in rows.rows]

    corr = None
    if opt["corr"] is not None:
        ic = opt["corr"]
        corr = [tracecsv.integer(f[ic], path, line, header[ic], what="ids")
                for line, f in rows.rows]
    category = (["dispatch"] * len(names) if ikind is None
                else [f[ikind] for _, f in rows.rows])
    cols = {k: column(k) for k in ("device", "stream", "pid", "tid")}
    if cols["device"] is not None and header[opt["device"]] == "Agent_Id":
        cols["device"] = [_agent_device(v) for v in cols["device"]]
    if mcopy:
        cols["device"] = _copy_devices(rows)
    cols["correlation"] = corr
    meta = {"file_kind": kind, "columns": header}
    if "Dispatch_ID" in header:
        keep = _one_per_dispatch(rows, path, starts, durs, args)
        if keep is not None:
            meta["xcc_rows"] = len(names) - len(keep)
            names, starts, durs, args, category = ([v[i] for i in keep] for v in
                                                   (names, starts, durs, args, category))
            cols = {k: None if v is None else [v[i] for i in keep] for k, v in cols.items()}
    b = TraceBuilder(run_id)
    if api:
        kinds = [_api_kind(c) for c in category]
    elif copy:
        kinds = ["memcpy" if "copy" in n.lower() else "other" for n in names]
    elif mcopy:
        kinds = "memcpy"
    else:
        kinds = "kernel"
    b.events_bulk(kinds, category, names, starts, durs, args, **cols)
    return b.parsed(NAME, PARSER_VERSION, tool=tool, tool_version=None, time_base="session",
                    origin_ns=None, metadata=meta)


def _agent_device(agent: str) -> str:
    """rocprofv3's ``Agent_Id`` as a device: ``GPU <n>`` (``ROCPROF_AGENT_INDEX=type-relative``:
    the logical GPU index) is ``<n>``, as rocprof v1's ``gpu-id`` and rocprofv3's JSON label a
    GPU; a node id (``<n>``, ``Agent <n>``: CPUs counted) stays as written."""
    m = _GPU_N.fullmatch(agent)
    return m.group(1) if m else agent


def _copy_devices(rows) -> list[str | None]:
    """The GPU end of each rocprofv3 memory copy, by its ``Direction``: the source of a
    ``…DEVICE_TO_HOST`` copy, none of a ``…HOST_TO_HOST`` one, else the destination."""
    idir, isrc, idst = (rows.index(k) for k in MCOPY_V3[:3])
    out: list[str | None] = []
    for _, f in rows.rows:
        d = f[idir].upper()
        agent = (None if d.endswith("HOST_TO_HOST")
                 else f[isrc] if d.endswith("DEVICE_TO_HOST") else f[idst])
        out.append(None if agent is None or not agent.strip() else _agent_device(agent))
    return out


def _one_per_dispatch(rows, path: str, starts: list[int], durs: list[int],
                      args: list[dict]) -> list[int] | None:
    """The positions of each dispatch's first row when a dispatch is written once per XCC
    (rows sharing ``XCC_KEY``), else None. The first row's start and duration become the
    dispatch's span (earliest start .. latest end); the other rows go to its ``__xcc_rows``."""
    ikey = [i for i in (rows.index(k) for k in XCC_KEY) if i is not None]
    idisp = rows.index("Dispatch_ID")
    first: dict[tuple, int] = {}
    extra: dict[int, list[int]] = {}
    for pos, (_, f) in enumerate(rows.rows):
        if not f[idisp].strip():
            continue
        j = first.setdefault(tuple(f[i] for i in ikey), pos)
        if j != pos:
            extra.setdefault(j, []).append(pos)
    if not extra:
        return None
    same = [i for i in (rows.index(*KNAME), rows.index(*CORR)) if i is not None]
    for j, more in extra.items():
        line0, f0 = rows.rows[j]
        end = starts[j] + durs[j]
        for pos in more:
            line, f = rows.rows[pos]
            bad = next((i for i in same if f[i] != f0[i]), None)
            if bad is not None:
                raise FormatError(path, tracecsv.where(line, rows.header[bad]),
                                  f"the {rows.header[bad]} of line {line0}, whose dispatch "
                                  f"(Dispatch_ID {f0[idisp]}) this row repeats, as rocprofv2 "
                                  "writes a dispatch once per XCC; got another", kind="schema")
            end = max(end, starts[pos] + durs[pos])
            starts[j] = min(starts[j], starts[pos])
        durs[j] = end - starts[j]
        args[j]["__xcc_rows"] = [{"__row": pos, **args[pos]} for pos in more]
    gone = {pos for more in extra.values() for pos in more}
    return [i for i in range(len(rows.rows)) if i not in gone]


def rebuild(con, run_id: str) -> str:
    """The CSV (header and one row per dispatch, or per XCC as written) from the raw tables."""
    run, events = fetch_run(con, run_id)
    meta = json.loads(run["metadata"])
    header = meta["columns"]
    name_col = {"api_trace.csv": "Function", "async_copy_trace.csv": "Operation",
                "memory_copy_trace.csv": "Direction"}.get(
        meta["file_kind"]) or next(h for h in header if h in KNAME)
    firsts, placed = [], {}
    for e in events:
        r = json.loads(e["args"])
        for x in r.pop("__xcc_rows", ()):
            placed[x.pop("__row")] = {**x, name_col: e["name"]}
        r[name_col] = e["name"]
        firsts.append(r)
    it = iter(firsts)
    out = [placed[i] if i in placed else next(it)
           for i in range(len(firsts) + len(placed))]
    return tracecsv.rebuild_rows(header, out)
