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
  into these tables (analysts read them); the archived bytes keep the file whole.
"""

from __future__ import annotations

from warehouse.ingesting.formats.base import Table

# Event kinds (``trace_events.kind``): what the staging models select on.
KINDS = ("kernel", "memcpy", "memset", "runtime", "other")
TIME_BASES = ("epoch", "relative", "session")

RUNS = Table(
    "trace_runs",
    (
        ("run_id", "VARCHAR", "SHA-256 of the raw file (= raw.files.sha256)"),
        ("source_format", "VARCHAR", "kineto_trace, nsys_sqlite, nsys_kern_sum_csv, rocprof_*"),
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
        ("kind", "VARCHAR", "kernel, memcpy, memset, runtime or other"),
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
    "one row per timed event (kernel dispatch, memcpy, memset, runtime call)",
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
