"""The raw tables of the Nsight Compute formats (``.ncu-rep`` reports and ``ncu --csv`` exports).

Both formats (:mod:`.ncu_rep`, :mod:`.ncu_csv`) write the same four tables, so the staging
models read one shape whatever Nsight Compute wrote; ``ncu_runs.layout`` says which
(``report``, ``details`` = ``--page details``, ``raw`` = ``--page raw``).

- one row per launch (``ncu_launches``): function, demangled and mangled names, device, grid and
  block, context and stream, NVTX ranges, duration in integer ns or NULL (``time_state`` says
  why: ``ok``, ``nan`` — the tool wrote NaN —, ``absent`` — no duration metric);
- one row per metric of each launch (``ncu_metrics``): name, unit exactly as written, the
  numeric ``value`` (NaN kept as NaN, never 0) or the ``text_value``, and ``as_written`` when
  the double does not reproduce the file's own spelling (``1,056``; a uint64 above 2^53);
- ``ncu_rules``: the rule rows of a details export (``Rule Name`` …), kept for losslessness.

Host names, process (executable) names and command lines never reach these tables: a CSV's
``Host Name`` and ``Process Name`` columns are dropped, and a report's session block (host,
executable path, command line) is never read. The archive keeps the file's bytes.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation

from warehouse.errors import FormatError
from warehouse.ingesting.formats.base import Table

RUNS = Table(
    "ncu_runs",
    (
        ("run_id", "VARCHAR", "SHA-256 of the raw file (= raw.files.sha256)"),
        ("source_format", "VARCHAR", "ncu_rep or ncu_csv"),
        ("layout", "VARCHAR", "report (.ncu-rep), details (--page details) or raw (--page raw)"),
        ("tool_version", "VARCHAR", "the reader's version (ncu_report) for a report; null for CSV"),
        ("range_count", "BIGINT", "result ranges of a report (1 for a CSV)"),
        ("launch_count", "BIGINT", "rows in raw.ncu_launches for this run"),
        ("untimed_launches", "BIGINT", "launches without a duration (time_state nan or absent)"),
        ("metric_rows", "BIGINT", "rows in raw.ncu_metrics for this run"),
        ("metadata", "JSON", "layout facts (CSV columns, skipped console lines), no host/user data"),
    ),
    ("run_id",),
    "one row per Nsight Compute run (.ncu-rep report or ncu --csv export)",
)
LAUNCHES = Table(
    "ncu_launches",
    (
        ("run_id", "VARCHAR", "run"),
        ("launch_idx", "BIGINT", "position of the launch in the file (0-based, over all ranges)"),
        ("range_idx", "BIGINT", "result range of a report (0 for a CSV)"),
        ("action_idx", "BIGINT", "position of the launch in its range"),
        ("launch_id", "VARCHAR", "the CSV's ID column as written (null for a report)"),
        ("kernel", "VARCHAR", "the kernel analysts see: demangled name (CSV: Kernel Name)"),
        ("function_name", "VARCHAR", "function name (report: NameBase_FUNCTION; null for CSV)"),
        ("demangled_name", "VARCHAR", "demangled name with parameters (null for CSV)"),
        ("mangled_name", "VARCHAR", "mangled name (null for CSV)"),
        ("device", "VARCHAR", "device id (launch__device_id; CSV: Device)"),
        ("device_name", "VARCHAR", "device name as written (device__attribute_display_name)"),
        ("grid", "BIGINT[]", "grid size [x, y, z] (null when the launch has no launch__ metrics)"),
        ("block", "BIGINT[]", "block size [x, y, z] (null when absent)"),
        ("context", "BIGINT", "CUDA context id (null when absent)"),
        ("stream", "BIGINT", "CUDA stream id (null when absent)"),
        ("nvtx", "JSON", "NVTX push/pop and start/end ranges per domain (null when none)"),
        ("dur_ns", "BIGINT", "gpu__time_duration.sum in integer ns; null when absent or NaN"),
        ("time_state", "VARCHAR", "ok, nan (the tool wrote NaN) or absent (no duration metric)"),
        ("metric_count", "BIGINT", "rows of this launch in raw.ncu_metrics"),
        ("extra", "JSON", "CSV: the launch's other identity cells verbatim (no host/process)"),
    ),
    ("run_id", "launch_idx"),
    "one row per profiled kernel launch of an Nsight Compute run",
)
METRICS = Table(
    "ncu_metrics",
    (
        ("run_id", "VARCHAR", "run"),
        ("launch_idx", "BIGINT", "launch (raw.ncu_launches.launch_idx)"),
        ("metric_idx", "BIGINT", "position of the metric in its launch (0-based)"),
        ("row_idx", "BIGINT", "CSV details: the data row in the file (0-based); else null"),
        ("section", "VARCHAR", "CSV details: Section Name; else null"),
        ("name", "VARCHAR", "metric name exactly as written"),
        ("unit", "VARCHAR", "unit exactly as written ('' when none)"),
        ("value", "DOUBLE", "numeric value in that unit (NaN kept); null for a text value"),
        ("text_value", "VARCHAR", "the value when it is text (e.g. a device name, 'n/a')"),
        ("as_written", "VARCHAR", "the exact spelling when the double does not reproduce it"),
        ("instances", "BIGINT", "report: instance values of an instanced metric (0 if none)"),
    ),
    ("run_id", "launch_idx", "metric_idx"),
    "one row per metric of each launch of an Nsight Compute run",
    indexed=False,
)
RULES = Table(
    "ncu_rules",
    (
        ("run_id", "VARCHAR", "run"),
        ("launch_idx", "BIGINT", "launch"),
        ("rule_idx", "BIGINT", "position among the launch's rule rows (0-based)"),
        ("row_idx", "BIGINT", "the data row in the file (0-based)"),
        ("section", "VARCHAR", "Section Name"),
        ("cells", "JSON", "the row's rule cells verbatim (Rule Name, Rule Type, …)"),
    ),
    ("run_id", "launch_idx", "rule_idx"),
    "one row per rule row of an ncu --csv --page details export",
)

TABLES = (RUNS, LAUNCHES, METRICS, RULES)

DURATION = "gpu__time_duration.sum"
MAX_NAME = 64 << 10

# Time units Nsight Compute writes, as the number of decimal digits between them and ns.
TIME_SCALE = {"ns": 0, "nsecond": 0, "us": 3, "usecond": 3, "ms": 6, "msecond": 6,
              "s": 9, "second": 9}


def duration_ns(value: float | None, text: str | None, unit: str, path: str,
                where: str) -> tuple[int | None, str]:
    """``(dur_ns, time_state)`` of a duration metric: exact integer ns, never through a float
    where the file wrote digits (``text``); NaN -> ``(None, 'nan')``."""
    if unit not in TIME_SCALE:
        raise FormatError(path, where, f"a duration in a time unit ({', '.join(TIME_SCALE)}); "
                          f"found the unit {unit!r}", kind="schema")
    if text is None:
        if value is None:
            return None, "absent"
        if math.isnan(value):
            return None, "nan"
        text = repr(value)
    t = text.replace(",", "").strip()
    if t.lower() in ("nan", "-nan", "n/a"):
        return None, "nan"
    try:
        d = Decimal(t) * (10 ** TIME_SCALE[unit])
    except InvalidOperation:
        raise FormatError(path, where, f"a duration, got {text[:40]!r}", kind="schema") from None
    if not d.is_finite() or d < 0:
        raise FormatError(path, where, f"a finite non-negative duration, got {text[:40]!r}",
                          kind="schema")
    if d != d.to_integral_value():
        raise FormatError(path, where, f"a duration that is a whole number of ns, got {text!r} "
                          f"{unit}", kind="schema")
    ns = int(d)
    if ns >= 2**63:
        raise FormatError(path, where, "a duration within BIGINT ns", kind="schema")
    return ns, "ok"


def whole(value: float | None) -> int | None:
    """A float the tool wrote for an integer (grid sizes are ``1056.0`` in some versions)."""
    if value is None or not math.isfinite(value) or value != int(value) or abs(value) >= 2**63:
        return None
    return int(value)


_GROUPED = re.compile(r"-?[0-9]{1,3}(?:,[0-9]{3})+(?:\.[0-9]+)?")
_NUMBER = re.compile(r"[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?|[-+]?(?:nan|inf)",
                     re.I)


def canonical(value: float) -> str:
    """How a double is written when nothing else is known (``as_written`` is null then)."""
    if math.isfinite(value) and value == int(value) and abs(value) < 2**53:
        return str(int(value))
    return repr(value)


def number(cell: str) -> tuple[float | None, str | None, str | None]:
    """``(value, text_value, as_written)`` of a CSV cell: a number (thousands separators
    allowed), else text. ``as_written`` keeps the cell when :func:`canonical` differs."""
    c = cell
    if _GROUPED.fullmatch(c):
        v = float(c.replace(",", ""))
    elif _NUMBER.fullmatch(c):
        v = float(c)
    else:
        return None, cell, None
    return v, None, (None if canonical(v) == cell else cell)


def spelled(value: float | None, text_value: str | None, as_written: str | None) -> str:
    """The cell a CSV had for a metric (the inverse of :func:`number`)."""
    if as_written is not None:
        return as_written
    if text_value is not None:
        return text_value
    return "" if value is None else canonical(value)
