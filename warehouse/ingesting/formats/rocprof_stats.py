"""rocprof kernel statistics CSVs: one row per kernel name, already aggregated.

- rocprof v1 ``results.stats.csv`` (``--stats``): ``Name``, ``Calls``, ``TotalDurationNs``,
  ``AverageNs``, ``Percentage``;
- rocprofv3 ``kernel_stats.csv`` (``--stats``): the same plus ``MinNs``, ``MaxNs``,
  ``StdDev``.

``calls`` = Calls, ``total_ns`` = TotalDurationNs (exact integers); names kept exactly as
written (``.kd`` suffixes included); the other columns verbatim in ``extra``. Older rocprof
versions wrote the names unquoted, commas and all (``void f<int, 2>(float*, int),1,533600,…``):
every column but ``Name`` is a number without commas, so a row's surplus fields are the name's
own, joined back.

The same header serves rocprof's other statistics, which are refused naming the rule when every
row says so: rocprofv3 ``domain_stats.csv`` (every name a tracing domain: ``HIP_API``,
``KERNEL_DISPATCH``, ``MEMORY_COPY``, …), its memory statistics (every name a memory operation:
``MEMORY_COPY_HOST_TO_DEVICE``, …), v1 ``results.copy_stats.csv`` (every name a copy,
``CopyHostToDevice`` or ``CopyDeviceToHost`` among them) and the API statistics (``hip_api_stats.csv``,
``hsa_api_stats.csv``, ``rccl_api_stats.csv``, v1 ``results.hip_stats.csv``: every name a HIP /
HSA / RCCL function, among them one every such file has, e.g. ``hipLaunchKernel``,
``ncclCommInitRank``; rocprofv3's ``rocdecode_api_stats.csv`` / ``rocjpeg_api_stats.csv`` the
same with ``rocDec*`` / ``rocJpeg*`` functions, e.g. ``rocDecCreateDecoder``, ``rocJpegCreate``).
A file with one kernel among them is read as kernel statistics.

rocprofv3's ``marker_api_stats.csv`` (``--marker-trace --stats``; ROCm/rocprofiler-sdk
``source/lib/rocprofiler-sdk-tool/generateStats.cpp``: a row per roctx message of
``roctxMarkA`` / ``roctxRangePushA`` / ``roctxRangeStartA`` (the range's push-to-pop time, a
mark's 0 ns: ``tool.cpp`` writes a mark with end = start), else per roctx function name) has
the header of ``kernel_stats.csv`` with user-chosen names, so it is refused when a row shows
it: a row named by a roctx function (``roctxGetThreadId``, ``roctxNameOsThread``,
``roctxProfilerPause``, …: no kernel is called so) or a rocprofv3 row whose
every call took 0 ns (``MaxNs`` 0: a roctx mark, ROCm/legacy-rocm-build issue 4396 "Zero value
is displayed in ROCTx aggregated statistics"; a kernel dispatch takes time). A marker
statistics file of ranges only, named like kernels, cannot be told apart by its content; that is
the common case of push/pop ranges (``torch.cuda.nvtx.range_push`` on ROCm): ``tool.cpp``
completes the push's record at the pop, so a ``roctxRangePop`` (or ``roctxRangeStop``) makes no
row of its own.

Parser ``rocprof_stats_csv/4`` (``/1`` read those statistics as kernels, ``/2`` the RCCL and v1
copy ones, ``/3`` the marker, rocDecode and rocJPEG ones: ``pwh rederive`` then fails naming the
rule).
"""

from __future__ import annotations

import json
import re

from warehouse.errors import FormatError
from warehouse.ingesting.formats import trace, tracecsv
from warehouse.ingesting.formats.base import Parsed
from warehouse.ingesting.formats.tracebuild import TraceBuilder, fetch_run, fetch_summaries

NAME = "rocprof_stats_csv"
PARSER_VERSION = "rocprof_stats_csv/4"
KIND = "text"
TABLES = trace.TABLES

EXPECTED = "columns 'Name', 'Calls' and 'TotalDurationNs' (rocprof --stats)"
# rocprofv3 tracing domains (domain_stats.csv rows), and the ones such a file always has one of
_DOMAIN = re.compile(r"(?:[A-Z0-9]+_)*(?:API|DISPATCH|COPY|ALLOCATION|MEMORY)")
_DOMAIN_ALWAYS = frozenset({"HIP_API", "HIP_RUNTIME_API", "HIP_COMPILER_API", "HSA_API",
                            "HSA_CORE_API", "HSA_AMD_EXT_API", "KERNEL_DISPATCH", "MEMORY_COPY",
                            "MARKER_API", "MARKER_CORE_API", "RCCL_API", "SCRATCH_MEMORY",
                            "MEMORY_ALLOCATION"})
# rocprofv3 memory operations (memory_copy_stats.csv, memory_allocation_stats.csv, …)
_MEMORY = re.compile(r"(?:MEMORY_COPY|MEMORY_ALLOCATION|SCRATCH_MEMORY)(?:_[A-Z0-9]+)+")
# rocprof v1 copies (results.copy_stats.csv rows), and the directions such a file has one of
_COPY_V1 = re.compile(r"(?:Copy|Fill)[A-Z][A-Za-z]*")
_COPY_V1_ALWAYS = frozenset({"CopyHostToDevice", "CopyDeviceToHost"})
# HIP / HSA / RCCL API functions (hip_api_stats.csv, hsa_api_stats.csv, rccl_api_stats.csv,
# results.hip_stats.csv rows), and the calls every such file of a GPU program has
_API = re.compile(r"(?:__)?hip[A-Z_]\w*|hsa_\w+|nccl[A-Z]\w*|rocDec[A-Z]\w*|rocJpeg[A-Z]\w*")
_API_ALWAYS = frozenset({"hipLaunchKernel", "hipModuleLaunchKernel", "hipExtLaunchKernel",
                         "__hipPushCallConfiguration", "__hipRegisterFatBinary", "hipMalloc",
                         "hipMemcpy", "hipInit", "hsa_init", "hsa_queue_create",
                         "hsa_signal_create", "hsa_agent_get_info", "ncclCommInitRank",
                         "ncclCommInitRankConfig", "ncclCommInitAll", "ncclCommSplit",
                         "ncclGetUniqueId", "ncclGetVersion", "ncclGroupStart", "ncclGroupEnd",
                         "rocDecCreateDecoder", "rocDecDestroyDecoder", "rocDecDecodeFrame",
                         "rocJpegCreate", "rocJpegDestroy", "rocJpegStreamCreate", "rocJpegDecode"})
# roctx functions (rocprofv3 marker_api_stats.csv rows not named by a message: rocprofiler-sdk
# include/rocprofiler-sdk/marker/api_id.h)
_ROCTX = re.compile(r"roctx[A-Z]\w*")


def _looks_like(fields: list[str]) -> bool:
    return "Name" in fields and "Calls" in fields and any(
        f.startswith("TotalDuration") for f in fields)


def sniff(head: bytes, path: str) -> bool:
    lines = tracecsv.head_lines(head, 3)
    return bool(lines) and _looks_like(tracecsv.header_fields(lines[0]))


def _marker(rows, names: list[str]) -> str | None:
    """What shows a rocprofv3 marker_api_stats.csv, or None."""
    roctx = next((n for n in names if _ROCTX.fullmatch(n)), None)
    if roctx is not None:
        return (f"rocprofv3's marker_api_stats.csv (roctx statistics: a row is the roctx "
                f"function {roctx}")
    icalls, imax = rows.index("Calls"), rows.index("MaxNs")
    if imax is None:
        return None
    for _, f in rows.rows:
        if f[imax].strip() == "0" and f[icalls].strip() not in ("", "0"):
            name = f[rows.index("Name")]
            return (f"rocprofv3's marker_api_stats.csv (roctx statistics: every call of "
                    f"{name!r} took 0 ns (MaxNs 0), as a roctxMarkA does; a kernel dispatch "
                    f"takes time")
    return None


def parse(data: bytes, path: str, run_id: str) -> Parsed:
    head = tracecsv.header_fields(tracecsv.head_lines(data[:1 << 16], 1)[0]) if data else []
    rows = tracecsv.read(data, path, _looks_like, EXPECTED,
                         unquoted=head.index("Name") if "Name" in head else None)
    if rows.preamble_lines:
        raise FormatError(path, "line 1", f"the CSV header on line 1 ({EXPECTED})",
                          kind="schema")
    col = tracecsv.require(rows, path, {"name": ("Name",), "calls": ("Calls",),
                                        "total": ("TotalDurationNs",)})
    header = rows.header
    names = [f[col["name"]] for _, f in rows.rows]
    if all(_DOMAIN.fullmatch(n) for n in names) and _DOMAIN_ALWAYS.intersection(names):
        what = "rocprofv3's domain_stats.csv (every row a tracing domain, e.g. " + names[0]
    elif names and all(_MEMORY.fullmatch(n) for n in names):
        what = "rocprofv3's memory statistics (every row a memory operation, e.g. " + names[0]
    elif all(_COPY_V1.fullmatch(n) for n in names) and _COPY_V1_ALWAYS.intersection(names):
        what = ("rocprof's memory statistics (results.copy_stats.csv: every row a copy, e.g. "
                + names[0])
    elif all(_API.fullmatch(n) for n in names) and _API_ALWAYS.intersection(names):
        what = ("API statistics (every row a HIP/HSA/RCCL/rocDecode/rocJPEG function, e.g. "
                + names[0])
    else:
        what = _marker(rows, names)
    if what is not None:
        raise FormatError(path, f"line {rows.header_line + 1}", "kernel statistics (one row per "
                          f"kernel); this is {what[:200]}): ingest the kernel statistics "
                          "(kernel_stats.csv, results.stats.csv) instead", kind="schema")
    imin, imax = rows.index("MinNs"), rows.index("MaxNs")
    tool = "rocprofv3" if imin is not None else "rocprof"
    b = TraceBuilder(run_id)
    for line, f in rows.rows:
        name = tracecsv.text(f[col["name"]], path, line, "Name")
        calls = tracecsv.integer(f[col["calls"]], path, line, "Calls", what="calls")
        total = tracecsv.integer(f[col["total"]], path, line, "TotalDurationNs")
        lo = None if imin is None else tracecsv.integer(f[imin], path, line, "MinNs")
        hi = None if imax is None else tracecsv.integer(f[imax], path, line, "MaxNs")
        if calls == 0 and total != 0:
            raise FormatError(path, tracecsv.where(line, "Calls"),
                              "at least one call for a kernel with time", kind="schema")
        if lo is not None and hi is not None and lo > hi:
            raise FormatError(path, tracecsv.where(line, "MinNs"), "MinNs <= MaxNs",
                              kind="schema")
        extra = {h: v for h, v in zip(header, f, strict=True) if h != "Name"}
        b.summary(name, calls, total, min_ns=lo, max_ns=hi, extra=extra)
    meta = {"file_kind": "kernel_stats.csv" if tool == "rocprofv3" else "results.stats.csv",
            "columns": header}
    return b.parsed(NAME, PARSER_VERSION, tool=tool, tool_version=None, time_base="session",
                    origin_ns=None, metadata=meta, aggregated=True)


def rebuild(con, run_id: str) -> str:
    """The statistics CSV (header and rows) from the raw tables."""
    run, _ = fetch_run(con, run_id)
    header = json.loads(run["metadata"])["columns"]

    def rows():
        for s in fetch_summaries(con, run_id):
            r = json.loads(s["extra"])
            r["Name"] = s["name"]
            yield r

    return tracecsv.rebuild_rows(header, rows())
