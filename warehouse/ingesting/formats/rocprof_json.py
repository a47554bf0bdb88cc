"""rocprof v1 ``results.json``: a Chrome trace written by rocprof's ``tblextr``.

Recognised by its opening, ``{ "traceEvents":[{}`` (rocprof starts the event array with an empty
object), never by the file name. Process-name metadata events (``ph: "M"``,
``name: "process_name"``) label each ``pid``: ``GPU<n>`` lanes carry kernel dispatches
(``GPU Barriers<n>`` barrier packets are "other"), ``COPY`` memory copies, ``CPU HIP API`` /
``CPU HSA API`` runtime calls (older versions number the lanes: ``0 GPU0``, ``1 COPY``; parser
``rocprof_json/2`` reads them, ``/1`` took such lanes for "other": ``pwh rederive``).
With ``--timestamp on --hip-trace`` rocprof writes every dispatch twice (from its dispatch
table, ``args.KernelName``, and from the HIP activity table, ``args.dev-id``): the HIP-traced
ones are the kernels, as in rocprof's own stats. ``ts`` and ``dur`` are strings truncated to
whole microseconds: durations come from ``args.DurationNs`` and starts from
``args.BeginNs`` (exact integer ns); a kernel without ``args.DurationNs`` is refused. Events
of other kinds without them fall back to the µs fields (whole µs, exact). ``otherData``
(``rocminfo`` output of the machine) stays out of the raw tables but for the agents' names
and types: the n-th GPU agent names device ``n`` (rocprof's ``gpu-id``).
A file whose only events are metadata is a valid run with 0 kernels.

No correlation id: ``tblextr``'s ``dump_json`` leaves the ``Index`` column (a HIP call's
correlation id, which ``results.db`` keeps) out of every event's ``args``; the call-to-dispatch
link exists only as ``dep`` flow events (``ph`` ``s``/``t``, a counter ``id``, whole-µs ``ts``),
which are not read. Runtime rows and kernels keep ``correlation`` NULL (docs/formats.md).
"""

from __future__ import annotations

import json
import re

import msgspec

from warehouse.errors import FormatError
from warehouse.ingesting import jsonstrict
from warehouse.ingesting.formats import trace, tracecsv
from warehouse.ingesting.formats.base import Parsed
from warehouse.ingesting.formats.tracebuild import TraceBuilder, fetch_run

NAME = "rocprof_json"
PARSER_VERSION = "rocprof_json/2"
KIND = "json"
TABLES = trace.TABLES

_OPENING = re.compile(rb'\A\s*\{\s*"traceEvents"\s*:\s*\[\s*\{\s*\}')
_GPU = re.compile(r"GPU\s*(\d+)", re.I)
# older tblextr numbers its lanes in the order written: "0 GPU0", "1 COPY", "2 CPU HIP API"
_SECTION = re.compile(r"\d+\s+")
_DEC_US = re.compile(r"[0-9]+(?:\.[0-9]{1,3})?")


class Doc(msgspec.Struct):
    traceEvents: list[msgspec.Raw]
    otherData: dict[str, msgspec.Raw] | None = None


def sniff(head: bytes, path: str) -> bool:
    return bool(_OPENING.match(head))


def _lane(label: str) -> str:
    """A lane label without the section number older rocprof puts before it."""
    label = label.strip()
    m = _SECTION.match(label)
    return label[m.end():] if m and m.end() < len(label) else label


def _lane_kind(label: str | None) -> str:
    """Event kind of a rocprof lane: ``GPU<n>`` kernels (not ``GPU Barriers<n>``), ``COPY``
    copies, ``CPU HIP API`` / ``CPU HSA API`` runtime calls, anything else (markers) other."""
    if label is None:
        return "other"
    label = _lane(label)
    if _GPU.fullmatch(label):
        return "kernel"
    up = label.strip().upper()
    if up == "COPY":
        return "memcpy"
    if "API" in up.split() or up in ("HIP", "HSA", "KFD"):
        return "runtime"
    return "other"


def _str(v) -> str | None:
    return v if isinstance(v, str) else (str(v) if isinstance(v, int) else None)


class _Ev:
    """Field access on one event with errors naming its JSON path."""

    def __init__(self, path: str, idx: int, ev: dict):
        self.path, self.idx, self.ev = path, idx, ev

    def loc(self, key: str) -> str:
        return f"$.traceEvents[{self.idx}].{key}"

    def ns_arg(self, key: str) -> int | None:
        args = self.ev.get("args")
        v = args.get(key) if isinstance(args, dict) else None
        if v is None:
            return None
        s = v if isinstance(v, str) else (str(v) if type(v) is int else None)
        if s is None:
            raise FormatError(self.path, self.loc(f"args.{key}"),
                              f"an integer of ns (string or number); got {v!r}", kind="schema")
        return tracecsv.exact_int(s, self.path, self.loc(f"args.{key}"))

    def us_field(self, key: str) -> int:
        v = self.ev.get(key)
        s = v if isinstance(v, str) else (str(v) if type(v) is int else None)
        if s is None or not _DEC_US.fullmatch(s.strip()):
            raise FormatError(self.path, self.loc(key),
                              f"a non-negative decimal number of µs; got {v!r}", kind="schema")
        whole, _, frac = s.strip().partition(".")
        return int(whole) * 1000 + int((frac + "000")[:3])


_WS_COLON = re.compile(rb'"[ \t\r\n]+:')


def count_keys(obj) -> int:
    """Object keys in a decoded JSON value (a duplicate key makes the text count higher)."""
    if isinstance(obj, dict):
        return len(obj) + sum(count_keys(v) for v in obj.values() if isinstance(v, dict | list))
    if isinstance(obj, list):
        return sum(count_keys(v) for v in obj if isinstance(v, dict | list))
    return 0


def _both_sources(events: list, lanes: dict[str, str]) -> bool:
    seen = set()
    for ev, _ in events:
        if ev.get("ph") == "X" and _lane_kind(lanes.get(_str(ev.get("pid")))) == "kernel":
            args = ev.get("args")
            if isinstance(args, dict):
                seen.add("kern" if "KernelName" in args else "ops" if "dev-id" in args else "")
    return {"kern", "ops"} <= seen


def parse(data: bytes, path: str, run_id: str) -> Parsed:
    doc = jsonstrict.decode(data, Doc, path)
    # otherData (rocminfo) repeats keys in real files: only events are checked for duplicates.
    lanes: dict[str, str] = {}
    events: list[dict] = []
    for i, raw in enumerate(doc.traceEvents):
        ev = msgspec.json.decode(raw)
        if not isinstance(ev, dict):
            raise FormatError(path, f"$.traceEvents[{i}]", "an event object", kind="schema")
        events.append((ev, raw))
        if ev.get("ph") == "M" and ev.get("name") == "process_name":
            label = (ev.get("args") or {}).get("name") if isinstance(ev.get("args"), dict) else None
            if isinstance(label, str):
                lanes[_str(ev.get("pid"))] = label
    # rocprof --timestamp on --hip-trace writes each dispatch twice on the GPU lanes: from its
    # dispatch table (args.KernelName) and from the HIP activity table (args.dev-id), the one
    # rocprof's own results.stats.csv counts. Then the dispatch-table copies are kind "other".
    both = _both_sources(events, lanes)
    b = TraceBuilder(run_id)
    for i, (ev, raw) in enumerate(events):
        if ev.get("ph") != "X":
            continue
        e = _Ev(path, i, ev)
        raw_b = bytes(raw)
        if jsonstrict.approx_key_count(raw_b) != count_keys(ev) or _WS_COLON.search(raw_b):
            jsonstrict.find_duplicate_key(raw_b, path, f"$.traceEvents[{i}]")  # exact, slow
        name = ev.get("name")
        if not isinstance(name, str) or not name:
            raise FormatError(path, e.loc("name"), "a non-empty event name", kind="schema")
        if len(name) > trace.MAX_NAME:
            raise FormatError(path, e.loc("name"),
                              f"a name of at most {trace.MAX_NAME} characters; got {len(name)}",
                              kind="schema")
        pid = _str(ev.get("pid"))
        label = lanes.get(pid)
        kind = _lane_kind(label)
        args = ev.get("args") if isinstance(ev.get("args"), dict) else {}
        if kind == "other" and "DurationNs" in args and ("KernelName" in args
                                                         or "gpu-id" in args):
            kind = "kernel"
        if kind == "kernel" and both and "KernelName" in args:
            kind, label = "other", f"{label} (dispatch table copy of a HIP-traced kernel)"
        dur = e.ns_arg("DurationNs")
        begin, end = e.ns_arg("BeginNs"), e.ns_arg("EndNs")
        if dur is None and begin is not None and end is not None:
            if end < begin:
                raise FormatError(path, e.loc("args.EndNs"), "EndNs >= BeginNs", kind="schema")
            dur = end - begin
        if dur is None:
            if kind == "kernel":
                raise FormatError(
                    path, e.loc("args.DurationNs"),
                    "a kernel's exact duration in args.DurationNs (rocprof's dur is truncated "
                    "to whole µs)", kind="schema")
            dur = e.us_field("dur")
        start = begin if begin is not None else e.us_field("ts")
        device = None
        if kind == "kernel":
            m = _GPU.fullmatch(_lane(label or ""))
            device = m.group(1) if m else _str(args.get("gpu-id", args.get("dev-id")))
        b.event(kind, label or "", name, start, dur, device=device, pid=pid,
                tid=_str(ev.get("tid")), stream=_str(args.get("queue-id")),
                args_json=raw_b.decode())
    agents = {}
    for k, v in (doc.otherData or {}).items():
        m = re.fullmatch(r"Agent(\d+)\.(Name|MarketingName|DeviceType)", k)
        if m:
            agents.setdefault(m.group(1), {})[m.group(2)] = json.loads(bytes(v))
    # rocprof's gpu-id is the index of the GPU among rocminfo's agents (CPUs come first)
    gpus = [agents[k] for k in sorted(agents, key=int) if agents[k].get("DeviceType") == "GPU"]
    for d, agent in enumerate(gpus):
        b.device(str(d), agent.get("MarketingName") or agent.get("Name"), agent)
    meta = {"agents": agents, "otherData_keys": len(doc.otherData or {}),
            "lanes": {p: lab for p, lab in lanes.items() if p is not None}}
    return b.parsed(NAME, PARSER_VERSION, tool="rocprof", tool_version=None,
                    time_base="session", origin_ns=None, metadata=meta)


def rebuild(con, run_id: str) -> list[str]:
    """The timed (``ph: "X"``) events in file order, each one's JSON text exactly as written."""
    _, events = fetch_run(con, run_id)
    return [e["args"] for e in events]
