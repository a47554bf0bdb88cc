"""PyTorch profiler (Kineto) Chrome-trace JSON: ``*.pt.trace.json`` (gzip undone by the registry).

A document ``{"schemaVersion": …, "deviceProperties": [...], "distributedInfo": {...},
"traceEvents": [...], "baseTimeNanoseconds": …, …}``. Every complete event (``ph: "X"``) is
validated; its kind comes from ``cat`` (case-insensitive: ``kernel``, ``gpu_memcpy``,
``gpu_memset``, ``cuda_runtime``/``cuda_driver`` (and the XPU, MTIA and PrivateUse1 runtimes),
``cpu_op``/``Operator``, ``user_annotation``,
``gpu_user_annotation``, ``cuda_sync``, else ``other``) and every one (but a CPU-side range
that never ended, counted in ``metadata.unended``: :mod:`.kineto_columns`) is a row of
``raw.trace_events`` (the CPU side too: operators, annotations, their thread, times and
verbatim ``args`` with input shapes and ``External id``), ``event_idx`` being its position in
``traceEvents``. Other phases (flows, metadata, instants, counters) are counted in
``trace_runs.metadata`` (``phases``) and stay in the archived bytes. A Chrome trace of another
tool (JAX/XLA, a TensorFlow timeline, Chrome/Perfetto) is refused naming the rule: a Kineto
trace has a document key only Kineto writes (:data:`KINETO_KEYS`) or a complete event of a
Kineto category (:meth:`HeaderFacts.require_kineto`).

Times: ``ts``/``dur`` are microseconds written as JSON numbers with up to three decimals (ns);
they are read from their text, exactly, into integer ns (a float64 cannot hold the 19 digits of
an absolute epoch ``ts``). With ``baseTimeNanoseconds`` the ``ts`` are relative to it
(``time_base`` relative, ``origin_ns`` = that value); without it, ``ts`` of 10^15 us or more
are epoch times, smaller ones relative to an unknown origin.

Kept per event: ``ph, cat, name, pid, tid, ts, dur, args`` (the fields Kineto writes on
complete events); ``args`` verbatim (integers above int64 stay text). Document metadata kept
in ``trace_runs.metadata``: schema and library versions, ``distributedInfo`` (scrubbed),
``displayTimeUnit``, ``baseTimeNanoseconds``; never user names, host names, job environments
or log lines.

``raw.trace_jobs`` (:data:`JOBS`, a Kineto table no parser writes): the loader's record of a run
that is one rank file of a distributed job (``warehouse.ingesting.jobs``).
"""

from __future__ import annotations

import datetime as dt
import gc
import json
import re
from typing import Annotated

import msgspec
import pyarrow as pa

from warehouse.errors import FormatError
from warehouse.ingesting import jsonstrict
from warehouse.ingesting.formats import kineto_scan, trace
from warehouse.ingesting.formats.base import Parsed, Table
from warehouse.ingesting.formats.kineto_columns import _NO, Columns, _text, colons, constant

NAME = "kineto_trace"
PARSER_VERSION = "kineto_trace/3"  # 2: every complete event kept (the CPU side); 3: the capture
# time is the base plus the first event (the base is floored to 3 months), XPU/MTIA/privateuse1
# launches, unended operators of PyTorch < 1.13 skipped; a CPU-only trace's time base and
# clock from its first event
KIND = "json"
# One row per run ingested as a rank of a distributed job. Written by the loader with the run's
# identity (the job is named by the user, a sidecar or the folder, never by the file's bytes
# alone), in the run's own transaction; ``pwh rederive`` keeps it like the manifest row.
JOBS = Table(
    "trace_jobs",
    (
        ("run_id", "VARCHAR", "run: one rank file of the job (= raw.files.sha256)"),
        ("job", "VARCHAR", "the job's name: pwh ingest --job, the sidecar's job, or the folder "
         "of rank files (docs/formats.md, 'Jobs of many ranks')"),
        ("rank", "BIGINT", "the file's distributedInfo.rank (0 <= rank < world_size)"),
        ("world_size", "BIGINT", "the file's distributedInfo.world_size: ranks of the whole job "
         "(a job may hold only some of them)"),
        ("job_source", "VARCHAR", "where the job name came from: cli, sidecar or folder"),
    ),
    ("run_id",),
    "one row per Kineto run ingested as one rank of a distributed job (job, rank, world_size)",
)
TABLES = (*trace.TABLES, JOBS)
TOOL = "PyTorch Profiler (Kineto)"
STREAM = True  # huge files go through kineto_stream (warehouse.ingesting.trace_stream)

Name = Annotated[str, msgspec.Meta(max_length=trace.MAX_NAME)]
EPOCH_MIN_US = 10**15  # ts at or above this (2001-09-09) are absolute epoch microseconds




class Event(msgspec.Struct, gc=False, omit_defaults=True):
    ph: Name | None = None
    cat: Name | None = None
    name: Name | None = None
    pid: msgspec.Raw = _NO
    tid: msgspec.Raw = _NO
    ts: msgspec.Raw = _NO
    dur: msgspec.Raw = _NO
    args: msgspec.Raw = _NO
    id: msgspec.Raw = _NO
    bp: msgspec.Raw = _NO
    s: msgspec.Raw = _NO


class Header(msgspec.Struct):
    """The document without its events (their key is typed below, the rest kept as Raw)."""

    schemaVersion: msgspec.Raw = _NO  # noqa: N815 - the file's own key
    deviceProperties: list[dict[str, msgspec.Raw]] | None = None  # noqa: N815
    distributedInfo: dict[str, msgspec.Raw] | None = None  # noqa: N815
    baseTimeNanoseconds: int | None = None  # noqa: N815


class Doc(msgspec.Struct):
    traceEvents: list[Event]  # noqa: N815


_EVENTS_DECODER = msgspec.json.Decoder(list[Event])

_META_KEYS = re.compile(r"\A(schemaVersion|displayTimeUnit|baseTimeNanoseconds|record_shapes|"
                        r"distributedInfo|[A-Za-z_]*_version)\Z")
# document keys only Kineto writes (schemaVersion since PyTorch 1.8: pytorch/kineto#105 shows a
# 1.8 trace opening with it; HTA's reduced test traces keep distributedInfo only)
KINETO_KEYS = frozenset(("schemaVersion", "deviceProperties", "distributedInfo",
                         "baseTimeNanoseconds", "traceName"))
# PaddlePaddle's profiler writes a Kineto look-alike (schemaVersion, deviceProperties, cat
# Operator/Kernel/Memcpy) opened by this key (paddle/fluid/platform/profiler/
# chrometracing_logger.cc StartLog); its names end in their duration, "%s[%.3f ms]"
PADDLE_KEY = "span_indx"
_TRACE_KEY = re.compile(rb'"traceEvents"[ \t\r\n]*:')


# a value JSON has no spelling for, written bare by early Kineto (PyTorch 1.8): "memory bandwidth
# (GB/s)": inf of a 0-ns copy (pytorch/kineto#105), N/A unquoted (pytorch/kineto#131, #133)
_BARE = re.compile(rb'("[^"\\\n]{1,80}"[ \t\r\n]*:[ \t\r\n]*)(-?inf|-?nan|N/A)(?=[ \t\r\n]*[,}\]])')


# a backslash that starts no JSON escape (after an even run of backslashes): a Windows path
# written unescaped ("C:\Users\me\train.py(12): <module>"), as PyTorch on Windows wrote
# python_function names and call stacks before pytorch/kineto#754 (pytorch/pytorch#60187,
# #92988, #104841)
_BAD_ESCAPE = re.compile(rb'(?<!\\)(?:\\\\)*\\[^"\\/bfnrtu]')


def explain(exc: FormatError, text) -> FormatError:
    """``exc`` (malformed JSON found in ``text``) with the reason named when ``text`` holds a
    bare ``inf``/``nan``/``N/A`` value or an unescaped Windows path, the known defects of
    Kineto's writer; else ``exc``."""
    if exc.kind != "malformed":
        return exc
    m = _BARE.search(text)
    if m is None:
        w = _BAD_ESCAPE.search(text)
        if w is None:
            return exc
        shown = bytes(text[max(w.start() - 40, 0):w.end() + 20]).decode("utf-8", "replace")
        return FormatError(exc.path, exc.json_path, f"{exc.expected}; the file writes a "
                           f"backslash that starts no JSON escape (...{shown}...): PyTorch on "
                           "Windows wrote file paths unescaped in python_function names and "
                           "call stacks (pytorch/pytorch#60187, #92988; fixed by "
                           "pytorch/kineto#754); double those backslashes to ingest the file",
                           kind="malformed")
    shown = bytes(m.group(0)).decode("utf-8", "replace")
    return FormatError(exc.path, exc.json_path, f"{exc.expected}; the file writes a bare "
                       f"{m.group(2).decode()!r} ({shown}), a value JSON cannot spell: early Kineto "
                       "(PyTorch 1.8) wrote these (pytorch/kineto#105, #131); quote the value to "
                       "ingest the file", kind="malformed")


def sniff(head: bytes, path: str) -> bool:
    """A JSON object with a top-level ``traceEvents`` key (seen in the first MiB)."""
    return head.lstrip(b" \t\r\n")[:1] == b"{" and _TRACE_KEY.search(head) is not None


def exact_key_check() -> bool:
    """Check the events msgspec decoded for duplicate keys exactly (every object, at every
    depth), not by counting? Yes where the compiled scanner runs: msgspec then only sees the
    rare chunks it declined. (The count proves it for the objects msgspec decodes and for
    ``args``, not for objects nested in other verbatim values: ``"pid": {"a": 1, "a": 2}``.)"""
    return kineto_scan.available()


def keys_match(chunk: bytes, cols: Columns, before: tuple[int, int]) -> bool:
    """Did the events :meth:`Columns.add` just decoded from ``chunk`` (a JSON array of
    events) keep every key written in it, i.e. no event repeats a key (msgspec keeps the last
    one silently) or has a key the schema does not know? ``before``: ``(cols.keys,
    cols.colons)`` before the call.

    Without a backslash in the chunk, every string decoded from it re-encodes to the same
    text, so the chunk has exactly as many colons as the re-encoded events plus one per key
    that was dropped (each repeated or unknown key adds its own colon, and whatever colons its
    name and value hold): equal colon counts prove there was none, blanks and all. With a
    backslash (an escape could spell a colon), quotes before colons are counted instead
    (:func:`jsonstrict.keys_counted`: a blank before a colon also sends the chunk to the exact
    check)."""
    if b"\\" not in chunk:
        return colons(chunk) == cols.colons - before[1]
    return jsonstrict.keys_counted(chunk) == cols.keys - before[0]


# ------------------------------------------------------------------ exact times


def ns(raw, path: str, where, *, negative: bool = False) -> int:
    """Integer ns of a JSON number of microseconds, from its text. ``where``: the JSON path,
    or a function returning it (built only for an error)."""
    b = bytes(raw)
    if b[:1] != b"-":
        i = b.find(b".")
        try:
            if i < 0:
                v = int(b) * 1000
            elif len(b) - i <= 4:
                v = int(b[:i]) * 1000 + int(b[i + 1:].ljust(3, b"0"))
            else:
                v = -1
            if 0 <= v < 1 << 63:
                return v
        except ValueError:
            pass
    return trace.decimal_ns(b, path, where() if callable(where) else where, negative=negative)


# ------------------------------------------------------------------ document header


class HeaderFacts:
    """Run and device rows from the document's top-level keys (everything but traceEvents)."""

    def __init__(self, top: dict[str, msgspec.Raw], path: str):
        self.path = path
        hdr: Header = jsonstrict.decode(msgspec.json.encode(top), Header, path)
        self.base_ns = hdr.baseTimeNanoseconds
        if self.base_ns is not None and not 0 <= self.base_ns < 2**63:
            raise FormatError(path, "$.baseTimeNanoseconds", "ns since 1970 within BIGINT")
        rank = (hdr.distributedInfo or {}).get("rank")
        self.rank = _text(rank)
        self.version = _text(hdr.schemaVersion)
        meta = {}
        for k, v in top.items():
            if k != "traceEvents" and _META_KEYS.match(k):
                meta[k] = json.loads(bytes(v))
        self.metadata = trace.scrub(meta)
        self.devices = []
        for i, d in enumerate(hdr.deviceProperties or []):
            if "id" not in d:
                raise FormatError(path, f"$.deviceProperties[{i}]", "a device with an id")
            name = d.get("name")
            self.devices.append((_text(d["id"]), _text(name) if name is not None else None,
                                 json.dumps({k: json.loads(bytes(v)) for k, v in d.items()})))
        for k, v in top.items():  # small: checked exactly (e.g. a device listing "id" twice)
            if k != "traceEvents":
                jsonstrict.find_duplicate_key(bytes(v), path, f"$.{k}")
        self.kineto_keys = sorted(KINETO_KEYS.intersection(top))
        self.paddle = PADDLE_KEY in top
        self.keys = len(top) - ("traceEvents" in top) + sum(
            jsonstrict.approx_key_count(bytes(v)) for k, v in top.items() if k != "traceEvents")

    def require_kineto(self, cols: Columns) -> None:
        """Refuse a Chrome trace that is not the PyTorch profiler's: events, but neither a
        document key only Kineto writes nor one complete event of a Kineto category (a
        Chrome/Perfetto trace of another program, a JAX/XLA or TensorFlow timeline: read as
        Kineto it would be a run with 0 kernels, its GPU work unseen)."""
        if self.paddle:
            raise FormatError(self.path, "$", "a PyTorch profiler (Kineto) trace; this is "
                              f"PaddlePaddle's profiler trace (document key {PADDLE_KEY}): its "
                              "event names carry their own duration ('gemm[0.012 ms]', every "
                              "call a name of its own) and its launches pair by 'correlation "
                              "id', so read as Kineto its kernels would not add up; not read",
                              kind="unknown_format")
        if cols.index == 0 or self.kineto_keys or set(cols.kinds) - {"other"}:
            return
        raise FormatError(self.path, "$", "a PyTorch profiler (Kineto) trace: a document key "
                          f"Kineto writes ({', '.join(sorted(KINETO_KEYS))}) or a complete "
                          "event of a Kineto category (kernel, gpu_memcpy, cuda_runtime, cpu_op, "
                          f"user_annotation, ...); this Chrome trace has neither ({cols.index} "
                          "events): a trace of another tool (Chrome/Perfetto, JAX/XLA, "
                          "TensorFlow timeline), not read", kind="unknown_format")

    def tables(self, cols: Columns) -> tuple[pa.Table, pa.Table]:
        """``(trace_runs, trace_devices)`` batches without run_id (the document refused when
        it is not a Kineto trace: :meth:`require_kineto`)."""
        self.require_kineto(cols)
        first = self.first_start(cols)
        if self.base_ns is not None:
            time_base, origin = "relative", self.base_ns
        elif first is not None and first >= EPOCH_MIN_US * 1000:
            time_base, origin = "epoch", 0
        else:
            time_base, origin = "relative", None
        meta = dict(self.metadata)
        meta["phases"] = dict(sorted(cols.phases.items(), key=lambda kv: str(kv[0])))
        meta["kinds"] = dict(sorted(cols.kinds.items()))
        if cols.unended:
            meta["unended"] = dict(sorted(cols.unended.items()))
        runs = trace.RUNS.batch({
            "source_format": [NAME], "tool": [TOOL], "tool_version": [self.version],
            "time_base": [time_base], "origin_ns": [origin], "aggregated": [False],
            "event_count": [cols.rows], "metadata": [json.dumps(meta, sort_keys=True)],
        })
        devs = trace.DEVICES.batch({
            "device": [d[0] for d in self.devices], "name": [d[1] for d in self.devices],
            "properties": [d[2] for d in self.devices],
        })
        return runs, devs

    @staticmethod
    def first_start(cols: Columns) -> int | None:
        """The ``ts`` (ns) the time base and the clock are judged on: the first GPU/runtime
        event's, or in a trace without one (CPU-only: torch.profiler with activities=[CPU]) the
        first complete event's."""
        return cols.min_start if cols.min_start is not None else cols.min_any

    def captured_at(self, cols: Columns) -> dt.datetime | None:
        """The file's own clock: the first GPU/runtime event (the first event of a CPU-only
        trace, :meth:`first_start`), its ``ts`` relative to baseTimeNanoseconds (libkineto's
        ChromeTraceBaseTime floors that base to a 3-month interval, 7,889,238 s, so the base
        alone is up to 3 months early) or epoch time; the base alone when no event has a
        time."""
        t, first = self.base_ns, self.first_start(cols)
        if t is not None:  # ts relative to the base (as tables() says: time_base 'relative')
            t += first or 0
        elif first is not None and first >= EPOCH_MIN_US * 1000:
            t = first
        if t is None:
            return None
        return dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=t // 1000)


# ------------------------------------------------------------------ whole document


def parse(data: bytes, path: str, run_id: str) -> Parsed:
    gc_was = gc.isenabled()
    gc.disable()
    try:
        try:
            top = jsonstrict.decode(data, dict[str, msgspec.Raw], path)
        except FormatError as exc:
            raise explain(exc, data) from None
        jsonstrict.require_utf8(data, path)  # inside the values kept verbatim too
        if "traceEvents" not in top:
            raise FormatError(path, "$", "a Kineto trace with a traceEvents array")
        head = HeaderFacts(top, path)
        raw_events = top["traceEvents"]
        del top
        cols = Columns(path, head.rank, count_keys=True)
        if not kineto_scan.add_chunk(cols, raw_events):  # compiled; else msgspec:
            try:
                events = _EVENTS_DECODER.decode(raw_events)
            except msgspec.MsgspecError:
                events = jsonstrict.decode(data, Doc, path).traceEvents  # the error, located
            cols.add(events, raw_events)
            del events
            if exact_key_check():
                jsonstrict.find_duplicate_key(bytes(raw_events), path)  # as below: "$"
        del raw_events
        expected = head.keys + cols.keys + 1  # + the traceEvents key itself
        jsonstrict.check_no_duplicate_keys(data, expected, path)
        ev = cols.batch()
        runs, devs = head.tables(cols)
        tables = {}
        for t, b in ((trace.RUNS, runs), (trace.DEVICES, devs), (trace.EVENTS, ev),
                     (trace.SUMMARIES, trace.SUMMARIES.batch(
                         {c: [] for c, _, _ in trace.SUMMARIES.columns if c != "run_id"}))):
            tables[t.name] = b.add_column(0, pa.field("run_id", pa.string()),
                                          constant(run_id, b.num_rows))
        return Parsed(NAME, PARSER_VERSION, tables,
                      {"events": cols.rows, "kernels": cols.kinds.get("kernel", 0),
                       "devices": devs.num_rows},
                      captured_at=head.captured_at(cols))
    finally:
        if gc_was:
            gc.enable()


# ------------------------------------------------------------------ lossless round trip


def _num(ns_value: int) -> int | float | str:
    """The microsecond number Kineto writes for ``ns_value`` (as JSON text when fractional)."""
    if ns_value % 1000 == 0:
        return ns_value // 1000
    sign = "-" if ns_value < 0 else ""
    q, r = divmod(abs(ns_value), 1000)
    return f"{sign}{q}.{r:03d}".rstrip("0")


def rebuild(con, run_id: str) -> list[dict]:
    """The complete events (``ph: "X"``) of ``run_id`` as the file wrote them, from raw rows.

    ``ts``/``dur`` come back as exact decimal text (compare with the file's numbers read as
    decimals); pid/tid as ints where they are integers; args parsed from the verbatim text.
    """
    out = []
    for cat, name, pid, tid, start, dur, args in con.execute(
        "select category, name, pid, tid, start_ns, dur_ns, args::varchar from raw.trace_events "
        "where run_id = ? order by event_idx", [run_id]
    ).fetchall():
        e = {"ph": "X", "cat": cat, "name": name, "pid": _intish(pid), "tid": _intish(tid),
             "ts": _num(start), "dur": _num(dur)}
        if args is not None:
            e["args"] = json.loads(args)
        out.append(e)
    return out


def _intish(v: str | None):
    if v is not None and re.fullmatch(r"-?\d+", v):
        return int(v)
    return v
