"""Compare one label of a series with its baseline, kernel by kernel: the CI gate.

Every kernel of the label, sorted by |delta|, with its share of the run, median, baseline
median, delta, q-value, verdict and evidence, read from the published snapshot
(marts.kernel_trends). By default the label is the series' latest and the baseline is the one
its verdicts were decided on; --baseline L0 judges the label against L0's runs alone with the
same method (rank test, floor, alpha as recorded in the mart).

exit status: 1 when a kernel's verdict is at or above --fail-on (regressed > inconclusive;
default regressed), 0 otherwise; 2 when it cannot compare: a usage error (unknown series or
label: the message lists the known ones), no warehouse, no snapshot, no models built, a query
that failed or timed out. --format markdown prints a table to post on a pull request.
CI recipe: docs/ci.md. The same comparison as a page: pwh report (docs/report.md)."""

from __future__ import annotations

import json
import sys

COMMAND = (62, "compare", "compare a label with its baseline kernel by kernel; the CI gate")

COLUMNS = ("verdict", "kernel_kind", "kernel", "share_of_run", "median_us", "baseline_median_us",
           "delta_pct", "q_value", "repeats", "baseline_runs", "evidence")


def add_arguments(p):
    p.add_argument("--series", required=True, help="the series (workload) to compare")
    p.add_argument("--label", help="the label (build) to judge (default: the latest)")
    p.add_argument("--baseline", metavar="L0",
                   help="compare with this label's runs alone (default: the verdict baseline)")
    p.add_argument("--fail-on", choices=["regressed", "inconclusive", "never"],
                   default="regressed",
                   help="exit 1 when a verdict is at or above this (regressed > inconclusive); "
                        "default regressed")
    p.add_argument("--format", choices=["table", "json", "markdown"], default="table")
    from warehouse.serving.query import add_cli_options

    add_cli_options(p)


# Exit 1 is reserved for "a kernel's verdict is at or above --fail-on": everything else that
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
    print(render(c, args.format, args.fail_on, failed))
    return EXIT_FAILED_GATE if failed else 0


def _status(c, fail_on: str, failed: bool) -> str:
    n = c.counts()
    counts = ", ".join(f"{v} {k}" for k, v in n.items())
    gate = "FAIL" if failed else "ok"
    return f"{gate}: {counts} (fail on: {fail_on})"


def render(c, fmt: str, fail_on: str, failed: bool) -> str:
    head = (f"series {c.series}, label {c.label} (#{c.label_seq}, captured {c.captured_at}) "
            f"vs {c.baseline}")
    if fmt == "json":
        return json.dumps({"series": c.series, "label": c.label, "label_seq": c.label_seq,
                           "captured_at": c.captured_at, "baseline": c.baseline,
                           "fail_on": fail_on, "failed": failed, "counts": c.counts(),
                           "rows": c.rows}, indent=2, default=str)
    if fmt == "markdown":
        return markdown(c, head, _status(c, fail_on, failed))
    from warehouse.serving.query import format_result

    body = format_result(list(COLUMNS), [tuple(_short(r.get(k)) for k in COLUMNS)
                                         for r in c.rows], "table")
    return f"{head}\n{body}\n{_status(c, fail_on, failed)}"


def _short(v):
    if isinstance(v, float):
        return float(f"{v:.4g}")
    return v


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


def markdown(c, head: str, status: str) -> str:
    icon = {"regressed": "🔴 regressed", "improved": "🟢 improved",
            "inconclusive": "🟡 inconclusive", "unchanged": "unchanged"}
    out = [f"### pwh compare: {_md(head, 400)}", "", f"**{_md(status, 400)}**", "",
           "| verdict | kernel | share of run | median µs | baseline µs | delta | q | evidence |",
           "|---|---|--:|--:|--:|--:|--:|---|"]
    for r in c.rows:
        delta = "" if r.get("delta_pct") is None else f"{r['delta_pct']:+.1f}%"
        share = "" if r.get("share_of_run") is None else f"{100 * r['share_of_run']:.1f}%"
        out.append(" | ".join([
            "", icon.get(r.get("verdict"), _md(r.get("verdict"))),
            f"{_md(r.get('kernel'))} ({_md(r.get('kernel_kind'))})", share,
            _md(r.get("median_us")), _md(r.get("baseline_median_us")), delta,
            _md(r.get("q_value")), _md(r.get("evidence"), 200), ""]).strip())
    if not c.rows:
        out.append("| | (no kernels) | | | | | | |")
    return "\n".join(out)
