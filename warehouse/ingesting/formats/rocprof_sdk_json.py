"""rocprofv3 ``results.json`` (``rocprofv3 --kernel-trace --output-format json``).

The rocprofiler-sdk tool writes one JSON object whose only key is ``"rocprofiler-sdk-tool"``:
a list of per-process objects (``metadata`` {``pid``, ``init_time``, ``fini_time``, …},
``agents``, ``strings``, ``code_objects``, ``kernel_symbols``, ``callback_records``,
``buffer_records``), serialised with cereal (layout: ``generateJSON.cpp`` and
``cxx/serialization.hpp`` of ROCm/rocprofiler-sdk). Recognised by that opening key, never by
the file name.

Read from ``buffer_records``:

- ``kernel_dispatch`` -> kind ``kernel``: ``start_ns`` = ``start_timestamp``, ``dur_ns`` =
  ``end_timestamp - start_timestamp`` (exact non-negative integer ns; end >= start, else the
  file is refused naming the record and the rule). ``name`` = the kernel symbol's
  ``formatted_kernel_name`` (what rocprofv3's ``kernel_trace.csv`` writes; else
  ``demangled_kernel_name``, else ``kernel_name``), ``mangled_name`` = its ``kernel_name``; the
  symbol is the ``kernel_symbols`` entry whose ``kernel_id`` is ``dispatch_info.kernel_id``.
  ``device`` = the dispatch agent's logical GPU index (``agents[].logical_node_type_id``, else
  its position among the GPU agents), ``stream`` = ``dispatch_info.queue_id.handle``,
  ``correlation`` = ``correlation_id.internal``, ``tid`` = ``thread_id``, ``pid`` =
  ``metadata.pid``. Agent and queue ids are cereal objects ``{"handle": N}``.
- ``memory_copy`` -> kind ``memcpy`` (the GPU end's device; ``name`` = the operation's name
  from ``strings.buffer_records``, e.g. ``MEMORY_COPY_HOST_TO_DEVICE``).
- ``hip_api``, ``hsa_api``, ``rccl_api`` -> kind ``runtime`` (as rocprofv3's API-trace CSVs),
  ``name`` = the operation's name (``strings.buffer_records[kind].operations[operation]``).

Every record stays verbatim as JSON text in ``args`` (grid and workgroup sizes included);
``category`` is its ``buffer_records`` section, so ``rebuild`` returns each process's sections
as written. Other sections (``marker_api``, ``scratch_memory``, ``memory_allocation``, …) are
counted in ``metadata.unread`` but not read. ``metadata.command`` / ``config`` stay out of the
tables (the archived file keeps them). Timestamps are the HSA system clock (``time_base``
``session``). The file is read whole (``formats.WHOLE_MAX`` bounds it, as every whole JSON).
"""

from __future__ import annotations

import json
import re
from typing import Any

import msgspec

from warehouse.errors import FormatError
from warehouse.ingesting import jsonstrict
from warehouse.ingesting.formats import rocprof_json, trace, tracecsv
from warehouse.ingesting.formats.base import Parsed
from warehouse.ingesting.formats.tracebuild import TraceBuilder, fetch_run

NAME = "rocprof_sdk_json"
PARSER_VERSION = "rocprof_sdk_json/1"
KIND = "json"
TABLES = trace.TABLES

_OPENING = re.compile(rb'\A\s*\{\s*"rocprofiler-sdk-tool"\s*:\s*\[')
# buffer_records sections read, with their event kind, in output order
_SECTIONS = (("kernel_dispatch", "kernel"), ("memory_copy", "memcpy"), ("hip_api", "runtime"),
             ("hsa_api", "runtime"), ("rccl_api", "runtime"))
_GPU_TYPES = (2, "GPU", "ROCPROFILER_AGENT_TYPE_GPU")  # rocprofiler_agent_type_t GPU = 2
_WS_COLON = re.compile(rb'"[ \t\r\n]+:')
_AGENT_PROPS = ("node_id", "logical_node_id", "logical_node_type_id", "name", "product_name",
                "model_name", "vendor_name", "gfx_target_version", "cu_count", "simd_count",
                "wave_front_size", "gpu_id", "device_id")


class Process(msgspec.Struct):
    metadata: dict[str, Any] = {}
    agents: list[dict[str, Any]] = []
    strings: dict[str, Any] = {}
    kernel_symbols: list[Any] = []
    buffer_records: dict[str, list[msgspec.Raw]] = {}


class Doc(msgspec.Struct):
    processes: list[Process] = msgspec.field(name="rocprofiler-sdk-tool")


def sniff(head: bytes, path: str) -> bool:
    return bool(_OPENING.match(head))


class _Rec:
    """Field access on one record with errors naming its JSON path and the rule."""

    def __init__(self, path: str, where: str, rec: dict):
        self.path, self.where, self.rec = path, where, rec

    def fail(self, key: str, rule: str) -> FormatError:
        return FormatError(self.path, f"{self.where}.{key}", rule, kind="schema")

    def get(self, dotted: str):
        v = self.rec
        for k in dotted.split("."):
            v = v.get(k) if isinstance(v, dict) else None
        return v

    def ns(self, key: str) -> int:
        v = self.get(key)
        if type(v) is not int or not 0 <= v <= tracecsv.INT64_MAX:
            raise self.fail(key, f"a non-negative integer timestamp in ns; got {v!r}")
        return v

    def handle(self, key: str, *, required: bool = True) -> int | None:
        """An id written as cereal's ``{"handle": N}`` (a bare integer is taken too)."""
        v = self.get(key)
        if isinstance(v, dict):
            v = v.get("handle")
        if type(v) is int:
            return v
        if v is None and not required:
            return None
        raise self.fail(key, f'an id {{"handle": <integer>}}; got {self.get(key)!r}')

    def opt_int(self, key: str) -> int | None:
        v = self.get(key)
        return v if type(v) is int else None


def _where(p: int, section: str, i: int) -> str:
    return f"$['rocprofiler-sdk-tool'][{p}].buffer_records.{section}[{i}]"


def _op_names(strings: dict) -> dict[int, tuple[str, list]]:
    """``kind -> (kind name, operation names)`` from ``strings.buffer_records`` (a list indexed
    by the buffer-tracing kind, each ``{"kind": NAME, "operations": [...]}``)."""
    out = {}
    recs = strings.get("buffer_records") if isinstance(strings, dict) else None
    for k, e in enumerate(recs if isinstance(recs, list) else []):
        if isinstance(e, dict) and isinstance(e.get("kind"), str):
            ops = e.get("operations")
            out[k] = (e["kind"], ops if isinstance(ops, list) else [])
    return out


def _op_name(names: dict, section: str, r: _Rec) -> tuple[str, str]:
    """``(category kind name, operation name)`` of an API / copy record."""
    kind, op = r.opt_int("kind"), r.opt_int("operation")
    kname, ops = names.get(kind, (None, []))
    if op is not None and 0 <= op < len(ops) and isinstance(ops[op], str) and ops[op]:
        return kname or section, ops[op]
    return kname or section, f"{kname or section} operation {op}"


def _symbols(path: str, p: int, syms: list) -> dict[int, dict]:
    out = {}
    for i, s in enumerate(syms):
        if not isinstance(s, dict):
            raise FormatError(path, f"$['rocprofiler-sdk-tool'][{p}].kernel_symbols[{i}]",
                              "a kernel symbol object", kind="schema")
        if type(s.get("kernel_id")) is int:
            out[s["kernel_id"]] = s
    return out


def _kernel_name(sym: dict) -> str | None:
    for k in ("formatted_kernel_name", "demangled_kernel_name", "kernel_name"):
        v = sym.get(k)
        if isinstance(v, str) and v:
            return v
    return None


def _devices(path: str, p: int, agents: list, b: TraceBuilder) -> dict[int, str | None]:
    """``agent handle -> device`` (the logical GPU index; ``None`` for CPU agents); each GPU
    named by its ``product_name`` (else ``name``) in ``trace_devices``."""
    out: dict[int, str | None] = {}
    n_gpu = 0
    for i, a in enumerate(agents):
        where = f"$['rocprofiler-sdk-tool'][{p}].agents[{i}]"
        if not isinstance(a, dict):
            raise FormatError(path, where, "an agent object", kind="schema")
        h = _Rec(path, where, a).handle("id")
        if a.get("type") not in _GPU_TYPES:
            out[h] = None
            continue
        idx = a.get("logical_node_type_id")
        dev = str(idx if type(idx) is int else n_gpu)
        n_gpu += 1
        out[h] = dev
        name = a.get("product_name") or a.get("name") or None
        props = {k: a[k] for k in _AGENT_PROPS if k in a and not isinstance(a[k], dict | list)}
        b.device(dev, name if isinstance(name, str) else None, props)
    return out


def parse(data: bytes, path: str, run_id: str) -> Parsed:
    doc = jsonstrict.decode(data, Doc, path)
    b = TraceBuilder(run_id)
    unread: dict[str, int] = {}
    pids = []
    for p, proc in enumerate(doc.processes):
        pid = proc.metadata.get("pid")
        pid = str(pid) if type(pid) is int else None
        pids.append({k: proc.metadata.get(k) for k in ("pid", "init_time", "fini_time")})
        devices = _devices(path, p, proc.agents, b)
        symbols = _symbols(path, p, proc.kernel_symbols)
        names = _op_names(proc.strings)
        for section, recs in proc.buffer_records.items():
            if section not in dict(_SECTIONS) and recs:
                unread[section] = unread.get(section, 0) + len(recs)
        for section, kind in _SECTIONS:
            for i, raw in enumerate(proc.buffer_records.get(section, ())):
                _record(b, path, p, section, kind, i, bytes(raw), pid, devices, symbols, names)
    meta = {"processes": pids, "unread": unread}
    return b.parsed(NAME, PARSER_VERSION, tool="rocprofv3", tool_version=None,
                    time_base="session", origin_ns=None, metadata=meta)


def _record(b: TraceBuilder, path: str, p: int, section: str, kind: str, i: int, raw: bytes,
            pid, devices: dict, symbols: dict, names: dict) -> None:
    where = _where(p, section, i)
    rec = msgspec.json.decode(raw)
    if not isinstance(rec, dict):
        raise FormatError(path, where, "a record object", kind="schema")
    if jsonstrict.approx_key_count(raw) != rocprof_json.count_keys(rec) or _WS_COLON.search(raw):
        jsonstrict.find_duplicate_key(raw, path, where)  # exact, slow
    r = _Rec(path, where, rec)
    start, end = r.ns("start_timestamp"), r.ns("end_timestamp")
    if end < start:
        raise r.fail("end_timestamp", f"end_timestamp >= start_timestamp (a non-negative "
                     f"duration); got {end} < {start}")
    corr = r.opt_int("correlation_id.internal")
    tid = r.opt_int("thread_id")
    device = stream = mangled = None
    if kind == "kernel":
        agent = r.handle("dispatch_info.agent_id")
        if agent not in devices:
            raise r.fail("dispatch_info.agent_id", f"the id of an agent in this process's "
                         f"agents list; got handle {agent}")
        device = devices[agent]
        stream = r.handle("dispatch_info.queue_id", required=False)
        kid = r.get("dispatch_info.kernel_id")
        sym = symbols.get(kid) if type(kid) is int else None
        name = _kernel_name(sym) if sym is not None else None
        if name is None:
            raise r.fail("dispatch_info.kernel_id", f"the kernel_id of a named entry of "
                         f"kernel_symbols; got {kid!r}")
        mangled = sym.get("kernel_name") if isinstance(sym.get("kernel_name"), str) else None
        mangled = None if mangled == name else mangled
    else:
        _, name = _op_name(names, section, r)
        if kind == "memcpy":
            for key in ("dst_agent_id", "src_agent_id"):
                h = r.handle(key, required=False)
                if devices.get(h) is not None:
                    device = devices[h]
                    break
    if len(name) > trace.MAX_NAME:
        raise r.fail("name", f"a name of at most {trace.MAX_NAME} characters; got {len(name)}")
    b.event(kind, section, name, start, end - start, mangled_name=mangled, device=device,
            stream=stream, pid=pid, tid=tid, correlation=corr, args_json=raw.decode())


def rebuild(con, run_id: str) -> list[dict[str, list]]:
    """Per process (in file order), its read ``buffer_records`` sections, every record as
    written (decoded JSON)."""
    run, events = fetch_run(con, run_id)
    procs = json.loads(run["metadata"])["processes"]
    out: list[dict[str, list]] = [{} for _ in procs]
    by_pid = {str(m["pid"]): k for k, m in enumerate(procs) if m.get("pid") is not None}
    for e in events:
        k = by_pid.get(e["pid"], 0)
        out[k].setdefault(e["category"], []).append(json.loads(e["args"]))
    return out

