"""Nsight Compute CSV exports (``ncu --csv``, ``ncu --csv --import report.ncu-rep``).

Two layouts, told apart by the header (content decides, never the file name):

- ``details`` (``--page details``, the default): one row per launch x metric, columns ``ID``,
  ``Process ID``, ``Process Name``, ``Host Name``, ``Kernel Name``, ``Context``, ``Stream``,
  ``Block Size``, ``Grid Size``, ``Device``, ``CC``, ``Section Name``, ``Metric Name``,
  ``Metric Unit``, ``Metric Value`` (older versions: ``Kernel Time`` and no grid/block/device;
  newer: the rule columns ``Rule Name``, ``Rule Type``, ``Rule Description``, ``Estimated
  Speedup Type``, ``Estimated Speedup``). A row with an empty ``Metric Name`` is a rule row
  (``raw.ncu_rules``). Newer versions end a metric row after ``Metric Value`` and one empty
  field (``...,"6.75",``): the rule cells it leaves out are empty.
- ``raw`` (``--page raw``): one row per launch, a column per metric after the identity
  columns, and a units row right under the header (its ``ID`` cell empty).

Console lines (``==PROF==``, ``==WARNING==``, ``==ERROR==``, and the profiled program's own
output before the header) are skipped and counted, never stored. A file holding only console
lines, at least one of them ``==ERROR==`` (ncu ran but profiled nothing), is refused with
ncu's own message. Values: numbers with thousands separators (``1,056``) are read as numbers,
anything else (``n/a``) is a text value; the cell is kept in ``as_written`` when the double
does not reproduce it. A file whose numbers show a non-English locale ("." grouping digits:
``2.508.800``; a decimal comma: ``13,72``) is refused (its ``4.750`` would mean 4750; parser
``ncu_csv/2``: ``pwh rederive`` of such a ``/1`` run fails naming the rule). A launch's
duration is ``gpu__time_duration.sum`` (raw layout, or a
details metric row), else the details ``Duration`` of the Speed Of Light section, converted
exactly to integer ns from its unit (``nsecond``, ``usecond``, ``msecond``, ``second``).
``Host Name`` and ``Process Name`` (the executable) never reach the raw tables.

``ncu --nvtx`` columns (``thread Domain:Push/Pop_Range:...``, ``Id:Domain:Start/Stop_Range:...``)
are identity cells of the launch, in both layouts, and fill ``ncu_launches.nvtx`` (parser
``ncu_csv/3``: a raw export read them as text metrics). ncu writes a table per profiled process:
a later copy of the header (and of a raw table's units row) is skipped and counted
(``repeated_headers``; its launches may number from 0 again, so ``table_starts`` keeps where
each later table starts and ``rebuild`` writes its header there again); a header with other
columns, or a later raw header without its units row, is refused. Refused naming what they are:
``--print-summary per-kernel|per-gpu`` tables (``Invocations``, ``Minimum``/``Maximum``/
``Average``: aggregates, not launches), ncu's text output (written without ``--csv``) and
nvprof's output (``==<pid>== NVPROF ...``). UTF-16 with a byte-order mark (what Windows
PowerShell 5 writes for ``ncu --csv ... > out.csv``) is read as such (``metadata.encoding``).
"""

from __future__ import annotations

import bisect
import csv
import itertools
import json
import re

from warehouse.errors import FormatError
from warehouse.ingesting.formats import ncu, tracecsv
from warehouse.ingesting.formats.base import Parsed

NAME = "ncu_csv"
PARSER_VERSION = "ncu_csv/3"
KIND = "text"
TABLES = ncu.TABLES

PRIVATE = ("Host Name", "Process Name")
IDENTITY = ("ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Kernel Time",
            "Context", "Stream", "Block Size", "Grid Size", "Device", "CC")
METRIC = ("Section Name", "Metric Name", "Metric Unit", "Metric Value")
RULE = ("Rule Name", "Rule Type", "Rule Description", "Estimated Speedup Type",
        "Estimated Speedup")
CONSOLE = ("==PROF==", "==WARNING==", "==ERROR==", "==INFO==")
MAX_OTHER_PREAMBLE = 10_000
# ncu --nvtx adds a column per NVTX range kind between 'Host Name' and 'Kernel Name':
# 'thread Domain:Push/Pop_Range:PL_Type:...' and 'Id:Domain:Start/Stop_Range:PL_Type:...'.
_NVTX_COL = re.compile(r".*Domain:(?:Push/Pop|Start/Stop)_Range:.*")
# nvprof (CUDA's legacy profiler) prefixes its console lines with the process id.
_NVPROF = re.compile(r"==\d+== (?:NVPROF is profiling|Profiling application|Profiling result"
                     r"|Metric result|Event result|Generated result file)")
# ncu without --csv: a '    Section: <name>' line over a 'Metric Name  Metric Unit  Metric Value'
# table per launch.
_TEXT_SECTION = re.compile(r"\s+Section: \S.*")
_TEXT_TABLE = re.compile(r"\s*Metric Name\s+Metric Unit\s+Metric Value\s*")
SOL_DURATION = "Duration"
_DIMS = re.compile(r"\(\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*\)")
_INT = re.compile(r"\d{1,18}")
# A number only a non-English locale writes: two or more "." groups of three digits
# ("2.508.800"), "." grouping before a "," decimal ("1.234,5"), or a "," not followed by a
# group of three digits ("13,72"). Such a file's "4.750" means 4750: it is refused.
_LOCALE = re.compile(r"-?\d{1,3}(?:\.\d{3}){2,}(?:,\d+)?|-?\d{1,3}(?:\.\d{3})+,\d+"
                     r"|-?\d+,(?:\d{1,2}|\d{4,})")


def _is_header(fields: list[str]) -> str | None:
    """The layout a header line announces, or ``None``."""
    if "Kernel Name" not in fields or "ID" not in fields:
        return None
    if all(c in fields for c in METRIC[1:]):
        return "details"
    if "Metric Name" in fields or "Metric Value" in fields:
        return None
    return "raw"


def _summary(fields: list[str]) -> str | None:
    """``per-kernel`` / ``per-gpu`` when a header is ncu's ``--print-summary`` table."""
    if all(c in fields for c in ("Invocations", "Metric Name", "Minimum", "Maximum", "Average")):
        return "per-kernel" if "Kernel Name" in fields else "per-gpu"
    return None


def _console(line: str) -> bool:
    return line.startswith(CONSOLE)


def _nvtx(h: str) -> bool:
    return _NVTX_COL.fullmatch(h) is not None


def _foreign(lines) -> str | None:
    """What a file without an ncu CSV header is, when it is a profiler output we can name:
    nvprof's console output, or ncu's own text output (no ``--csv``)."""
    section = table = False
    for line in lines:
        if _NVPROF.match(line):
            return "nvprof"
        section = section or _TEXT_SECTION.fullmatch(line) is not None
        table = table or _TEXT_TABLE.fullmatch(line) is not None
        if section and table:
            return "text"
    return None


def sniff(head: bytes, path: str) -> bool:
    lines = tracecsv.head_lines(head, limit=1 << 16)
    errors = False
    for line in lines:
        if _console(line):
            errors = errors or line.startswith("==ERROR==")
            continue
        if "Kernel Name" in line and _is_header(tracecsv.header_fields(line)):
            return True
        if "Invocations" in line and _summary(tracecsv.header_fields(line)):
            return True  # refused by parse, naming what it is
    if _foreign(lines):
        return True  # refused by parse, naming what it is
    # only console lines (the head may end mid-line): ncu's "profiled nothing" output
    body = [ln for ln in lines if ln.strip()]
    return errors and all(_console(ln) for ln in body[:-1])


def _fields(line: str, path: str, lineno: int) -> list[str]:
    try:
        return next(csv.reader([line], strict=True), [])
    except csv.Error as exc:
        raise FormatError(path, f"line {lineno}", f"well-formed CSV ({exc})",
                          kind="malformed") from None


def _dims(cell: str) -> list[int] | None:
    m = _DIMS.fullmatch(cell.strip())
    return [int(g) for g in m.groups()] if m else None


def _int(cell: str) -> int | None:
    return int(cell) if _INT.fullmatch(cell) else None


class _Launches:
    """Accumulates the launch, metric and rule columns."""

    def __init__(self, run_id: str, path: str):
        self.run_id, self.path = run_id, path
        self.L = {c: [] for c, _, _ in ncu.LAUNCHES.columns}
        self.M = {c: [] for c, _, _ in ncu.METRICS.columns}
        self.R = {c: [] for c, _, _ in ncu.RULES.columns}
        self.by_id: dict[tuple[int, str], int] = {}
        self.ident: list[dict[str, str]] = []
        self.durations: list[tuple | None] = []
        self.sol: list[tuple | None] = []
        self.counts: list[int] = []
        self.rules: list[int] = []

    def launch(self, cells: dict[str, str], lineno: int, table: int = 0) -> int:
        """The launch of a row: its ``ID`` within its table (a later table, under a repeated
        header, may number its launches from 0 again)."""
        lid = cells.get("ID", "")
        li = self.by_id.get((table, lid))
        if li is not None:
            if self.ident[li] != cells:
                col = next(k for k in cells if cells[k] != self.ident[li].get(k))
                raise FormatError(self.path, tracecsv.where(lineno, col), f"the same {col!r} "
                                  f"on every row of launch ID {lid!r}", kind="schema")
            return li
        li = len(self.ident)
        self.by_id[(table, lid)] = li
        self.ident.append(cells)
        self.durations.append(None)
        self.sol.append(None)
        self.counts.append(0)
        self.rules.append(0)
        return li

    def metric(self, li: int, row_idx: int | None, section: str | None, name: str, unit: str,
               cell: str, lineno: int) -> None:
        value, text, written = ncu.number(cell)
        M = self.M
        M["run_id"].append(self.run_id)
        M["launch_idx"].append(li)
        M["metric_idx"].append(self.counts[li])
        M["row_idx"].append(row_idx)
        M["section"].append(section)
        M["name"].append(name)
        M["unit"].append(unit)
        M["value"].append(value)
        M["text_value"].append(text)
        M["as_written"].append(written)
        M["instances"].append(0)
        self.counts[li] += 1
        if name == ncu.DURATION:
            self.durations[li] = (value, cell, unit, lineno, name)
        elif name == SOL_DURATION and section and "Speed Of Light" in section:
            self.sol[li] = (value, cell, unit, lineno, name)

    def rule(self, li: int, row_idx: int, section: str | None, cells: dict[str, str]) -> None:
        for c, v in (("run_id", self.run_id), ("launch_idx", li), ("rule_idx", self.rules[li]),
                     ("row_idx", row_idx), ("section", section),
                     ("cells", json.dumps(cells, ensure_ascii=False))):
            self.R[c].append(v)
        self.rules[li] += 1

    def finish(self) -> int:
        untimed = 0
        for li, cells in enumerate(self.ident):
            d = self.durations[li] or self.sol[li]
            if d is None:
                dur, state = None, "absent"
            else:
                value, cell, unit, lineno, col = d
                dur, state = ncu.duration_ns(value, cell if value is not None else None, unit,
                                             self.path, tracecsv.where(lineno, col))
                if value is None and cell.strip():
                    dur, state = None, "nan"
            untimed += dur is None
            kernel = cells.get("Kernel Name", "")
            if len(kernel) > ncu.MAX_NAME or not kernel.strip():
                raise FormatError(self.path, f"launch ID {cells.get('ID')!r}", "a non-empty "
                                  f"Kernel Name of at most {ncu.MAX_NAME} characters",
                                  kind="schema")
            extra = {k: v for k, v in cells.items() if k not in ("ID", "Kernel Name")}
            nvtx = {k: v for k, v in cells.items() if v and _nvtx(k)}
            row = {"run_id": self.run_id, "launch_idx": li, "range_idx": 0, "action_idx": li,
                   "launch_id": cells.get("ID"), "kernel": kernel, "function_name": None,
                   "demangled_name": None, "mangled_name": None,
                   "device": cells.get("Device"), "device_name": None,
                   "grid": _dims(cells.get("Grid Size", "")),
                   "block": _dims(cells.get("Block Size", "")),
                   "context": _int(cells.get("Context", "")),
                   "stream": _int(cells.get("Stream", "")),
                   "nvtx": json.dumps(nvtx, ensure_ascii=False) if nvtx else None,
                   "dur_ns": dur, "time_state": state, "metric_count": self.counts[li],
                   "extra": json.dumps(extra, ensure_ascii=False)}
            for c, v in row.items():
                self.L[c].append(v)
        return untimed


def _read(data: bytes, path: str):
    """``(layout, header, [(lineno, fields)], console_lines, preamble_lines, tables)``:
    ``tables`` holds, for each later copy of the header (ncu writes one table per profiled
    process; two runs appended to one log), the number of rows before it; the copy is skipped
    like a console line, with a raw table's units row under it."""
    text = tracecsv.text_of(data, path)  # UTF-8, or UTF-16 with its byte-order mark
    if "\x00" in text:
        line = text.count("\n", 0, text.index("\x00")) + 1
        raise FormatError(path, f"line {line}", "CSV text without NUL bytes", kind="malformed")
    layout = header = None
    rows: list[tuple[int, list[str]]] = []
    console = preamble = 0
    tables: list[int] = []
    units_due = False
    errors: list[str] = []
    for lineno, line in enumerate(tracecsv.lines(text, path, keepends=False,
                                                 eol=tracecsv.SPLITLINES), start=1):
        if _console(line):
            console += 1
            if line.startswith("==ERROR==") and len(errors) < 3:
                errors.append(line.strip())
            continue
        if header is None:
            fields = (tracecsv.header_fields(line)
                      if "Kernel Name" in line or "Invocations" in line else [])
            summary = _summary(fields)
            if summary:
                raise FormatError(path, f"line {lineno}", "an ncu --csv export of launches (one "
                                  "row per launch and metric, column 'ID'); this is ncu's "
                                  f"--print-summary {summary} table ('Invocations', 'Minimum', "
                                  "'Maximum', 'Average': aggregates over launches, not "
                                  "launches): export again without --print-summary",
                                  kind="schema")
            layout = _is_header(fields) if fields else None
            if layout is None:
                preamble += 1
                if preamble > MAX_OTHER_PREAMBLE:
                    break
                continue
            header = [f.strip() for f in _fields(line, path, lineno)]
            if len(set(header)) != len(header):
                dup = next(h for h in header if header.count(h) > 1)
                raise FormatError(path, f"line {lineno}", f"unique column names; {dup!r} "
                                  "repeats", kind="schema")
            continue
        if not line.strip():
            continue
        fields = _fields(line, path, lineno)
        if "Kernel Name" in line and _is_header([f.strip() for f in fields]):
            if [f.strip() for f in fields] != header:
                raise FormatError(path, f"line {lineno}", "one ncu table; this line starts "
                                  "another with other columns (ncu wrote a table per process "
                                  "or run): export each separately", kind="schema")
            tables.append(len(rows))
            units_due = layout == "raw"
            continue
        if units_due:
            units_due = False
            if len(fields) != len(header) or fields[header.index("ID")] != "":
                raise FormatError(path, f"line {lineno}", "the units row of an ncu --page raw "
                                  "export (its 'ID' cell empty) right under the repeated "
                                  "header", kind="schema")
            if not rows or fields != rows[0][1]:
                raise FormatError(path, f"line {lineno}", "the units row of the first "
                                  "table under a repeated header; the units differ",
                                  kind="schema")
            continue
        if layout == "details" and len(fields) < len(header) <= len(fields) + len(RULE) \
                and all(h in RULE for h in header[len(fields):]):
            fields += [""] * (len(header) - len(fields))  # a metric row without rule cells
        if len(fields) != len(header):
            raise FormatError(path, f"line {lineno}", f"{len(header)} fields as in the header; "
                              f"found {len(fields)}", kind="schema")
        rows.append((lineno, fields))
    if header is None:
        foreign = _foreign(itertools.islice(tracecsv.lines(text, path, keepends=False,
                                                           eol=tracecsv.SPLITLINES),
                                            MAX_OTHER_PREAMBLE))
        if foreign == "nvprof":
            raise FormatError(path, "header", "an Nsight Compute (ncu --csv) export; this is "
                              "nvprof output ('==<pid>== NVPROF ...' lines: CUDA's legacy "
                              "profiler), which pwh does not read: profile with ncu --csv or "
                              "nsys", kind="schema")
        if foreign == "text":
            raise FormatError(path, "header", "an ncu --csv export; this is ncu's text output "
                              "(a 'Section:' table per launch, written without --csv): export "
                              "again with ncu --csv (--page details or raw), or ingest the "
                              ".ncu-rep report", kind="schema")
        if errors:
            raise FormatError(path, "line 1", "an ncu --csv export with launches; ncu profiled "
                              "nothing and said: " + " ".join(errors)[:500], kind="schema")
        raise FormatError(path, "header", "an ncu --csv header (columns 'ID', 'Kernel Name' "
                          "and, for --page details, 'Metric Name', 'Metric Unit', 'Metric "
                          "Value')", kind="schema")
    return layout, header, rows, console, preamble, tables


def _check_locale(path: str, cells) -> None:
    """Refuse numbers written in a locale whose "." groups digits (``(lineno, column, cell)``)."""
    for lineno, column, cell in cells:
        if _LOCALE.fullmatch(cell):
            raise FormatError(path, tracecsv.where(lineno, column), "numbers with '.' as the "
                              f"decimal point; {cell!r} groups digits with '.' or has a decimal "
                              "comma (ncu ran in a non-English locale, so a '4.750' would mean "
                              "4750): export again with LC_ALL=C", kind="schema")


def parse(data: bytes, path: str, run_id: str) -> Parsed:
    layout, header, rows, console, preamble, tables = _read(data, path)
    if layout == "details":
        iv = header.index("Metric Value")
        _check_locale(path, ((ln, "Metric Value", f[iv]) for ln, f in rows))
    else:
        _check_locale(path, ((ln, header[i], f[i]) for ln, f in rows
                             for i, h in enumerate(header) if h not in IDENTITY and not _nvtx(h)))
    b = _Launches(run_id, path)
    kept = [h for h in header if h not in PRIVATE]
    meta: dict = {"layout": layout, "columns": kept, "console_lines": console,
                  "preamble_lines": preamble}
    if tables:
        meta["repeated_headers"] = len(tables)
        # where each later table starts (its rows before it: details rows, raw launches), so
        # that rebuild writes its header again (a launch is its table and ID)
        meta["table_starts"] = list(tables)
    if tracecsv.encoding_of(data) == "utf-16":  # Windows PowerShell 5's redirection
        meta["encoding"] = "utf-16"
    if layout == "details":
        ident = [h for h in header if h not in METRIC and h not in RULE and h not in PRIVATE]
        pos = {h: i for i, h in enumerate(header)}
        rule_cols = [h for h in header if h in RULE]
        for row_idx, (lineno, f) in enumerate(rows):
            li = b.launch({h: f[pos[h]] for h in ident}, lineno,
                          bisect.bisect_right(tables, row_idx))
            section = f[pos["Section Name"]] if "Section Name" in pos else None
            name = f[pos["Metric Name"]]
            rule_cells = {h: f[pos[h]] for h in rule_cols}
            if name:
                if any(rule_cells.values()):
                    raise FormatError(path, f"line {lineno}", "a metric row or a rule row, "
                                      "not both", kind="schema")
                b.metric(li, row_idx, section, name, f[pos["Metric Unit"]],
                         f[pos["Metric Value"]], lineno)
            else:
                if f[pos["Metric Unit"]] or f[pos["Metric Value"]]:
                    raise FormatError(path, f"line {lineno}", "a 'Metric Name' on a row with "
                                      "a metric value", kind="schema")
                b.rule(li, row_idx, section, rule_cells)
    else:
        if not rows or rows[0][1][header.index("ID")] != "":
            raise FormatError(path, "line 2", "the units row of an ncu --page raw export "
                              "(its 'ID' cell empty) right under the header", kind="schema")
        units = rows[0][1]
        metric_cols = [i for i, h in enumerate(header) if h not in IDENTITY and not _nvtx(h)]
        ident = [i for i, h in enumerate(header)
                 if (h in IDENTITY or _nvtx(h)) and h not in PRIVATE]
        meta["units"] = [units[i] for i in range(len(header)) if header[i] not in PRIVATE]
        row_launch = [-1]
        for r, (lineno, f) in enumerate(rows[1:], start=1):
            li = b.launch({header[i]: f[i] for i in ident}, lineno,
                          bisect.bisect_right(tables, r))
            row_launch.append(li)
            for i in metric_cols:
                if f[i] != "":
                    b.metric(li, None, None, header[i], units[i], f[i], lineno)
        if tables:  # a raw table starts at a launch: the launches of the rows before it
            meta["table_starts"] = [max(row_launch[:t], default=-1) + 1 for t in tables]
    untimed = b.finish()
    n = len(b.ident)
    runs = {"run_id": [run_id], "source_format": [NAME], "layout": [layout],
            "tool_version": [None], "range_count": [1], "launch_count": [n],
            "untimed_launches": [untimed], "metric_rows": [len(b.M["name"])],
            "metadata": [json.dumps(meta, ensure_ascii=False)]}
    tables = {ncu.RUNS.name: ncu.RUNS.arrow(runs), ncu.LAUNCHES.name: ncu.LAUNCHES.arrow(b.L),
              ncu.METRICS.name: ncu.METRICS.arrow(b.M), ncu.RULES.name: ncu.RULES.arrow(b.R)}
    return Parsed(NAME, PARSER_VERSION, tables,
                  {"launches": n, "metrics": len(b.M["name"]), "untimed launches": untimed})


def rebuild(con, run_id: str) -> str:
    """The CSV table (header and rows, the units row of a raw export) from the raw tables,
    without the ``Host Name`` and ``Process Name`` columns (the archive keeps those bytes)."""
    (meta,) = con.execute("select metadata from raw.ncu_runs where run_id = ?",
                          [run_id]).fetchone()
    meta = json.loads(meta)
    header = meta["columns"]
    launches = {}
    for li, lid, kernel, extra in con.execute(
            "select launch_idx, launch_id, kernel, extra from raw.ncu_launches "
            "where run_id = ? order by launch_idx", [run_id]).fetchall():
        launches[li] = {**json.loads(extra), "ID": lid, "Kernel Name": kernel}
    metrics = con.execute(
        "select launch_idx, row_idx, section, name, unit, value, text_value, as_written "
        "from raw.ncu_metrics where run_id = ? order by launch_idx, metric_idx",
        [run_id]).fetchall()
    starts = meta.get("table_starts", [])
    again = [dict(zip(header, header, strict=True))]  # a later table's header
    if meta["layout"] == "raw":
        cells = {li: dict(ident) for li, ident in launches.items()}
        for li, _, _, name, _, value, text, written in metrics:
            cells[li][name] = ncu.spelled(value, text, written)
        units = dict(zip(header, meta["units"], strict=True))
        again.append(units)
        rows = [{h: c.get(h, "") for h in header} for _, c in sorted(cells.items())]
        return tracecsv.rebuild_rows(header, _tables([units], rows, starts, again))
    out: list[tuple[int, dict]] = []
    for li, row_idx, section, name, unit, value, text, written in metrics:
        r = {**launches[li], "Section Name": section, "Metric Name": name, "Metric Unit": unit,
             "Metric Value": ncu.spelled(value, text, written)}
        out.append((row_idx, r))
    for li, row_idx, section, cells in con.execute(
            "select launch_idx, row_idx, section, cells from raw.ncu_rules where run_id = ?",
            [run_id]).fetchall():
        out.append((row_idx, {**launches[li], "Section Name": section, "Metric Name": "",
                              "Metric Unit": "", "Metric Value": "", **json.loads(cells)}))
    out.sort(key=lambda t: t[0])
    return tracecsv.rebuild_rows(header, _tables([], [{h: r.get(h, "") for h in header}
                                                      for _, r in out], starts, again))


def _tables(first: list[dict], rows: list[dict], starts: list[int], again: list[dict]):
    """``first``, then ``rows`` with ``again`` (a later table's header and units row) before
    each row position of ``starts`` (``metadata.table_starts``; at the end: a table without
    rows)."""
    yield from first
    k = 0
    for i, r in enumerate(rows):
        while k < len(starts) and starts[k] <= i:
            yield from again
            k += 1
        yield r
    for _ in starts[k:]:
        yield from again
