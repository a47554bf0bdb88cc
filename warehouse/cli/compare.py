"""Compare one label of a series with its baseline, fact by fact: the CI gate.

Every kernel of the label, sorted by |delta|, with its share of the run, median, baseline
median, delta, q-value, verdict and evidence, read from the published snapshot
(marts.kernel_trends). A series with more facts is judged on them too, each row naming its
fact: a Kineto trace series on its step time, GPU idle share, communication time and GPU time
per operator (marts.trace_trends; higher is worse for all four), an Nsight Compute series on
every metric of every kernel (marts.metric_trends; durations, throughputs, occupancy and DRAM
bytes first). By default the label is the series' latest and the baseline is the one its
verdicts were decided on; --baseline L0 judges the label against L0's runs alone with the
same method (rank test, floor, alpha as recorded in the mart), for every fact.

exit status: 1 when a verdict that gates is at or above --fail-on (regressed > inconclusive;
default regressed): every kernel and trace fact gates; a metric gates only where its direction
is documented (durations, elapsed cycles: there it says regressed/improved; any other metric
says increased/decreased and never fails the gate). 0 otherwise; 2 when it cannot compare: a
usage error (unknown series or label: the message lists the known ones), no warehouse, no
snapshot, no models built, a query that failed or timed out. --format markdown prints a
comment to post on a pull request. CI recipe: docs/ci.md. The same comparison as a page:
pwh report (docs/report.md)."""

from __future__ import annotations

import sys

COMMAND = (62, "compare", "compare a label with its baseline (kernels, trace facts, metrics); "
                          "the CI gate")

COLUMNS = ("verdict", "kernel_kind", "kernel", "share_of_run", "median_us", "baseline_median_us",
           "delta_pct", "p_value", "q_value", "repeats", "baseline_runs", "evidence")
# a series with trace facts or Nsight Compute metrics: every row names its fact; ``name`` is
# the kernel, the operator (op_kernel_ns) or "(run)"; the medians are in the row's ``unit``
MIXED_COLUMNS = ("verdict", "fact", "kernel_kind", "name", "metric", "share_of_run", "median",
                 "baseline_median", "unit", "delta_pct", "p_value", "q_value", "repeats",
                 "baseline_runs", "gates", "evidence")
BLANK = ("kernel_kind", "metric")  # text columns of some facts only: blank, not NULL, elsewhere


def add_arguments(p):
    p.add_argument("--series", required=True, help="the series (workload) to compare")
    p.add_argument("--label", help="the label (build) to judge (default: the latest)")
    p.add_argument("--baseline", metavar="L0",
                   help="compare with this label's runs alone (default: the verdict baseline)")
    p.add_argument("--fail-on", choices=["regressed", "inconclusive", "never"],
                   default="regressed",
                   help="exit 1 when a verdict is at or above this (regressed > inconclusive), "
                        "on any kernel, trace fact or metric of known direction; default "
                        "regressed")
    p.add_argument("--format", choices=["table", "json", "markdown"], default="table")
    from warehouse.serving.query import add_cli_options

    add_cli_options(p)


# Exit 1 is reserved for "a gating verdict is at or above --fail-on": everything else that
# keeps the gate from deciding (no warehouse, no snapshot, no models, an unknown name, a query
# that failed or timed out) is 2, so that CI can tell "regressed" from "could not compare".
EXIT_FAILED_GATE = 1
EXIT_CANNOT_COMPARE = 2


def run(args, settings) -> int:
    from warehouse.errors import PwhError
    from warehouse.serving.query import QueryInterrupted

    try:
        return _run(args, settings)
    except QueryInterrupted as exc:  # Ctrl-C: 130, as for every command; never 1
        print(f"pwh compare: {exc}", file=sys.stderr)
        return 130
    except PwhError as exc:
        print(f"pwh compare: {exc}", file=sys.stderr)
        return EXIT_CANNOT_COMPARE


def _run(args, settings) -> int:
    from warehouse.serving.query import cli_connect, hard_deadline
    from warehouse.serving.report import compare as cmpmod
    from warehouse.serving.report.data import has_marts

    con = cli_connect(args, settings)
    try:
        with hard_deadline(con.timeout):
            if not has_marts(con):
                print(f"pwh compare: {settings.warehouse}: no models built yet (run `pwh build`)",
                      file=sys.stderr)
                return EXIT_CANNOT_COMPARE
            try:
                c = cmpmod.compare(con, args.series, args.label, args.baseline)
            except cmpmod.UnknownName as exc:
                print(f"pwh compare: {exc}", file=sys.stderr)
                return EXIT_CANNOT_COMPARE
    finally:
        con.close()
    failed = c.fails(args.fail_on)
    # decided before printing: a reader that leaves early (`| head`) cannot change the status
    status = EXIT_FAILED_GATE if failed else 0
    print(render(c, args.format, args.fail_on, failed))
    return status


def _status(c, fail_on: str, failed: bool) -> str:
    n = c.counts()
    counts = ", ".join(f"{v} {k}" for k, v in n.items())
    gate = "FAIL" if failed else "ok"
    free = len(c.rows) - len(c.gating())
    note = (f"; {free} metric row{'s' if free != 1 else ''} of unknown direction never gate"
            if free else "")
    return f"{gate}: {counts} (fail on: {fail_on}{note})"


def _facts(c) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in c.rows:
        out[r.get("fact")] = out.get(r.get("fact"), 0) + 1
    return out


def render(c, fmt: str, fail_on: str, failed: bool) -> str:
    head = (f"series {c.series}, label {c.label} (#{c.label_seq}, captured {c.captured_at}) "
            f"vs {c.baseline}")
    if fmt == "json":
        from warehouse.serving.results import to_json

        doc = {"series": c.series, "label": c.label, "label_seq": c.label_seq,
               "captured_at": c.captured_at, "baseline": c.baseline,
               "fail_on": fail_on, "failed": failed, "counts": c.counts()}
        if c.mixed:
            doc.update(facts=_facts(c), gating_rows=len(c.gating()))
        return to_json({**doc, "rows": c.rows})
    if fmt == "markdown":
        return markdown(c, head, _status(c, fail_on, failed), fail_on)
    from warehouse.serving.results import format_result

    if c.mixed:
        # every column some row fills; medians with their unit, each row in its own scale
        cols = [k for k in MIXED_COLUMNS if any(r.get(k) is not None for r in c.rows)
                and (k != "gates" or len(c.gating()) < len(c.rows))]
        width = max((len(_num(r.get(k)) or "") for r in c.rows
                     for k in ("median", "baseline_median")), default=0)
        cells = [tuple((_num(r.get(k)) or "").rjust(width) if k in ("median", "baseline_median")
                       else "" if k in BLANK and r.get(k) is None
                       else _rounded(k, r.get(k)) for k in cols) for r in c.rows]
        body = format_result(cols, cells, "table", what="row", digits=4)
    else:
        # q exists only for changes a later label confirmed: its column only when one has it
        cols = [k for k in COLUMNS
                if k != "q_value" or any(r.get(k) is not None for r in c.rows)]
        body = format_result(cols, [tuple(_rounded(k, r.get(k)) for k in cols) for r in c.rows],
                             "table", what="kernel", digits=4)
    return f"{head}\n{body}\n{_status(c, fail_on, failed)}"


def _num(v) -> str | None:
    """A median as a person reads it, in its own scale: 4 significant digits, no exponent
    between 1e-4 and 1e15 (145234, 55.23, 0.01234)."""
    import math

    if not isinstance(v, int | float) or isinstance(v, bool):
        return None if v is None else str(v)
    if not math.isfinite(v) or v == 0:
        return str(v) if v else "0"
    a = abs(v)
    if a >= 1e15 or a < 1e-4:
        return f"{v:.4g}"
    return f"{v:.{max(0, 3 - math.floor(math.log10(a)))}f}"


# the table's figures to the precision a person reads (the evidence says "+25.0%"); json has
# them in full
ROUNDED = {"delta_pct": lambda v: round(v, 1), "share_of_run": lambda v: round(v, 4),
           "p_value": lambda v: float(f"{v:.2g}"), "q_value": lambda v: float(f"{v:.2g}")}


def _rounded(key: str, v):
    import math

    return ROUNDED[key](v) if isinstance(v, float) and key in ROUNDED and math.isfinite(v) else v


def _md(v, limit: int = 120) -> str:
    """A cell of a Markdown table: text only (no HTML, no pipes, one line, bounded)."""
    if v is None:
        return ""
    if isinstance(v, float):
        v = f"{v:.3g}"
    s = " ".join(str(v).split())
    if len(s) > limit:
        s = s[: limit - 1] + "…"
    for a, b in (("&", "&amp;"), ("<", "&lt;"), (">", "&gt;"), ("|", "&#124;"), ("`", "&#96;"),
                 ("*", "\\*"), ("_", "\\_"), ("[", "\\["), ("]", "\\]")):
        s = s.replace(a, b)
    return s


# GitHub refuses a pull-request comment longer than this many characters.
GITHUB_COMMENT_LIMIT = 65_536
ICON = {"regressed": "🔴 regressed", "improved": "🟢 improved",
        "inconclusive": "🟡 inconclusive", "unchanged": "unchanged"}
MD_HEADER = ("| verdict | kernel | share of run | median µs | baseline µs | delta | p (q) | "
             "evidence |\n|---|---|--:|--:|--:|--:|--:|---|")
# the collapsed sections, in the order they are shown (and cut last-first when too long)
COLLAPSED = ("inconclusive", "unchanged")


def _p(r) -> str:
    """The label's own p-value, and the q-value of a confirmed change when there is one."""
    def fmt(x):
        return f"{x:.2f}" if x >= 0.01 else f"{x:.1e}"

    p, q = r.get("p_value"), r.get("q_value")
    out = "" if p is None else fmt(p)
    if q is not None:
        out += f" (q {fmt(q)})"
    return out.strip()


MD_HEADER_MIXED = ("| verdict | fact | name | median | baseline | delta | p (q) | evidence |"
                   "\n|---|---|---|--:|--:|--:|--:|---|")
MOVED = "increased or decreased"  # the mixed comment's section of metrics of unknown direction


def _md_name(r) -> str:
    """What a row of a mixed comparison is about: the kernel (kind), the operator or "(run)"
    of a trace fact, a metric of a kernel."""
    if r.get("fact") == "kernel":
        return f"{_md(r.get('kernel'))} ({_md(r.get('kernel_kind'))})"
    if r.get("fact") == "metric":
        return f"{_md(r.get('metric'), 80)} of {_md(r.get('kernel'))}"
    return _md(r.get("name"))


def markdown(c, head: str, status: str, fail_on: str = "regressed",
             limit: int = GITHUB_COMMENT_LIMIT) -> str:
    """The comparison as a pull-request comment: the changed rows (regressed, improved, and
    whatever fails the gate) in a table first, the others collapsed by verdict in
    ``<details>``; the whole at most ``limit`` characters (GitHub's comment limit), the rows cut
    from the least telling end and the cut said. A series with kernels only lists kernels as it
    always did; one with trace facts or metrics names each row's fact, with medians in their
    units, and folds the metrics of unknown direction that moved (increased, decreased) apart."""
    from warehouse.serving.report.data import SEVERITY
    from warehouse.serving.results import number_format

    mixed = c.mixed
    noun = "row" if mixed else "kernel"
    header = MD_HEADER_MIXED if mixed else MD_HEADER
    us = number_format([r.get(k) for r in c.rows for k in ("median_us", "baseline_median_us")],
                       digits=4)

    def num(v):
        return "" if v is None else (us or "{}").format(v)

    def delta(r) -> str:
        return "" if r.get("delta_pct") is None else f"{r['delta_pct']:+.1f}%"

    def row(r) -> str:
        share = "" if r.get("share_of_run") is None else f"{100 * r['share_of_run']:.1f}%"
        return " | ".join([
            "", ICON.get(r.get("verdict"), _md(r.get("verdict"))),
            f"{_md(r.get('kernel'))} ({_md(r.get('kernel_kind'))})", share,
            num(r.get("median_us")), num(r.get("baseline_median_us")), delta(r), _p(r),
            _md(r.get("evidence"), 200), ""]).strip()

    def unit(v, u) -> str:
        return "" if v is None else f"{_num(v)} {_md(u, 20)}".strip()

    def mixed_row(r) -> str:
        return " | ".join([
            "", ICON.get(r.get("verdict"), _md(r.get("verdict"))), _md(r.get("fact")),
            _md_name(r), unit(r.get("median"), r.get("unit")),
            unit(r.get("baseline_median"), r.get("unit")), delta(r), _p(r),
            _md(r.get("evidence"), 200), ""]).strip()

    bar = SEVERITY.get(fail_on, 99) if fail_on != "never" else 99
    shown = [r for r in c.rows if r.get("verdict") in ("regressed", "improved")
             or r.get("gates", True) and SEVERITY.get(r.get("verdict"), 0) >= bar]
    shown.sort(key=lambda r: -SEVERITY.get(r.get("verdict"), 0))  # stable: |delta| within
    rest = {v: [r for r in c.rows if r not in shown and r.get("verdict") == v]
            for v in COLLAPSED}
    moved = [r for r in c.rows if r not in shown and r.get("verdict") in ("increased",
                                                                           "decreased")]
    other = [r for r in c.rows if r not in shown and r not in moved
             and r.get("verdict") not in COLLAPSED]
    if other:
        rest["other"] = other
    # the moved metrics right after the changed ones (and cut just before them)
    sections = [("changed", shown), *([(MOVED, moved)] if moved else []), *rest.items()]
    rendered = {name: [(mixed_row if mixed else row)(r) for r in rs] for name, rs in sections}
    summary = {MOVED: f"{len(moved)} metric{'s' if len(moved) != 1 else ''} of unknown "
                      f"direction increased or decreased (never failing the gate)"}

    def text(cut: dict[str, int]) -> str:
        out = [f"### pwh compare: {_md(head, 400)}", "", f"**{_md(status, 400)}**", ""]
        for name, rs in sections:
            lines = rendered[name][: len(rs) - cut.get(name, 0)]
            more = cut.get(name, 0)
            if name == "changed":
                if not rs:
                    out += [("Nothing regressed or improved." if mixed else
                             "No kernel regressed or improved.")
                            + (f" (no {noun}s)" if not c.rows else ""), ""]
                    continue
                out += [f"**Changed: {len(rs)} of {len(c.rows)} {noun}s**", "", header, *lines]
            elif not rs:
                continue
            else:
                out += [f"<details><summary>{summary.get(name, f'{len(rs)} {name}')}</summary>",
                        "", header, *lines]
            if more:
                out += ["", f"*{more} more {name} {noun}{'s' if more != 1 else ''} not shown "
                            f"(a comment holds at most {limit:,} characters): `pwh compare "
                            f"--format table` or `--format json` lists every {noun}.*"]
            out.append("" if name == "changed" else "\n</details>\n")
        return "\n".join(out).rstrip("\n")

    cut: dict[str, int] = {}
    out = text(cut)
    # cut the least telling rows first: unchanged, then inconclusive, then the moved metrics,
    # then the changed ones
    for name, rs in reversed(sections):
        while len(out) + 1 > limit and cut.get(name, 0) < len(rs):
            over = len(out) + 1 - limit
            per = max(1, sum(map(len, rendered[name])) // max(1, len(rs)))
            cut[name] = min(len(rs), cut.get(name, 0) + max(1, over // per))
            out = text(cut)
    return out
