"""The raw tables every kernel-trace format writes: Kineto traces, Nsight Systems, rocprof.

One shape for all trace formats, so the staging models read one set of tables whatever tool
wrote the file; ``raw.files.source_format`` (and ``trace_runs.source_format``) says which. Each
trace format module (``kineto.py``, ``nsys_sqlite.py``, ``nsys_csv.py``, ``rocprof_*.py``)
exposes ``NAME``, ``PARSER_VERSION``, ``TABLES = trace.TABLES``, ``sniff(head, path) -> bool``
(content only: the first bytes of the file, gzip already undone), ``parse(data, path, run_id)
-> Parsed`` (one Arrow table per raw table below) and ``rebuild(con, run_id)``.

Rules every trace parser keeps:

- Times are integer nanoseconds, exact: a decimal microsecond ``ts``/``dur`` (``"123.456"``) is
  parsed as a decimal, never through a float; a value that is not an exact number of ns, or
  that went through a spreadsheet (``8.1097E+14``), is refused naming the rule.
- ``start_ns`` is in the file's own time base (``trace_runs.time_base``): ``epoch`` (ns since
  1970), ``relative`` (ns since ``origin_ns``) or ``session`` (ns since the tool's session start).
- ``name`` is the kernel name exactly as the profiler wrote it (demangled where the tool
  demangles); ``args`` and ``extra`` keep the rest of the event verbatim as JSON text (integers
  above int64 stay text, never fail the file).
- Process environments, command lines with tokens, host names and similar are never copied
  into these tables (analysts read them); the archived bytes keep the file whole
  (:func:`scrub` drops such keys from a metadata object).

Refinements (branch i13a, merged by every trace format):

- ``parse(data, path, run_id)`` receives the file's *decompressed* bytes: the format registry
  (``formats/__init__.py``) undoes gzip (detected by its magic bytes), so a format module never
  sees compression. ``sniff(head, path)`` gets at most :data:`HEAD_BYTES` decompressed bytes.
  A format module registers itself by being listed in ``formats.TRACE_FORMATS``; its ``KIND``
  (``"json"``, ``"sqlite"`` or ``"text"``) says which files the registry offers it: JSON
  documents, files with the SQLite magic, or any other text (CSV and the like).
- ``Parsed.captured_at`` (naive UTC ``datetime`` or ``None``): the file's own clock (nsys
  session start, Kineto ``baseTimeNanoseconds`` plus its earliest GPU/runtime event). The
  loader uses it as the default capture time, before the file's mtime; ``--captured-at`` and a
  sidecar still win.
- :data:`MAX_NAME` (64 Ki characters) bounds event and kernel names; longer ones refuse the
  file naming the rule.
- :func:`decimal_ns` is the one exact decimal -> integer ns conversion (``"12.345"`` us ->
  12345 ns; refuses exponents, NaN, signs where not allowed, sub-ns digits), :func:`scrub` the
  one environment filter; every trace format uses them.
- A format module with ``STREAM = True`` is streamed for files of ``PWH_STREAM_MIN_BYTES`` or
  more (gzip: an eighth of that) by ``warehouse.ingesting.trace_stream`` (Kineto only, so far:
  ``kineto_stream.TraceStream``); SQLite files (``KIND = "sqlite"``) are read on disk by
  ``warehouse.ingesting.sqlite_stream`` through their module's ``items(con, path, run_id)``
  generator; every other trace format is parsed whole.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import msgspec

if TYPE_CHECKING:  # numpy is imported where used: an ncu-only ingest never imports it
    import numpy as np

from warehouse.errors import FormatError
from warehouse.ingesting.formats.base import Table

HEAD_BYTES = 1 << 20  # what sniff() sees: the first MiB, decompressed
# Longest event / kernel name accepted (characters). Templated C++ names run to a few KB; a
# longer one is refused naming the rule rather than stored.
MAX_NAME = 64 << 10

# Event kinds (``trace_events.kind``): what the staging models select on.
KINDS = ("kernel", "memcpy", "memset", "runtime", "cpu_op", "annotation", "gpu_annotation",
         "sync", "other")
TIME_BASES = ("epoch", "relative", "session")

RUNS = Table(
    "trace_runs",
    (
        ("run_id", "VARCHAR", "SHA-256 of the raw file (= raw.files.sha256)"),
        ("source_format", "VARCHAR", "kineto_trace, nsys_sqlite, nsys_kern_sum_csv, "
         "nsys_trace_csv, rocprof_*"),
        ("tool", "VARCHAR", "the profiler that wrote the file, e.g. 'PyTorch Profiler (Kineto)'"),
        ("tool_version", "VARCHAR", "its version as written in the file (null if absent)"),
        ("time_base", "VARCHAR", "what start_ns counts from: epoch, relative or session"),
        ("origin_ns", "BIGINT", "the file's own clock at its start, ns since 1970 (null if none)"),
        ("aggregated", "BOOLEAN", "true: per-kernel summaries only (trace_kernel_summaries)"),
        ("event_count", "BIGINT", "rows in raw.trace_events for this run"),
        ("metadata", "JSON", "document-level metadata, verbatim, without environment or secrets"),
    ),
    ("run_id",),
    "one row per trace-family run (Kineto, Nsight Systems, rocprof)",
)
DEVICES = Table(
    "trace_devices",
    (
        ("run_id", "VARCHAR", "run"),
        ("device", "VARCHAR", "device id as the tool writes it (e.g. '0', 'gpu-2')"),
        ("name", "VARCHAR", "device name, e.g. 'NVIDIA A100-SXM4-80GB' (null if absent)"),
        ("properties", "JSON", "the tool's device properties, verbatim"),
    ),
    ("run_id", "device"),
    "one row per (run, device) the file describes",
)
EVENTS = Table(
    "trace_events",
    (
        ("run_id", "VARCHAR", "run"),
        ("event_idx", "BIGINT", "position of the event in the file (0-based, file order)"),
        ("kind", "VARCHAR", "kernel, memcpy, memset, runtime (CUDA/HIP/HSA API call), cpu_op "
         "(CPU operator), annotation (user annotation, ProfilerStep#N, NVTX range, roctx "
         "marker), gpu_annotation, sync or other"),
        ("category", "VARCHAR", "the tool's own category, verbatim (Kineto cat, nsys table …)"),
        ("name", "VARCHAR", "name exactly as written (demangled where the tool demangles)"),
        ("mangled_name", "VARCHAR", "mangled name where the file has one"),
        ("device", "VARCHAR", "device id (null if the file has none for this event)"),
        ("stream", "VARCHAR", "stream / queue id"),
        ("rank", "VARCHAR", "distributed rank where the file has one"),
        ("pid", "VARCHAR", "process id as written"),
        ("tid", "VARCHAR", "thread id as written"),
        ("start_ns", "BIGINT", "start, integer ns in the run's time_base"),
        ("dur_ns", "BIGINT", "duration, integer ns (>= 0)"),
        ("correlation", "BIGINT", "launch correlation id (runtime call <-> kernel), null if none"),
        ("args", "JSON", "the event's other fields, verbatim JSON text"),
    ),
    ("run_id", "event_idx"),
    "one row per timed event (kernel dispatch, memcpy, memset, runtime call; Kineto: every "
    "complete event, the CPU side included; nsys: NVTX ranges and CUDA syncs too)",
    indexed=False,
)
SUMMARIES = Table(
    "trace_kernel_summaries",
    (
        ("run_id", "VARCHAR", "run"),
        ("row_idx", "BIGINT", "position of the row in the file (0-based)"),
        ("name", "VARCHAR", "kernel name exactly as written"),
        ("device", "VARCHAR", "device id (null if the summary is not per device)"),
        ("calls", "BIGINT", "instances / calls"),
        ("total_ns", "BIGINT", "total time, integer ns"),
        ("min_ns", "BIGINT", "shortest call, ns (null if absent)"),
        ("max_ns", "BIGINT", "longest call, ns (null if absent)"),
        ("extra", "JSON", "the row's other columns, verbatim"),
    ),
    ("run_id", "row_idx"),
    "one row per kernel of an already aggregated summary (nsys kern_sum CSV, rocprof stats)",
)

TABLES = (RUNS, DEVICES, EVENTS, SUMMARIES)


# ------------------------------------------------------------------ shared helpers

_DECIMAL = re.compile(r"\A(-?)(\d+)(?:\.(\d+))?\Z")
_EXPONENT = re.compile(r"\A-?\d+(?:\.\d*)?[eE][-+]?\d+\Z")


def decimal_ns(text: str | bytes, path: str, where: str, *, scale: int = 3,
               negative: bool = False) -> int:
    """Exact integer ns from a decimal number written as text.

    ``scale`` is the number of decimal digits between the unit and ns (3 for microseconds, 0
    for nanoseconds, 6 for milliseconds). A value with more fractional digits than that must
    have zeros there; an exponent (a spreadsheet's ``8.1097E+14``), ``NaN``, ``inf`` or an
    empty cell is refused, as is a negative value unless ``negative``.
    """
    if isinstance(text, bytes | bytearray | memoryview):
        text = bytes(text).decode("ascii", "replace")
    t = text.strip()
    m = _DECIMAL.match(t)
    if m is None:
        if _EXPONENT.match(t):
            rule = ("a plain decimal number, got the exponent form "
                    f"{t!r} (the value went through a spreadsheet or a float: precision lost)")
        else:
            rule = f"a decimal number, got {t[:80]!r}"
        raise FormatError(path, where, rule, kind="schema")
    sign, whole, frac = m.groups()
    frac = frac or ""
    if len(frac) > scale:
        if frac[scale:].strip("0"):
            raise FormatError(path, where, f"a time that is a whole number of ns, got {t!r}")
        frac = frac[:scale]
    ns = int(whole) * 10**scale + (int(frac.ljust(scale, "0")) if scale else 0)
    if sign:
        ns = -ns
        if not negative and ns:
            raise FormatError(path, where, f"a non-negative time, got {t!r}")
    if not -(2**63) <= ns < 2**63:
        raise FormatError(path, where, f"a time within BIGINT nanoseconds, got {t!r}")
    return ns


def decimal_ns_array(values: Sequence, path: str, where: Callable[[int], str], *,
                     scale: int = 3, negative: bool = False) -> np.ndarray:
    """:func:`decimal_ns` of many numbers at once (JSON number texts: bytes or ``msgspec.Raw``)
    as an int64 array. The fast path (:func:`_decimal_fast`) reads every digit with numpy, no
    Python object per value; any value it cannot prove exact (a sign, an exponent, sub-ns
    digits, out of BIGINT, text) sends the batch through :func:`decimal_ns`, which converts
    each value or raises naming ``where(i)`` and the rule."""
    import numpy as np

    if len(values) == 0:
        return np.zeros(0, dtype=np.int64)
    out = _decimal_fast(values, scale)
    if out is not None:
        return out
    return np.array([decimal_ns(bytes(b), path, where(k), scale=scale, negative=negative)
                     for k, b in enumerate(values)], dtype=np.int64)


_MAX_DIGITS = 19  # 10**19 - 1 < 2**64: a uint64 holds any 19-digit value
_POW10 = [10**k for k in range(_MAX_DIGITS + 1)]  # as a uint64 array where used (numpy lazily)
_UINTS = msgspec.json.Decoder(list[int])


def _decimal_fast(values: Sequence, scale: int) -> np.ndarray | None:
    """Exact integer ``10**-scale`` units of plain decimal texts (digits and at most one dot,
    at most ``scale`` fractional digits, no sign, no exponent), vectorised; ``None`` when any
    value is not of that form or does not fit a BIGINT (the caller then takes the exact path).

    The texts are joined with their dots removed and a ``1`` in front of each (``0.001`` ->
    ``10001``: no leading zero), decoded as one JSON array of integers by msgspec (which
    refuses anything but digits: a sign, an exponent, quotes, ``null``), then the ``1`` is
    subtracted and the missing decimals multiplied in with numpy."""
    import numpy as np

    n = len(values)
    lens = np.fromiter(map(len, values), dtype=np.int64, count=n)
    if int(lens.min()) == 0 or int(lens.max()) > _MAX_DIGITS + 1:
        return None
    joined = b",1".join(values)
    try:
        digits = np.array(_UINTS.decode(b"[1" + joined.replace(b".", b"") + b"]"),
                          dtype=np.uint64)
    except (msgspec.MsgspecError, OverflowError):
        return None
    if len(digits) != n:  # a comma inside a value (a string): not a number
        return None
    ends = np.cumsum(lens + 2) - 2  # offset of the ",1" after each value in `joined`
    dots = np.flatnonzero(np.frombuffer(joined, dtype=np.uint8) == 46)
    owner = np.searchsorted(ends, dots)
    if len(owner) > 1 and not (np.diff(owner) > 0).all():  # two dots in one text
        return None
    frac = np.zeros(n, dtype=np.int64)
    frac[owner] = ends[owner] - dots - 1
    ndig = lens.copy()
    ndig[owner] -= 1
    if int(frac.max()) > scale or int((ndig - frac).max()) + scale > _MAX_DIGITS:
        return None
    pow10 = np.array(_POW10, dtype=np.uint64)
    total = (digits - pow10[ndig]) * pow10[scale - frac]
    if int(total.max()) >= 1 << 63:
        return None
    return total.astype(np.int64)


# Keys whose values are process environments, command lines, secrets, host or user identity,
# network addresses or file paths: never copied into the analyst-readable tables (matched
# case-insensitively anywhere in the key, e.g. MASTER_ADDR, master_port, USER, ssh_key,
# node_ip, log_dir, traceName; dropping a harmless key costs less than leaking a secret).
_SECRET_KEY = re.compile(
    r"env|environ|token|secret|password|passwd|credential|key|auth|cookie|host|node_?name|"
    r"machine|addr|master|(?:^|_)(?:ip|port|url|uri)s?(?:$|_)|email|user|login|owner|"
    r"command.?line|cmdline|^argv$|^args$|path|file_?name|(?:^|_)(?:files?|dirs?)(?:$|_)|"
    r"cwd|home|trace_?name",
    re.I)


def scrub(obj):
    """A copy of a JSON-like metadata value without environment / secret / host keys."""
    if isinstance(obj, dict):
        return {k: scrub(v) for k, v in obj.items() if not _SECRET_KEY.search(str(k))}
    if isinstance(obj, list):
        return [scrub(v) for v in obj]
    return obj
