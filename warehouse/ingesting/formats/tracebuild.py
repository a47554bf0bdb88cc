"""Assembling the four trace raw tables (``trace.TABLES``) row by row.

Used by the Nsight Systems and rocprof parsers: they read rows in their own way and hand them
here; this module owns the column order, the JSON encoding of ``args`` / ``extra`` /
``metadata`` and the per-run summary counts. Events are kept as Python lists only up to
``FLUSH_ROWS`` at a time: then they become an Arrow table (a few times smaller than the
Python objects), so a parser that hands rows over in batches (the nsys SQLite export) never
holds a big file's events as Python objects.
"""

from __future__ import annotations

from typing import Any

import msgspec
import pyarrow as pa

from warehouse.ingesting.formats import trace
from warehouse.ingesting.formats.base import Parsed

_EVENT_COLS = [c for c, _, _ in trace.EVENTS.columns if c != "run_id"]
_SUMMARY_COLS = [c for c, _, _ in trace.SUMMARIES.columns if c != "run_id"]
FLUSH_ROWS = 1 << 14  # events held as Python objects before they become Arrow (16 Ki: a
# big export's parse then holds ~55 MiB, not ~220 MiB, of rows on the way)

def dumps(obj: Any) -> str:
    """JSON text of ``obj`` (dict key order kept as inserted; bytes as hex)."""
    return msgspec.json.encode(obj, enc_hook=_hook).decode()


def _hook(obj):
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return bytes(obj).hex()
    raise TypeError(f"cannot encode {type(obj).__name__}")


_encoder = msgspec.json.Encoder()


def _encode_many(objs: list[dict]) -> list[str]:
    """JSON text of each object (one encoder call: JSON lines never hold a raw newline)."""
    if not objs:
        return []
    return _encoder.encode_lines(objs).decode().split("\n")[:-1]


class TraceBuilder:
    """Collects events, per-kernel summaries and devices of one run; ``parsed()`` builds tables."""

    def __init__(self, run_id: str):
        self.run_id = run_id
        self.events: dict[str, list] = {c: [] for c in _EVENT_COLS}
        self.summaries: dict[str, list] = {c: [] for c in _SUMMARY_COLS}
        self.devices: dict[str, tuple[str | None, str | None]] = {}
        self.kinds: dict[str, int] = {}
        self._flushed: list[pa.Table] = []  # events already converted, in order
        self._n_flushed = 0
        self._event_devices: set[str] = set()

    @property
    def event_count(self) -> int:
        return self._n_flushed + len(self.events["event_idx"])

    def _maybe_flush(self) -> None:
        if len(self.events["event_idx"]) >= FLUSH_ROWS:
            self._flush()

    def _flush(self) -> None:
        """The events gathered so far as an Arrow table; the Python lists start again."""
        e = self.events
        n = len(e["event_idx"])
        if not n:
            return
        self._event_devices.update(d for d in set(e["device"]) if d is not None)
        self._flushed.append(trace.EVENTS.arrow({"run_id": [self.run_id] * n, **e}))
        self._n_flushed += n
        self.events = {c: [] for c in _EVENT_COLS}

    def take_flushed(self) -> list[pa.Table]:
        """The event tables converted so far, handed over (a streaming reader sends them on
        as they come); :meth:`parsed` then holds only the later ones. ``event_idx`` and the
        counts go on over all events."""
        out, self._flushed = self._flushed, []
        return out

    def event(self, kind: str, category: str, name: str, start_ns: int, dur_ns: int, *,
              mangled_name: str | None = None, device=None, stream=None, rank=None, pid=None,
              tid=None, correlation: int | None = None, args: dict | None = None,
              args_json: str | None = None) -> None:
        """One timed event; ``args`` is encoded as JSON, ``args_json`` is already JSON text."""
        assert kind in trace.KINDS
        e = self.events
        e["event_idx"].append(self.event_count)
        e["kind"].append(kind)
        e["category"].append(category)
        e["name"].append(name)
        e["mangled_name"].append(mangled_name)
        e["device"].append(None if device is None else str(device))
        e["stream"].append(None if stream is None else str(stream))
        e["rank"].append(None if rank is None else str(rank))
        e["pid"].append(None if pid is None else str(pid))
        e["tid"].append(None if tid is None else str(tid))
        e["start_ns"].append(start_ns)
        e["dur_ns"].append(dur_ns)
        e["correlation"].append(correlation)
        e["args"].append(args_json if args is None else dumps(args))
        self.kinds[kind] = self.kinds.get(kind, 0) + 1
        self._maybe_flush()

    def events_bulk(self, kind: str | list[str], category: list[str], name: list[str], start_ns: list[int],
                    dur_ns: list[int], args: list[dict] | None, *,
                    args_json: list[str] | None = None, **optional: list | None) -> None:
        """Many events at once (one ``kind`` for all, or one per event), column by column (the fast path of big files);
        ``optional`` columns (``device``, ``stream``, ``pid``, ``tid``, ``correlation``, …)
        are lists of strings / ints or ``None`` for all-null. ``args_json``: the ``args``
        already as JSON text."""
        n = len(name)
        kinds = [kind] * n if isinstance(kind, str) else kind
        assert len(kinds) == n and set(kinds) <= set(trace.KINDS)
        e = self.events
        first = self.event_count
        e["event_idx"].extend(range(first, first + n))
        e["kind"].extend(kinds)
        e["category"].extend(category)
        e["name"].extend(name)
        e["start_ns"].extend(start_ns)
        e["dur_ns"].extend(dur_ns)
        e["args"].extend(_encode_many(args) if args is not None else args_json)
        for col in ("mangled_name", "device", "stream", "rank", "pid", "tid", "correlation"):
            vals = optional.get(col)
            e[col].extend([None] * n if vals is None else vals)
        for k in set(kinds):
            self.kinds[k] = self.kinds.get(k, 0) + kinds.count(k)
        self._maybe_flush()

    def summary(self, name: str, calls: int, total_ns: int, *, device=None,
                min_ns: int | None = None, max_ns: int | None = None,
                extra: dict | None = None) -> None:
        s = self.summaries
        s["row_idx"].append(len(s["row_idx"]))
        s["name"].append(name)
        s["device"].append(None if device is None else str(device))
        s["calls"].append(calls)
        s["total_ns"].append(total_ns)
        s["min_ns"].append(min_ns)
        s["max_ns"].append(max_ns)
        s["extra"].append(None if extra is None else dumps(extra))

    def device(self, device, name: str | None = None, properties: dict | None = None) -> None:
        key = str(device)
        old = self.devices.get(key)
        if old is None or (old[0] is None and name is not None):
            self.devices[key] = (name, None if properties is None else dumps(properties))

    def parsed(self, source_format: str, parser_version: str, *, tool: str,
               tool_version: str | None, time_base: str, origin_ns: int | None,
               metadata: dict, aggregated: bool | None = None) -> Parsed:
        """The four raw tables; ``aggregated`` (per-kernel summaries, not events) defaults to
        whether summaries were added (a summary format with no rows passes ``True``)."""
        assert time_base in trace.TIME_BASES
        if aggregated is None:
            aggregated = bool(self.summaries["row_idx"])
        self._flush()
        for dev in sorted(self._event_devices) + self.summaries["device"]:
            if dev is not None and dev not in self.devices:
                self.devices[dev] = (None, None)
        n_events = self._n_flushed
        runs = trace.RUNS.arrow({
            "run_id": [self.run_id], "source_format": [source_format], "tool": [tool],
            "tool_version": [tool_version], "time_base": [time_base], "origin_ns": [origin_ns],
            "aggregated": [aggregated], "event_count": [n_events], "metadata": [dumps(metadata)],
        })
        devs = sorted(self.devices.items())
        devices = trace.DEVICES.arrow({
            "run_id": [self.run_id] * len(devs), "device": [d for d, _ in devs],
            "name": [v[0] for _, v in devs], "properties": [v[1] for _, v in devs],
        })
        events = (pa.concat_tables(self._flushed) if self._flushed
                  else trace.EVENTS.arrow({"run_id": [], **self.events}))
        n_sum = len(self.summaries["row_idx"])
        summaries = trace.SUMMARIES.arrow({"run_id": [self.run_id] * n_sum, **self.summaries})
        summary = {"kernels": (sum(self.summaries["calls"]) if aggregated
                               else self.kinds.get("kernel", 0))}
        for k in ("memcpy", "memset", "runtime", "annotation", "sync", "other"):
            if self.kinds.get(k):
                summary[k] = self.kinds[k]
        if aggregated:
            summary["kernel summaries"] = n_sum
        return Parsed(source_format, parser_version, {
            trace.RUNS.name: runs, trace.DEVICES.name: devices, trace.EVENTS.name: events,
            trace.SUMMARIES.name: summaries,
        }, summary)


def fetch_run(con, run_id: str) -> tuple[dict, list[dict]]:
    """``(trace_runs row, trace_events rows in file order)`` of one run, for ``rebuild``."""
    cur = con.execute("select * from raw.trace_runs where run_id = ?", [run_id])
    cols = [d[0] for d in cur.description]
    row = cur.fetchall()
    if not row:
        raise KeyError(f"no trace run {run_id}")
    run = dict(zip(cols, row[0], strict=True))
    cur = con.execute("select * from raw.trace_events where run_id = ? order by event_idx",
                      [run_id])
    cols = [d[0] for d in cur.description]
    events = [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]
    return run, events


def fetch_summaries(con, run_id: str) -> list[dict]:
    cur = con.execute("select * from raw.trace_kernel_summaries where run_id = ? "
                      "order by row_idx", [run_id])
    cols = [d[0] for d in cur.description]
    return [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]
