"""Page rendering: each page is a small HTML shell, its data as JSON, and the shared assets.

Data travels as ``{"columns": [...], "rows": [[...], ...]}`` tables (compact, and a test can
zip them back into mart rows). The JSON sits in a ``<script type="application/json">``
element with ``<``, ``>``, ``&`` and the JavaScript line separators escaped, so no text from a
profiler file can close the element or start markup.
"""

from __future__ import annotations

import hashlib
import html
import json
import operator
import re

from warehouse.serving.report.data import TOP_KERNELS, jsonable

# columns of marts.kernel_trends kept per label on a series page (plus any column the mart gains)
TREND_KEEP = ("label", "label_seq", "captured_at", "repeats", "median_us", "baseline_from_label",
              "baseline_labels", "baseline_runs", "baseline_median_us", "baseline_mad_us",
              "delta_pct", "p_value", "q_value", "min_attainable_p", "method", "verdict",
              "evidence", "change_point", "floor_pct")
# known kernel_trends columns that are not evidence (identity, lists, settings)
TREND_NOT_EVIDENCE = set(TREND_KEEP) | {
    "series", "source_format", "kernel_kind", "kernel", "kernel_family", "signature",
    "category", "run_values_us", "alpha", "share_of_run", "delta_us"}
LABEL_COLUMNS = ("kernel_kind", "kernel", "share_of_run", "median_us", "baseline_median_us",
                 "delta_us", "delta_pct", "p_value", "q_value", "verdict", "evidence", "method",
                 "repeats", "baseline_runs", "baseline_labels", "baseline_from_label",
                 "change_point")
# run-level columns repeated on every rollup row: shown once, not per kernel
RUN_LEVEL = {"run_id", "series", "label", "captured_at", "source_format", "check_status",
             "level", "signature", "input_shape", "output_shape"}

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def slug(name: str) -> str:
    """A file-name-safe, collision-free name for a series or label."""
    text = str(name)
    base = _UNSAFE.sub("-", text).strip("-.")[:40] or "x"
    return f"{base}-{hashlib.sha256(text.encode()).hexdigest()[:8]}"


def table(rows: list[dict], columns: list[str] | tuple[str, ...]) -> dict:
    columns = list(columns)
    if len(columns) > 1:
        get = operator.itemgetter(*columns)
        try:
            return {"columns": columns, "rows": [list(get(r)) for r in rows]}
        except KeyError:
            pass
    return {"columns": columns, "rows": [[r.get(c) for c in columns] for r in rows]}


def evidence_columns(sample: dict) -> list[str]:
    """Columns a mart row carries beyond the known ones (e.g. min_detectable_pct): shown as
    evidence when present."""
    return [c for c in sample if c not in TREND_NOT_EVIDENCE]


def _json(data) -> str:
    try:
        text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except ValueError:  # a NaN or infinity somewhere: null, as everywhere else in the report
        text = json.dumps(jsonable(data), ensure_ascii=False, separators=(",", ":"),
                          allow_nan=False)
    return (text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def shell(title: str, data: dict, *, plotly: bool = True) -> str:
    root = data.get("root", "")
    t = html.escape(title if len(title) <= 200 else title[:199] + "…")
    return (
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
        f"<title>{t} · pwh report</title>"
        f"<link rel=\"stylesheet\" href=\"{root}assets/report.css\"></head>\n<body>"
        "<main id=\"app\"><noscript>This report draws its tables and plots with JavaScript; "
        "enable it to see them.</noscript></main>\n"
        f"<script type=\"application/json\" id=\"pwh-data\">{_json(data)}</script>\n"
        + (f"<script src=\"{root}assets/plotly.min.js\"></script>\n" if plotly else "")
        + f"<script src=\"{root}assets/report.js\"></script>\n</body></html>\n")


# ------------------------------------------------------------------------------- pages

CHANGE_COLUMNS = ("series", "slug", "has_page", "kind", "name", "kernel", "metric", "anchor",
                  "label", "label_slug",
                  "label_seq", "captured_at", "verdict", "delta_pct", "now_pct", "now_label",
                  "adds_us", "adds_share", "baseline", "now", "floor", "q_value", "p_value",
                  "confirmed_by_label", "min_detectable_pct", "runs_needed", "method",
                  "evidence", "status", "trail_seq", "trail", "new_kernels", "gone_kernels")


def anchor(kind: str, name: str, *, trace: bool = False) -> str:
    """The id of a key's plot on its series page (``series/<slug>.html#<anchor>``): ``k-…``
    for a kernel's plot, ``f-…`` for a trace fact's verdicts (``trace``: kind is its fact)."""
    if kind == "metric":
        return "metrics"
    return ("f-" if trace else "k-") + hashlib.sha256(f"{kind}\x1f{name}".encode()).hexdigest()[:12]


def _change_rows(changes: list[dict], trails: dict, have_pages: set[str],
                 swapped: dict) -> list[dict]:
    out = []
    for c in changes:
        t = trails.get((c["series"], c["kind"], c["name"]), {})
        sw = swapped.get((c["series"], c["label"]), {})
        out.append({**c, "slug": slug(c["series"]), "has_page": c["series"] in have_pages,
                    "label_slug": slug(c["label"]),
                    "anchor": anchor(c["kind"], c["name"], trace=bool(c.get("trace"))),
                    "trail_seq": t.get("seq"), "trail": t.get("median"),
                    "new_kernels": sw.get("new", 0), "gone_kernels": sw.get("gone", 0)})
    return out


def index_page(overview: list[dict], effect: list[dict], history: list[dict], trails: dict,
               have_pages: set[str], meta: dict, swapped: dict | None = None) -> str:
    """``effect`` / ``history``: effects.changes(); ``trails``: effects.trails() of their keys;
    ``swapped``: swaps.counts() (kernels new / gone at the label a change began at)."""
    swapped = swapped or {}
    per: dict[str, dict[str, int]] = {}
    for c in effect:
        d = per.setdefault(c["series"], {"up": 0, "down": 0})
        d["up" if c["sign"] > 0 else "down"] += 1
    series = []
    for r in overview:
        s = slug(r["series"])
        series.append({**r, "slug": s, "has_page": r["series"] in have_pages,
                       "label_slug": None if r["latest_label"] is None
                       else slug(r["latest_label"]),
                       "effect_up": per.get(r["series"], {}).get("up", 0),
                       "effect_down": per.get(r["series"], {}).get("down", 0)})
    data = {"page": "index", "root": "", **meta,
            "series": series,
            "effect": table(_change_rows(effect, trails, have_pages, swapped), CHANGE_COLUMNS),
            "history": table(_change_rows(history, trails, have_pages, swapped),
                             CHANGE_COLUMNS)}
    if not overview:
        data["empty"] = ("Nothing to report yet: the published snapshot has no runs. Ingest "
                         "runs (pwh ingest), build (pwh build), then run pwh report again.")
    # the index draws no plotly figure (its sparklines are SVG): it loads without plotly.js
    return shell("Profile Warehouse report", data, plotly=False)


def label_list(labels: list[tuple]) -> list[dict]:
    """Labels of a series, in order, from (label, label_seq, captured_at) tuples."""
    return [{"label": lab, "label_seq": seq, "captured_at": jsonable(cap), "slug": slug(lab)}
            for lab, seq, cap in sorted(labels, key=lambda x: x[1])]


def shown_kernels(flags: list[dict], shares: dict[tuple[str, str], float | None]
                  ) -> list[tuple[str, str]]:
    """The kernels a series page plots: those ``changed`` (see data.kernel_flags) and the top
    kernels by share of run at the latest label; regressed/improved at the latest label first,
    then those regressed/improved at an earlier label, then by share."""
    latest_change = {(f["kernel_kind"], f["kernel"]) for f in flags if f["latest_change"]}
    confirmed = {(f["kernel_kind"], f["kernel"]) for f in flags if f.get("confirmed")}
    changed = {(f["kernel_kind"], f["kernel"]) for f in flags if f["changed"]}
    keys = [(f["kernel_kind"], f["kernel"]) for f in flags]
    top = sorted(keys, key=lambda k: (-(shares.get(k) or 0.0), k))[:TOP_KERNELS]
    return sorted(changed | set(top), key=lambda k: (
        k not in latest_change, k not in confirmed, -(shares.get(k) or 0.0), k))


def series_page(series: str, labels: list[dict], trends: list[dict], points: list[dict],
                runs: int, shown: list[tuple[str, str]], latest_rows: list[dict], *,
                steps: list[dict] | None = None, metrics: dict | None = None,
                trace: dict | None = None) -> str:
    """``trends``: the kernel_trends rows of the ``shown`` kernels; ``latest_rows``: the
    comparison rows of the latest label (every kernel: the table of the others); ``steps``:
    facts.series_steps (per run step time and GPU idle share); ``metrics``:
    facts.metric_trends; ``trace``: facts.trace_trends (the trace facts' verdicts per label,
    each key under the anchor the index links to)."""
    extra = evidence_columns(trends[0]) if trends else []
    keep = list(TREND_KEEP) + extra
    by_kernel: dict[tuple[str, str], list[dict]] = {}
    for r in trends:
        by_kernel.setdefault((r["kernel_kind"], r["kernel"]), []).append(r)
    pts: dict[tuple[str, str], list[dict]] = {}
    for p in points:
        pts.setdefault((p["kernel_kind"], p["kernel"]), []).append(p)
    latest = {(r["kernel_kind"], r["kernel"]): r for r in latest_rows}
    kernels = [{"kind": k[0], "kernel": k[1], "anchor": anchor(k[0], k[1]),
                "share_of_run": (latest.get(k) or {}).get("share_of_run"),
                "trend": table(by_kernel[k], keep),
                "points": table(pts.get(k, []), ["run_id", "label", "captured_at", "value_us"])}
               for k in shown]
    others = [r for k, r in sorted(latest.items()) if k not in set(shown)]
    return shell(series, {
        "page": "series", "root": "../", "series": series, "slug": slug(series),
        "runs": runs, "labels": labels, "evidence_columns": extra, "kernels": kernels,
        "others": table(others, ["kernel_kind", "kernel", "label", "verdict", "median_us",
                                 "delta_pct", "share_of_run"]),
        "steps": table(steps, ["run_id", "label", "captured_at", "steps", "step_ms",
                               "idle_share"]) if steps else None,
        "metrics": table(metrics["rows"], ["kernel", "metric", "unit", "label", "median",
                                           "baseline", "delta_pct", "verdict", "changed",
                                           "plotted", "labels", "medians", "baselines",
                                           "verdicts", "floor_pct"])
        if metrics and metrics.get("rows") else None,
        "trace": {
            "keys": [{"fact": k["fact"], "key": k["key"], "anchor": anchor(k["fact"], k["key"], trace=True),
                      "changed": k["changed"], "change": k["change"],
                      "latest_verdict": k["latest_verdict"],
                      "rows": table(k["rows"], trace["columns"])} for k in trace["keys"]],
            "latest": table(trace["latest"], ["fact", "key", "changed", "label", "label_seq",
                                              "median", "baseline_median", "delta_pct",
                                              "verdict"])}
        if trace and trace.get("keys") is not None else None})


FACT_CHANGE_COLUMNS = ("kind", "name", "what", "unit", "median", "baseline", "delta_pct",
                       "verdict", "q_value", "p_value", "evidence")


SWAP_COLUMNS = ("kernel_kind", "kernel", "at_label", "at_seq", "median_us", "repeats",
                "share_of_run", "calls", "last_seen_label", "last_seen_seq")


def label_page(series: str, labels: list[dict], i: int, rows: list[dict],
               run_ids: list[str], *, facts: list[dict] | None = None,
               swaps: dict | None = None, swap_sql: str | None = None) -> str:
    """``facts``: facts.label_changes() of this label (metrics and trace facts changed here);
    ``swaps``: this label's entry of swaps.by_label() (kernels new here, gone since the
    previous label; None or empty: none), ``swap_sql`` the query behind them."""
    lab = labels[i]
    ev_cols = sorted({c for r in rows[:1] for c in evidence_columns(r)})
    swaps = swaps or {}
    return shell(f"{lab['label']} vs baseline", {
        "page": "label", "root": "../../", "series": series, "series_slug": slug(series),
        "label": lab["label"], "label_seq": lab["label_seq"], "captured_at": lab["captured_at"],
        "prev_label": labels[i - 1]["label"] if i > 0 else None,
        "swaps": {c: table(swaps.get(c, []), SWAP_COLUMNS) for c in ("new", "gone")}
        if i > 0 else None,
        "swap_sql": swap_sql if i > 0 else None,
        "prev": labels[i - 1]["slug"] if i > 0 else None,
        "next": labels[i + 1]["slug"] if i + 1 < len(labels) else None,
        "evidence_columns": ev_cols,
        "rows": table(rows, list(LABEL_COLUMNS) + ev_cols),
        "facts": table(facts, FACT_CHANGE_COLUMNS) if facts else None,
        "runs": run_ids})


def _shown_columns(rows: list[dict], first: str) -> list[str]:
    """The columns of a rollup worth a column: the key first, then every column with a value
    in some row, except run-level ones."""
    if not rows:
        return [first]
    cols = [c for c in rows[0] if c not in RUN_LEVEL and c != first
            and any(r.get(c) is not None for r in rows)]
    return [first, *cols]


def run_page(run: dict, rollup: list[dict], cats: list[dict], label_slug: str | None, *,
             facts: dict | None = None) -> str:
    """``facts``: this run's entry of facts.run_facts (steps, GPU timeline, top operators)."""
    rid = run["run_id"]
    facts = facts or {}
    rcols = _shown_columns(rollup, "kernel")
    ccols = _shown_columns(cats, "category")
    return shell(f"run {rid[:12]}", {
        "page": "run", "root": "../", "run": run, "series_slug": slug(run["series"]),
        "label_slug": label_slug,
        "rollup": table(rollup, rcols),
        "categories": table(cats, ccols) if cats else None,
        "steps": table(facts["steps"], ["rank", "step", "duration_ns"])
        if facts.get("steps") else None,
        "timeline": table(facts["timeline"], list(facts["timeline"][0]))
        if facts.get("timeline") else None,
        "ops": table(facts["ops"], ["op", "kernel_ns", "kernels", "calls", "cpu_ns", "ranks"])
        if facts.get("ops") else None,
        "ops_total_ns": facts.get("ops_total_ns"), "ops_count": facts.get("ops_count"),
        "sql": {
            "rollup": f"select {', '.join(rcols)}\nfrom marts.kernel_run_rollup\n"
                      f"where run_id = '{rid}'\norder by rank_in_run;",
            "categories": f"select {', '.join(ccols)}\nfrom marts.audit_category_rollup\n"
                          f"where run_id = '{rid}' and level = 'run'\norder by us desc;",
        }})
