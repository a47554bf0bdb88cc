"""Views of the facts beyond kernel time, shown only where their marts exist in the snapshot:

* ``marts.step_times`` (run_id, job, rank, step, start_ns, duration_ns) and
  ``marts.gpu_timeline`` (run_id, rank, device, step, span_ns, busy_ns, idle_ns, compute_ns,
  communication_ns, memory_ns, comm_compute_overlap_ns; ``step`` NULL for the whole run):
  a series' step time and GPU idle share over its labels, a run's steps and timeline;
* ``marts.op_rollup`` (run_id, rank, op, kernels, kernel_ns, calls, cpu_ns): a run's top
  operators;
* ``marts.metric_trends`` (series, kernel, metric, label, median, baseline (or
  baseline_median), verdict, …):
  a kernel's metric trends (the metrics that matter plotted, every metric in a searchable table);
* ``marts.trace_trends`` (series, fact, key, label, label_seq, median, baseline_median,
  delta_pct, verdict, …): the verdicts of a series' trace facts per label (step time, GPU idle
  share, communication, GPU time per operator), each fact key with a confirmed change and every
  ``(run)`` key in full, every key at its latest label in a table.

A snapshot without a mart (or with a mart lacking a column these views read) shows no view of
it: nothing is guessed.
"""

from __future__ import annotations

from warehouse.serving.report.data import rows, table_columns

CONTRACT = {
    "step_times": ("run_id", "rank", "step", "duration_ns"),
    "gpu_timeline": ("run_id", "rank", "device", "step", "span_ns", "busy_ns", "idle_ns"),
    "op_rollup": ("run_id", "rank", "op", "kernels", "kernel_ns", "calls", "cpu_ns"),
    "metric_trends": ("series", "kernel", "metric", "label", "median", "verdict"),
    "trace_trends": ("series", "fact", "key", "label", "label_seq", "median", "baseline_median",
                     "delta_pct", "verdict"),
}
# columns of marts.trace_trends a series page keeps per label (those the mart has)
TRACE_KEEP = ("label", "label_seq", "repeats", "median", "baseline_median", "delta_pct",
              "p_value", "q_value", "min_detectable_pct", "confirmed_by_label", "method",
              "evidence", "floor_pct", "baseline_from_label", "baseline_runs", "verdict")
CHANGES = ("regressed", "improved")
TIMELINE_PARTS = ("compute_ns", "communication_ns", "memory_ns", "comm_compute_overlap_ns")
# the Nsight Compute metrics a kernel's page plots first (prefixes of metric names); every
# other metric is in the table
KEY_METRICS = ("gpu__time_duration", "sm__throughput", "gpu__compute_memory_throughput",
               "dram__throughput", "sm__warps_active", "dram__bytes")
TOP_OPS = 20


def present(con) -> set[str]:
    """The fact marts the snapshot has with every column the views read."""
    out = set()
    for name, need in CONTRACT.items():
        cols = set(table_columns(con, "marts", name))
        if set(need) <= cols and (name != "metric_trends" or _baseline(cols)):
            out.add(name)
    return out


def _baseline(cols: set[str]) -> str | None:
    """metric_trends' baseline column: ``baseline`` (the contract) or ``baseline_median``."""
    return next((c for c in ("baseline", "baseline_median") if c in cols), None)


def series_steps(con, series: str, have: set[str]) -> list[dict]:
    """Per run of ``series`` with steps or a GPU timeline: its label, the median step time
    (ms, over its ranks' steps), the number of steps and the GPU idle share (idle / span over
    its devices, whole-run rows; summed over steps where a run has no whole-run row)."""
    if not have & {"step_times", "gpu_timeline"}:
        return []
    ctes, cols, joins, where = [], [], [], []
    if "step_times" in have:
        ctes.append("""st as (
            select s.run_id, count(*) as steps, median(s.duration_ns) / 1e6 as step_ms
            from marts.step_times as s
            inner join r on r.run_id = s.run_id
            group by s.run_id
        )""")
        cols += ["st.steps", "st.step_ms"]
        joins.append("left join st on st.run_id = r.run_id")
        where.append("st.run_id is not null")
    if "gpu_timeline" in have:
        ctes.append("""gt as (
            select
                g.run_id,
                coalesce(
                    sum(g.idle_ns) filter (where g.step is null)::double
                        / nullif(sum(g.span_ns) filter (where g.step is null), 0),
                    sum(g.idle_ns) filter (where g.step is not null)::double
                        / nullif(sum(g.span_ns) filter (where g.step is not null), 0)
                ) as idle_share
            from marts.gpu_timeline as g
            inner join r on r.run_id = g.run_id
            group by g.run_id
        )""")
        cols.append("gt.idle_share")
        joins.append("left join gt on gt.run_id = r.run_id")
        where.append("gt.run_id is not null")
    out = rows(con, f"""
        with r as (
            select run_id, label, captured_at
            from marts.run_summary
            where series = $series
        ),

        {', '.join(ctes)}

        select
            r.run_id,
            r.label,
            strftime(r.captured_at, '%Y-%m-%dT%H:%M:%S') as captured_at,
            {', '.join(cols)}
        from r
        {' '.join(joins)}
        where {' or '.join(where)}
        order by r.captured_at, r.run_id
    """, {"series": series})  # noqa: S608 - fixed text only
    for o in out:
        o.setdefault("steps", None)
        o.setdefault("step_ms", None)
        o.setdefault("idle_share", None)
    return out


def run_facts(con, run_ids: list[str], have: set[str]) -> dict[str, dict]:
    """Per run: ``steps`` (rank, step, duration_ns), ``timeline`` (whole-run rows of
    marts.gpu_timeline per rank and device), ``ops`` (the top operators by kernel time, summed
    over ranks, with ``ops_total_ns`` and ``ops_count``)."""
    out: dict[str, dict] = {}
    if not run_ids or not have & {"step_times", "gpu_timeline", "op_rollup"}:
        return out
    ids = list(run_ids)
    if "step_times" in have:
        for r in rows(con, """
            select s.run_id, s.rank, s.step, s.duration_ns
            from marts.step_times as s
            where s.run_id in (select unnest(?::varchar[]))
            order by s.run_id, s.step, s.rank
        """, [ids]):
            out.setdefault(r.pop("run_id"), {}).setdefault("steps", []).append(r)
    if "gpu_timeline" in have:
        extra = [c for c in TIMELINE_PARTS if c in table_columns(con, "marts", "gpu_timeline")]
        sel = "".join(f", g.{c}" for c in extra)
        for r in rows(con, f"""
            select g.run_id, g.rank, g.device, g.span_ns, g.busy_ns, g.idle_ns{sel}
            from marts.gpu_timeline as g
            where g.run_id in (select unnest(?::varchar[])) and g.step is null
            order by g.run_id, g.rank, g.device
        """, [ids]):  # noqa: S608 - fixed column names only
            out.setdefault(r.pop("run_id"), {}).setdefault("timeline", []).append(r)
    if "op_rollup" in have:
        for r in rows(con, f"""
            with ops as (
                select
                    o.run_id,
                    o.op,
                    sum(o.kernel_ns) as kernel_ns,
                    sum(o.kernels) as kernels,
                    sum(o.calls) as calls,
                    sum(o.cpu_ns) as cpu_ns,
                    count(distinct o.rank) as ranks
                from marts.op_rollup as o
                where o.run_id in (select unnest(?::varchar[]))
                group by o.run_id, o.op
            ),

            ranked as (
                select
                    *,
                    row_number() over (partition by run_id order by kernel_ns desc, op) as n,
                    sum(kernel_ns) over (partition by run_id) as total_ns,
                    count(*) over (partition by run_id) as op_count
                from ops
            )

            select run_id, op, kernel_ns, kernels, calls, cpu_ns, ranks, total_ns, op_count
            from ranked
            where n <= {TOP_OPS}
            order by run_id, n
        """, [ids]):  # noqa: S608 - a constant only
            d = out.setdefault(r.pop("run_id"), {})
            d["ops_total_ns"] = r.pop("total_ns")
            d["ops_count"] = r.pop("op_count")
            d.setdefault("ops", []).append(r)
    return out


def metric_trends(con, series: str, have: set[str]) -> dict:
    """The series' metric trends: one row per (kernel, metric) at its latest label (median,
    baseline, delta %, verdict, floor_pct); for the key metrics and every metric with a verdict
    other than unchanged or inconclusive somewhere (``changed``), ``plotted`` with their
    ``labels``, ``medians``, ``baselines`` and ``verdicts`` per label (the plot's band follows
    each label's baseline and marks each verdict where it was given)."""
    if "metric_trends" not in have:
        return {}
    cols = set(table_columns(con, "marts", "metric_trends"))
    seq = "m.label_seq" if "label_seq" in cols else "l.label_seq"
    unit = "m.unit" if "unit" in cols else "null"
    base = _baseline(cols)
    floor = "m.floor_pct::double" if "floor_pct" in cols else "null"
    key = " or ".join(f"starts_with(m.metric, '{p}')" for p in KEY_METRICS)
    got = rows(con, f"""
        with labels as (
            select label, min(label_seq) as label_seq
            from marts.kernel_trends
            where series = $series
            group by label
        ),

        m as (
            select
                m.kernel,
                m.metric,
                {unit} as unit,
                m.label,
                {seq} as label_seq,
                case when isfinite(m.median::double) then m.median::double end as median,
                case when isfinite(m.{base}::double) then m.{base}::double end as baseline,
                {floor} as floor_pct,
                m.verdict
            from marts.metric_trends as m
            left join labels as l on l.label = m.label
            where m.series = $series
        ),

        keys as (
            select
                kernel,
                metric,
                bool_or(coalesce(verdict, 'unchanged') not in ('unchanged', 'inconclusive'))
                    as changed,
                bool_or(coalesce(verdict, 'unchanged') not in ('unchanged', 'inconclusive'))
                    or bool_or({key.replace('m.metric', 'metric')}) as plotted,
                max(label_seq) as last_seq
            from m
            group by kernel, metric
        )

        select
            m.kernel,
            m.metric,
            any_value(m.unit) as unit,
            arg_max(m.median, m.label_seq) as median,
            arg_max(m.baseline, m.label_seq) as baseline,
            arg_max(m.verdict, m.label_seq) as verdict,
            arg_max(m.label, m.label_seq) as label,
            any_value(keys.changed) as changed,
            any_value(keys.plotted) as plotted,
            list(m.label order by m.label_seq) filter (where keys.plotted) as labels,
            list(m.median order by m.label_seq) filter (where keys.plotted) as medians,
            list(m.baseline order by m.label_seq) filter (where keys.plotted) as baselines,
            list(m.verdict order by m.label_seq) filter (where keys.plotted) as verdicts,
            arg_max(m.floor_pct, m.label_seq) as floor_pct
        from m
        inner join keys on keys.kernel = m.kernel and keys.metric = m.metric
        group by m.kernel, m.metric
        order by m.kernel, m.metric
    """, {"series": series})  # noqa: S608 - fixed text only
    for r in got:
        b, v = r["baseline"], r["median"]
        r["delta_pct"] = (v / b - 1) * 100 if b not in (None, 0) and v is not None else None
    return {"rows": got}


def trace_trends(con, series: str, have: set[str]) -> dict:
    """The series' trace-fact verdicts (marts.trace_trends): ``keys``, one per (fact, key) with
    a confirmed change (regressed / improved at some label) or key ``(run)``, each with its
    rows per label (``TRACE_KEEP``) and its latest ``change`` (label, verdict, delta_pct; None
    without one), changed keys first; ``latest``, every (fact, key) at the
    latest label of the series. Empty without the mart."""
    if "trace_trends" not in have:
        return {}
    cols = set(table_columns(con, "marts", "trace_trends"))
    keep = [c for c in TRACE_KEEP if c in cols]
    got = rows(con, f"""
        select fact, key, {', '.join(keep)}
        from marts.trace_trends
        where series = $series
        order by fact, key, label_seq
    """, {"series": series})  # noqa: S608 - known column names only
    if not got:
        return {}
    last = max(r["label_seq"] for r in got)
    by: dict[tuple[str, str], list[dict]] = {}
    for r in got:
        by.setdefault((r.pop("fact"), r.pop("key")), []).append(r)
    keys, latest = [], []
    for (fact, key), rs in by.items():
        changed = any(r["verdict"] in CHANGES for r in rs)
        at = rs[-1]
        latest.append({"fact": fact, "key": key, "changed": changed,
                       **{c: at.get(c) for c in ("label", "label_seq", "median",
                                                  "baseline_median", "delta_pct", "verdict")}})
        if changed or key == "(run)":
            last_change = next((r for r in reversed(rs) if r["verdict"] in CHANGES), None)
            keys.append({"fact": fact, "key": key, "changed": changed,
                         "change": None if last_change is None else {
                             c: last_change[c] for c in ("label", "verdict", "delta_pct")},
                         "latest_verdict": at["verdict"] if at["label_seq"] == last else None,
                         "rows": rs})
    keys.sort(key=lambda k: (not k["changed"], k["fact"], k["key"]))
    return {"columns": keep, "keys": keys, "latest": latest}


FACT_CHANGES = ("regressed", "improved", "increased", "decreased")


def label_changes(con, series: str, have: set[str]) -> dict[str, list[dict]]:
    """Per label of ``series``: the metrics (marts.metric_trends) and trace facts
    (marts.trace_trends) with a change found at that label (regressed, improved, increased,
    decreased), for the label's page: the index links a metric's or a trace fact's change to
    the label it began at. Each row: ``kind`` (``metric`` or the fact), ``name`` (the kernel or
    the key), ``what`` (the metric or the fact), ``unit``, median, baseline, delta_pct (label
    median vs baseline), verdict, q_value, p_value, evidence."""
    parts = []
    for mart, kind, name, what, base in (
            ("metric_trends", "'metric'", "kernel", "metric", None),
            ("trace_trends", "t.fact", "key", "fact", "baseline_median")):
        if mart not in have:
            continue
        cols = set(table_columns(con, "marts", mart))
        b = base or _baseline(cols)
        opt = ", ".join(f"t.{c}" if c in cols else f"null as {c}"
                        for c in ("unit", "q_value", "p_value", "evidence"))
        parts.append(f"""
            select t.label, {kind} as kind, t.{name} as name,
                t.{what} as what,
                case when isfinite(t.median::double) then t.median::double end as median,
                case when isfinite(t.{b}::double) then t.{b}::double end as baseline,
                case when t.{b} <> 0 and isfinite(t.median::double / t.{b}::double)
                    then (t.median::double / t.{b}::double - 1) * 100 end as delta_pct,
                t.verdict, {opt}
            from marts.{mart} as t
            where t.series = $series and t.verdict in {FACT_CHANGES}""")  # noqa: S608 - fixed
    if not parts:
        return {}
    out: dict[str, list[dict]] = {}
    for r in rows(con, " union all ".join(parts) + " order by 1, 2, 3, 4", {"series": series}):
        out.setdefault(r.pop("label"), []).append(r)
    return out
