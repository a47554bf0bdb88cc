"""Deterministic generators of Nsight Systems and rocprof files, for tests beyond the samples.

Every generator takes the same list of :class:`K` (kernel dispatches) and writes one format;
:func:`expected` gives the per-kernel ``(calls, total_ns)`` any correct parser must find. The
nsys export also carries the secrets a real one does (environment with a token, host name,
user, command line) so tests can check none of them reaches the raw tables.
"""

from __future__ import annotations

import csv
import io
import json
import random
import sqlite3
from dataclasses import dataclass

SECRETS = ("hf_SECRETtoken123456", "gpu-node-17.example.internal", "alice-the-user",
           "--api-key=sk-live-abcdef")


@dataclass(frozen=True)
class K:
    name: str
    device: int
    stream: int
    start_ns: int
    dur_ns: int


_NAMES = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
    "at::detail::Array<char *, 1>>(int, T2, T3)",
    "nvjet_tst_192x192_64x4_2x1_v_bz_coopB_TNN",
    "ampere_sgemm_128x64_tn",
    "global_write(int*, int) [clone .kd]",
    "__amd_rocclr_fillBufferAligned.kd",
    'kernel_with_"quotes", commas, and\ttabs',
)


def kernels(seed: int = 0, n: int = 40, *, long_name_kb: int = 4) -> list[K]:
    """``n`` dispatches on two devices and three streams; one name is ``long_name_kb`` KiB."""
    rng = random.Random(seed)
    long_name = "void big_template_kernel<" + ", ".join(
        f"cute::tuple<int, (int){i}>" for i in range(long_name_kb * 1024 // 24)) + ">(T1)"
    names = (*_NAMES, long_name)
    out, t = [], 1_000_000 + rng.randrange(1000)
    for i in range(n):
        t += rng.randrange(0, 5000)
        out.append(K(names[i % len(names)], i % 2, 7 + i % 3, t, rng.randrange(1, 400_000)))
    return out


def expected(ks: list[K]) -> dict[str, tuple[int, int]]:
    agg: dict[str, tuple[int, int]] = {}
    for k in ks:
        c, s = agg.get(k.name, (0, 0))
        agg[k.name] = (c + 1, s + k.dur_ns)
    return agg


# --------------------------------------------------------------------------- Nsight Systems


def nsys_sqlite(ks: list[K], *, kernel_table: bool = True, old_schema: bool = False,
                session_start_ns: int = 1_741_793_819_042_497_997, cpu_side: bool = False,
                padding_mib: int = 0) -> bytes:
    """An ``nsys export --type sqlite`` look-alike: the tables and columns parsers read.

    ``old_schema``: an older export (no greenContextId / mangledName, other column order).
    ``cpu_side``: NVTX events (see :func:`nsys_nvtx`) and CUDA synchronisations too.
    ``padding_mib``: a table of that many 1 MiB blobs no parser reads (a big file, cheaply).
    """
    con = sqlite3.connect(":memory:")
    strings: dict[str, int] = {}

    def sid(s: str) -> int:
        return strings.setdefault(s, len(strings))

    con.executescript("""
        create table StringIds (id integer not null primary key, value text not null);
        create table META_DATA_EXPORT (name text not null, value text);
        create table META_DATA_CAPTURE (name text not null, value text);
        create table TARGET_INFO_SESSION_START_TIME (utcEpochNs integer, utcTime text,
                                                     localTime text);
        create table TARGET_INFO_GPU (vmId integer not null, id integer not null, name text,
                                      busLocation text, smCount integer, cuDevice integer);
        create table TARGET_INFO_SYSTEM_ENV (globalVid integer, devStateName text not null,
                                             name text not null, nameEnum integer not null,
                                             value text not null);
        create table PROCESSES (globalPid integer, pid integer, name text);
        create table ENUM_CUDA_MEMCPY_OPER (id integer not null primary key, name text,
                                            label text);
        create table CUPTI_ACTIVITY_KIND_MEMCPY (start integer not null, end integer not null,
            deviceId integer not null, contextId integer not null, streamId integer not null,
            correlationId integer, globalPid integer, bytes integer not null,
            copyKind integer not null);
        create table CUPTI_ACTIVITY_KIND_RUNTIME (start integer not null, end integer not null,
            eventClass integer not null, globalTid integer, correlationId integer,
            nameId integer not null, returnValue integer not null, callchainId integer);
    """)
    con.executemany("insert into META_DATA_EXPORT values (?, ?)", [
        ("EXPORT_PRODUCT_NAME", "NVIDIA Nsight Systems"),
        ("EXPORT_PRODUCT_VERSION", "2021.5.2.53" if old_schema else "2025.1.1.110"),
        ("EXPORT_SCHEMA_VERSION", "2.7.1" if old_schema else "3.17.1"),
        ("EXPORT_HOST", SECRETS[1]), ("EXPORT_USER", SECRETS[2]),
        ("EXPORT_PARAM_INPUT_PATH", f"/home/{SECRETS[2]}/report1.nsys-rep"),
    ])
    con.executemany("insert into META_DATA_CAPTURE values (?, ?)", [
        ("PROCESS_0:COMMAND", "python"), ("PROCESS_0:ARGUMENT_0", SECRETS[3]),
        ("PROCESS_0:ENVIRONMENT_VARIABLE", f"HF_TOKEN={SECRETS[0]}"),
        ("PROCESS_0:USER_NAME", SECRETS[2]),
    ])
    con.execute("insert into TARGET_INFO_SESSION_START_TIME values (?, ?, ?)",
                (session_start_ns, "2025-03-12T15:36:59", "2025-03-12T08:36:59"))
    # GPU ids in the capture differ from the CUDA ordinals kernels use (cuDevice)
    con.executemany("insert into TARGET_INFO_GPU values (?, ?, ?, ?, ?, ?)", [
        (1 << 48, 3, "NVIDIA H200", "0000:45:00.0", 132, 0),
        (1 << 48, 4, "NVIDIA H100 80GB HBM3", "0000:46:00.0", 132, 1)])
    con.executemany("insert into TARGET_INFO_SYSTEM_ENV values (?, ?, ?, ?, ?)", [
        (1 << 48, "Local (CLI)", "Hostname", 22, SECRETS[1]),
        (1 << 48, "Local (CLI)", "CpuCores", 1, "48")])
    con.execute("insert into PROCESSES values (?, ?, ?)", (4242 << 24, 4242, f"python {SECRETS[3]}"))
    con.executemany("insert into ENUM_CUDA_MEMCPY_OPER values (?, ?, ?)", [
        (1, "CUDA_MEMCPY_KIND_HTOD", "Host-to-Device"),
        (2, "CUDA_MEMCPY_KIND_DTOH", "Device-to-Host")])
    gpid = 4242 << 24
    if kernel_table:
        if old_schema:
            con.execute("""create table CUPTI_ACTIVITY_KIND_KERNEL (start integer not null,
                end integer not null, deviceId integer not null, contextId integer not null,
                streamId integer not null, correlationId integer, globalPid integer,
                demangledName integer not null, shortName integer not null,
                launchType integer, cacheConfig integer, registersPerThread integer not null,
                gridX integer not null, gridY integer not null, gridZ integer not null,
                blockX integer not null, blockY integer not null, blockZ integer not null)""")
        else:
            con.execute("""create table CUPTI_ACTIVITY_KIND_KERNEL (gridId integer not null,
                start integer not null, end integer not null, deviceId integer not null,
                contextId integer not null, greenContextId integer, streamId integer not null,
                correlationId integer, globalPid integer, demangledName integer not null,
                shortName integer not null, mangledName integer, launchType integer,
                registersPerThread integer not null, gridX integer not null,
                gridY integer not null, gridZ integer not null, blockX integer not null,
                blockY integer not null, blockZ integer not null,
                sharedMemoryLimitConfig integer)""")
        for i, k in enumerate(ks):
            short = k.name.split("<")[0].split("(")[0].split()[-1] or k.name
            corr = 100 + 2 * i
            con.execute("insert into CUPTI_ACTIVITY_KIND_RUNTIME values (?,?,?,?,?,?,?,?)",
                        (k.start_ns - 3000, k.start_ns - 1000, 0, gpid + 1, corr,
                         sid("cudaLaunchKernel_v7000"), 0, None))
            if old_schema:
                con.execute(
                    "insert into CUPTI_ACTIVITY_KIND_KERNEL values "
                    "(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    (k.start_ns, k.start_ns + k.dur_ns, k.device, 1, k.stream, corr, gpid,
                     sid(k.name), sid(short), 1, 0, 32, 64, 1, 1, 256, 1, 1))
            else:
                con.execute(
                    "insert into CUPTI_ACTIVITY_KIND_KERNEL values "
                    "(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    (i + 1, k.start_ns, k.start_ns + k.dur_ns, k.device, 1, None, k.stream,
                     corr, gpid, sid(k.name), sid(short), sid(f"_Z{len(short)}{short}v"), 1, 32,
                     64, 1, 1, 256, 1, 1, 0))
    if ks:
        k = ks[0]
        con.execute("insert into CUPTI_ACTIVITY_KIND_MEMCPY values (?,?,?,?,?,?,?,?,?)",
                    (k.start_ns - 90_000, k.start_ns - 10_000, 0, 1, 7, 99, gpid, 1 << 20, 1))
    if cpu_side:
        nsys_nvtx(con, ks, sid, gpid)
    if padding_mib:
        con.execute("create table PADDING (data blob)")
        con.executemany("insert into PADDING values (zeroblob(?))", [(1 << 20,)] * padding_mib)
    # A string nobody references, as real exports have (NVTX text, paths): must not leak.
    sid(f"HF_TOKEN={SECRETS[0]}")
    con.executemany("insert into StringIds values (?, ?)",
                    [(i, s) for s, i in strings.items()])
    con.commit()
    return con.serialize()


NVTX_DOMAIN = "my.domain"


def nsys_nvtx(con, ks: list[K], sid, gpid: int) -> None:
    """NVTX_EVENTS as nsys writes them, on the thread that launches the kernels (``gpid + 1``):
    per kernel a push/pop range ``step <i>`` (text) enclosing its runtime call and, nested in
    it, a range ``launch`` in the domain :data:`NVTX_DOMAIN` (a registered string: ``textId``);
    a start/end range over everything on another thread, a mark, a domain-create event, a
    range never ended and one without a message; CUDA synchronisations after each kernel."""
    con.executescript("""
        create table ENUM_NSYS_EVENT_TYPE (id integer not null primary key, name text,
                                           label text);
        create table NVTX_EVENTS (start integer not null, end integer,
            eventType integer not null, rangeId integer, category integer, color integer,
            text text, globalTid integer, endGlobalTid integer, textId integer,
            domainId integer, uint64Value integer, int64Value integer, doubleValue real,
            uint32Value integer, int32Value integer, floatValue real, jsonTextId integer,
            jsonText text, binaryData text);
        create table ENUM_CUPTI_SYNC_TYPE (id integer not null primary key, name text,
                                           label text);
        create table CUPTI_ACTIVITY_KIND_SYNCHRONIZATION (start integer not null,
            end integer not null, deviceId integer not null, contextId integer not null,
            greenContextId integer, streamId integer not null, correlationId integer,
            globalPid integer, deprecatedSyncType integer, syncType integer not null,
            eventId integer not null, eventSyncId integer);
    """)
    con.executemany("insert into ENUM_NSYS_EVENT_TYPE values (?, ?, ?)", [
        (34, "NvtxMark", "NvtxMark"), (59, "NvtxPushPopRange", "NvtxPushPopRange"),
        (60, "NvtxStartEndRange", "NvtxStartEndRange"), (75, "NvtxDomainCreate",
                                                         "NvtxDomainCreate")])
    con.executemany("insert into ENUM_CUPTI_SYNC_TYPE values (?, ?, ?)", [
        (3, "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE", "Stream sync"),
        (4, "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE", "Context sync")])
    tid = gpid + 1
    cols = "start, end, eventType, text, globalTid, endGlobalTid, textId, domainId, rangeId"
    ins = f"insert into NVTX_EVENTS ({cols}) values (?,?,?,?,?,?,?,?,?)"
    first = min((k.start_ns for k in ks), default=10_000_000)
    con.execute(ins, (first - 9_000, None, 75, NVTX_DOMAIN, tid, None, None, 7, None))
    launch = sid("launch")
    for i, k in enumerate(ks):
        # the runtime call of kernel i runs [start - 3000, start - 1000] on `tid`
        con.execute(ins, (k.start_ns - 4000, k.start_ns - 500, 59, f"step {i}", tid, None,
                          None, 0, None))
        con.execute(ins, (k.start_ns - 3500, k.start_ns - 800, 59, None, tid, None, launch, 7,
                          None))
        con.execute("insert into CUPTI_ACTIVITY_KIND_SYNCHRONIZATION values "
                    "(?,?,?,?,?,?,?,?,?,?,?,?)",
                    (k.start_ns + k.dur_ns, k.start_ns + k.dur_ns + 700, k.device, 1, None,
                     k.stream, 100 + 2 * i + 1, gpid, None, 3 + i % 2, 1, None))
    last = max((k.start_ns + k.dur_ns for k in ks), default=first)
    con.execute(ins, (first - 8_000, last + 5, 60, "whole run", tid + 1, tid, None, 0, 1))
    con.execute(ins, (first - 7_000, None, 34, "a mark", tid, None, None, 0, None))
    con.execute(ins, (first - 6_000, None, 59, "never popped", tid, None, None, 0, None))
    con.execute(ins, (first - 5_000, first - 4_500, 59, None, tid, None, None, 0, None))


def nsys_api_trace_csv(ks: list[K], *, preamble: bool = True) -> bytes:
    """``nsys stats --report cuda_api_trace --format csv``: per kernel its ``cudaLaunchKernel``
    (CorrID ``100 + 2 i``, as :func:`nsys_sqlite` numbers it), after nsys's console lines."""
    buf = io.StringIO()
    if preamble:
        buf.write("Processing [report1.sqlite] with [/opt/nvidia/nsys/reports/cuda_api_trace.py]"
                  "... \n")
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["Start (ns)", "Duration (ns)", "Name", "Result", "CorrID", "Pid", "Tid",
                "T-Pri", "Thread Name"])
    for i, k in enumerate(ks):
        w.writerow([k.start_ns - 3000, 2000, "cudaLaunchKernel", 0, 100 + 2 * i, 4242, 4243, 20,
                    "python3"])
    return buf.getvalue().encode()


def nsys_nvtx_trace_csv(ks: list[K]) -> bytes:
    """``nsys stats --report nvtx_pushpop_trace --format csv``: per kernel a range ``:step <i>``
    (level 0) enclosing ``my.domain:launch`` (level 1), with nsys's nesting columns."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["Start (ns)", "End (ns)", "Duration (ns)", "DurChild (ns)", "DurNonChild (ns)",
                "Name", "PID", "TID", "Lvl", "NumChild", "RangeId", "ParentId", "RangeStack",
                "NameTree"])
    for i, k in enumerate(ks):
        a, b = 2 * i + 1, 2 * i + 2
        w.writerow([k.start_ns - 4000, k.start_ns - 500, 3500, 2700, 800, f":step {i}", 4242,
                    4243, 0, 1, a, "", f":{a}", f":step {i}"])
        w.writerow([k.start_ns - 3500, k.start_ns - 800, 2700, 0, 2700,
                    f"{NVTX_DOMAIN}:launch", 4242, 4243, 1, 0, b, a, f":{a}:{b}",
                    f" --{NVTX_DOMAIN}:launch"])
    return buf.getvalue().encode()


def nsys_kern_sum_csv(ks: list[K], *, preamble: bool = True, old: bool = False) -> bytes:
    """``nsys stats --report cuda_gpu_kern_sum --format csv`` (``old``: gpukernsum headers)."""
    agg: dict[str, list[int]] = {}
    for k in ks:
        agg.setdefault(k.name, []).append(k.dur_ns)
    total = sum(k.dur_ns for k in ks) or 1
    buf = io.StringIO()
    if preamble:
        buf.write("Generating SQLite file report1.sqlite from report1.nsys-rep\n"
                  "Processing [report1.sqlite] with [/opt/nvidia/nsight-systems/reports/"
                  "cuda_gpu_kern_sum.py]... \n\n ** CUDA GPU Kernel Summary (cuda_gpu_kern_sum):"
                  "\n\n")
    w = csv.writer(buf, lineterminator="\n")
    if old:
        w.writerow(["Time(%)", "Total Time (ns)", "Instances", "Average", "Minimum", "Maximum",
                    "StdDev", "Name"])
    else:
        w.writerow(["Time (%)", "Total Time (ns)", "Instances", "Avg (ns)", "Med (ns)",
                    "Min (ns)", "Max (ns)", "StdDev (ns)", "Name"])
    for name, durs in sorted(agg.items(), key=lambda kv: -sum(kv[1])):
        s = sum(durs)
        avg = f"{s / len(durs):.1f}"
        row = [f"{100 * s / total:.1f}", s, len(durs), avg]
        if not old:
            row.append(f"{sorted(durs)[len(durs) // 2]:.1f}")
        w.writerow([*row, min(durs), max(durs), "0.0", name])
    return buf.getvalue().encode()


# --------------------------------------------------------------------------- rocprof


_V1 = ["Index", "KernelName", "gpu-id", "queue-id", "queue-index", "pid", "tid", "grd", "wgr",
       "lds", "scr", "arch_vgpr", "accum_vgpr", "sgpr", "wave_size", "sig", "obj", "DispatchNs",
       "BeginNs", "EndNs", "CompleteNs", "DurationNs"]
_TS = ["Dispatch_ID", "Kernel_Name", "GPU_ID", "queue-id", "queue-index", "pid", "tid",
       "Grid_Size", "Workgroup_Size", "LDS_Per_Workgroup", "Scratch_Per_Workitem", "Arch_VGPR",
       "Accum_VGPR", "SGPR", "wave_size", "sig", "obj", "DispatchNs", "Start_Timestamp",
       "End_Timestamp", "CompleteNs"]
_V3 = ["Kind", "Agent_Id", "Queue_Id", "Stream_Id", "Thread_Id", "Dispatch_Id", "Kernel_Id",
       "Kernel_Name", "Correlation_Id", "Start_Timestamp", "End_Timestamp", "LDS_Block_Size",
       "Scratch_Size", "VGPR_Count", "Accum_VGPR_Count", "SGPR_Count", "Workgroup_Size_X",
       "Workgroup_Size_Y", "Workgroup_Size_Z", "Grid_Size_X", "Grid_Size_Y", "Grid_Size_Z"]


def rocprof_csv(ks: list[K], variant: str = "timestamps") -> bytes:
    """Per-dispatch CSV: ``results`` (v1 results.csv), ``timestamps`` (omniperf), ``v3``."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    if variant == "v3":
        w.writerow(_V3)
        for i, k in enumerate(ks):
            w.writerow(["KERNEL_DISPATCH", k.device + 2, 1, k.stream, 791827, i + 1, 10 + i % 5,
                        k.name, i + 1, k.start_ns, k.start_ns + k.dur_ns, 0, 0, 8, 0, 16, 256,
                        1, 1, 1048576, 1, 1])
        return buf.getvalue().encode()
    cols = _V1 if variant == "results" else _TS
    w.writerow(cols)
    for i, k in enumerate(ks):
        row = [i, k.name, k.device + 2, k.stream, i, 791827, 791827, 256, 256, 0, 0, 12, 4, 32,
               64, "0x0", "0x7fd72f815800", k.start_ns - 500, k.start_ns, k.start_ns + k.dur_ns,
               k.start_ns + k.dur_ns + 700]
        if variant == "results":
            row.append(k.dur_ns)
        w.writerow(row)
    return buf.getvalue().encode()


API_HEADER = ("Domain", "Function", "Process_Id", "Thread_Id", "Correlation_Id",
              "Start_Timestamp", "End_Timestamp")


def rocprof_api_trace_csv(ks: list[K]) -> bytes:
    """rocprofv3 ``--hip-trace --hsa-trace --marker-trace`` API calls in one CSV (rocprofv3
    writes one file per domain group, with this header): a compiler API call, then per kernel a
    roctx range ``step <i>`` enclosing its ``hipLaunchKernel`` (Correlation_Id ``i + 1``, as
    :func:`rocprof_csv` ``v3`` numbers the dispatch) and an HSA call; a profiler-control marker
    (zero length) at the end."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n", quoting=csv.QUOTE_NONNUMERIC)
    w.writerow(API_HEADER)
    first = min((k.start_ns for k in ks), default=10_000)
    w.writerow(["HIP_COMPILER_API", "__hipRegisterFatBinary", 791827, 791827, len(ks) + 1,
                first - 9000, first - 8000])
    for i, k in enumerate(ks):
        w.writerow(["MARKER_CORE_RANGE_API", f"step {i}", 791827, 791827, 10_000 + i,
                    k.start_ns - 4000, k.start_ns - 500])
        w.writerow(["HIP_RUNTIME_API", "hipLaunchKernel", 791827, 791827, i + 1,
                    k.start_ns - 3000, k.start_ns - 1000])
        w.writerow(["HSA_CORE_API", "hsa_signal_store_screlease", 791827, 791828,
                    len(ks) + 2 + i, k.start_ns - 2000, k.start_ns - 1900])
    last = max((k.start_ns + k.dur_ns for k in ks), default=first)
    w.writerow(["MARKER_CONTROL_API", "roctxProfilerPause", 791827, 791827, 2 * len(ks) + 2,
                last, last])
    return buf.getvalue().encode()


def rocprof_stats_csv(ks: list[K], *, v3: bool = False) -> bytes:
    agg: dict[str, list[int]] = {}
    for k in ks:
        agg.setdefault(k.name, []).append(k.dur_ns)
    total = sum(k.dur_ns for k in ks) or 1
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n", quoting=csv.QUOTE_NONNUMERIC)
    head = ["Name", "Calls", "TotalDurationNs", "AverageNs", "Percentage"]
    w.writerow(head + (["MinNs", "MaxNs", "StdDev"] if v3 else []))
    for name, durs in sorted(agg.items(), key=lambda kv: -sum(kv[1])):
        s = sum(durs)
        row = [name, len(durs), s, s // len(durs), round(100 * s / total, 6)]
        if v3:
            row += [min(durs), max(durs), 0.0]
        w.writerow(row)
    # QUOTE_NONNUMERIC quotes nothing numeric: rocprof writes integers unquoted too.
    return buf.getvalue().encode()


def rocprof_results_json(ks: list[K], *, other_data: bool = True,
                         hip_trace: bool = False) -> bytes:
    """rocprof v1 ``results.json``: ``ts``/``dur`` strings in whole µs, exact ns in ``args``.

    ``hip_trace``: as ``--timestamp on --hip-trace`` writes it, every dispatch a second time
    from the HIP activity table (``args.dev-id``), plus API calls and a barrier lane."""
    lines = ['{ "traceEvents":[{}']
    devices = sorted({k.device for k in ks})
    labels = [(6 + d, f"GPU{d}") for d in devices]
    if hip_trace:
        labels += [(2, "CPU HIP API"), (518, "GPU Barriers0")]
    for pid, label in labels:
        lines.append(json.dumps({"args": {"name": label}, "ph": "M", "pid": pid,
                                 "name": "process_name", "sort_index": pid}))
    for i, k in enumerate(ks):
        args = {"Index": str(i), "KernelName": k.name, "gpu-id": str(k.device),
                "queue-id": str(k.stream), "BeginNs": str(k.start_ns),
                "EndNs": str(k.start_ns + k.dur_ns), "DurationNs": str(k.dur_ns),
                "Comms Id": 10159970886766084423}
        lines.append(json.dumps({"ph": "X", "name": k.name, "pid": 6 + k.device, "tid": k.stream,
                                 "ts": str(k.start_ns // 1000), "dur": str(k.dur_ns // 1000),
                                 "args": args}))
    if hip_trace:
        for k in ks:
            ops = {"BeginNs": str(k.start_ns), "EndNs": str(k.start_ns + k.dur_ns),
                   "dev-id": str(k.device), "queue-id": str(k.stream), "Name": k.name,
                   "pid": "4242", "tid": "4242", "stream-id": str(k.stream), "Data": "",
                   "DurationNs": str(k.dur_ns)}
            lines.append(json.dumps({"ph": "X", "name": k.name, "pid": str(6 + k.device),
                                     "tid": str(k.stream), "ts": str(k.start_ns // 1000),
                                     "dur": str(max(1, k.dur_ns // 1000)), "args": ops}))
            lines.append(json.dumps({"ph": "X", "name": "hipLaunchKernel", "pid": "2",
                                     "tid": "4242", "ts": str(k.start_ns // 1000 - 5),
                                     "dur": "1", "args": {"BeginNs": str(k.start_ns - 5000),
                                                          "EndNs": str(k.start_ns - 4000),
                                                          "DurationNs": "1000"}}))
        lines.append(json.dumps({"ph": "X", "name": "<barrier packet>", "pid": "518",
                                 "tid": "0", "ts": "1", "dur": "1",
                                 "args": {"BeginNs": "10", "EndNs": "20", "DurationNs": "10",
                                          "dev-id": "0"}}))
    body = "\n,".join(lines) + "\n],\n"
    other = {"CMD": "rocminfo", "Agent1.Name": "AMD EPYC 7A53", "Agent1.DeviceType": "CPU",
             "Agent2.Name": "gfx90a", "Agent2.MarketingName": "AMD Instinct MI250X",
             "Agent2.DeviceType": "GPU", "Agent3.Name": "gfx90a",
             "Agent3.MarketingName": "AMD Instinct MI250X / MI250", "Agent3.DeviceType": "GPU",
             } if other_data else {}
    return (body + '"otherData": ' + json.dumps(other, indent=4) + "\n}\n").encode()


def rocprof_results_db(ks: list[K], *, hip_trace: bool = True, timestamps: bool = True) -> bytes:
    """rocprof v1 ``results.db`` as ``tblextr`` writes it: ``KERN`` (``--timestamp on``) and,
    with ``hip_trace``, ``HIP`` API calls, ``OPS`` (the same dispatches, plus a barrier packet)
    and ``COPY``. Names are stored wrapped in double quotes, as rocprof does."""
    con = sqlite3.connect(":memory:")
    if timestamps:
        con.execute('CREATE TABLE KERN ("Index" INTEGER, "KernelName" TEXT, "gpu-id" INTEGER, '
                    '"queue-id" INTEGER, "pid" INTEGER, "tid" INTEGER, "DispatchNs" INTEGER, '
                    '"BeginNs" INTEGER, "EndNs" INTEGER, "CompleteNs" INTEGER)')
        for i, k in enumerate(ks):
            con.execute("insert into KERN values (?,?,?,?,?,?,?,?,?,?)",
                        (i, f'"{k.name}"', k.device, k.stream, 4242, 4242, k.start_ns - 100,
                         k.start_ns, k.start_ns + k.dur_ns, k.start_ns + k.dur_ns + 50))
        con.execute('ALTER TABLE KERN ADD COLUMN "DurationNs" INTEGER')
        con.execute("UPDATE KERN SET DurationNs = (EndNs - BeginNs)")
    if hip_trace:
        ops = ('("BeginNs" INTEGER, "EndNs" INTEGER, "dev-id" INTEGER, "queue-id" INTEGER, '
               '"Name" TEXT, "pid" INTEGER, "tid" INTEGER, "roctx-range" TEXT, '
               '"stream-id" INTEGER, "Index" INTEGER, "Data" TEXT, "__section" INTEGER, '
               '"__lane" INTEGER)')
        con.execute("CREATE TABLE OPS " + ops)
        con.execute("CREATE TABLE COPY " + ops)
        con.execute('CREATE TABLE HIP ("BeginNs" INTEGER, "EndNs" INTEGER, "pid" INTEGER, '
                    '"tid" INTEGER, "Name" TEXT, "args" TEXT, "Index" INTEGER, "Data" TEXT, '
                    '"__section" INTEGER, "__lane" INTEGER)')
        for i, k in enumerate(ks):
            if i == len(ks) // 2:  # a barrier packet between dispatches, as rocprof records
                con.execute("insert into OPS values (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                            (10, 20, 0, 0, '"<barrier packet>"', 4242, 4242, "", 0, 999, "",
                             518, 0))
            con.execute("insert into HIP values (?,?,?,?,?,?,?,?,?,?)",
                        (k.start_ns - 5000, k.start_ns - 4000, 4242, 4242, "hipLaunchKernel",
                         "hipLaunchKernel(stream=0x1)", i, "", 2, 4242))
            con.execute("insert into OPS values (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                        (k.start_ns, k.start_ns + k.dur_ns, k.device, k.stream, f'"{k.name}"',
                         4242, 4242, "", k.stream, i, "", 6 + k.device, k.stream))
        con.execute("insert into COPY values (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    (5, 900, 0, 0, "CopyHostToDevice", 4242, 4242, "", 0, 1000, "", 1, 0))
        for t in ("OPS", "COPY", "HIP"):
            con.execute(f'ALTER TABLE {t} ADD COLUMN "DurationNs" INTEGER')
            con.execute(f"UPDATE {t} SET DurationNs = (EndNs - BeginNs)")  # noqa: S608
    con.commit()
    return con.serialize()
