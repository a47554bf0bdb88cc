"""Label vs baseline: every kernel of one label of a series, sorted by |delta|, with its share of
the run, delta, q and verdict. The same rows feed the report's "label vs baseline" pages and
``pwh compare`` (the CI gate).

By default a label is compared with the baseline its verdicts were decided on
(``marts.kernel_trends``: the previous labels since the last accepted change). With an explicit
baseline label the two labels' runs are judged afresh by the same method
(:func:`warehouse.modelling.verdicts.judge_series` on those two labels only, with the floor and
alpha recorded in the mart).

Beyond kernels, a series with facts in the sibling marts is judged on them too (``pwh compare``;
the report reads those marts itself): ``marts.trace_trends`` (a Kineto series: step time, GPU
idle share, communication time, GPU time per operator; higher is worse for all four) and
``marts.metric_trends`` (an Nsight Compute series: every metric of every kernel). Their rows
join the kernel rows with a ``fact`` column (``kernel``, the trace fact, or ``metric``), a
``mart`` column, a uniform ``name`` / ``median`` / ``baseline_median`` / ``unit`` and ``gates``:
whether the row can fail the gate. Every kernel and trace row gates; a metric row gates only
when its direction is documented (``lower_is_better``: durations, elapsed cycles), because only
there does the mart's verdict say ``regressed``/``improved`` — every other metric says
``increased``/``decreased`` (a throughput that falls may be a slower kernel or less work), and
its ``inconclusive`` cannot be a possible regression either. A series with kernels only keeps
the kernel rows exactly as before (no added columns).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from warehouse.errors import PwhError
from warehouse.serving.report.data import SEVERITY, jsonable, rows, select_list

FAIL_ON = ("regressed", "inconclusive", "never")


class UnknownName(PwhError):
    """An unknown series or label was asked for (a usage error: exit 2)."""


@dataclass
class Comparison:
    series: str
    label: str
    label_seq: int
    captured_at: str | None
    baseline: str  # "verdict baseline" or the explicit baseline label
    rows: list[dict] = field(default_factory=list)

    @property
    def mixed(self) -> bool:
        """True when rows of the sibling marts (trace facts, metrics) are among the rows."""
        return any(r.get("mart", "kernel_trends") != "kernel_trends" for r in self.rows)

    def counts(self) -> dict[str, int]:
        out = dict.fromkeys(("regressed", "improved", "inconclusive", "unchanged"), 0)
        if any(r.get("mart") == "metric_trends" for r in self.rows):
            out.update(increased=0, decreased=0)
        for r in self.rows:
            if r.get("verdict") in out:
                out[r["verdict"]] += 1
        return out

    def gating(self) -> list[dict]:
        """The rows that can fail the gate (every row but the metrics of unknown direction)."""
        return [r for r in self.rows if r.get("gates", True)]

    def worst(self) -> str | None:
        """The most severe verdict of a gating row (regressed > inconclusive > anything else)."""
        present = [r.get("verdict") for r in self.gating()]
        return max(present, key=lambda v: SEVERITY.get(v, 0), default=None)

    def fails(self, fail_on: str) -> bool:
        if fail_on == "never":
            return False
        return any(SEVERITY.get(r.get("verdict"), 0) >= SEVERITY[fail_on]
                   for r in self.gating())


def _shares_sql(con, label_filter: str = "") -> str:
    """Comparison rows of a series (``$series``); ``label_filter`` narrows the labels, e.g.
    ``and {t}.label = $label`` ({t} is the table alias)."""
    cols = select_list(con, "marts.kernel_trends", "t")
    return f"""
        with shares as (
            select
                p.kernel_kind,
                p.kernel,
                p.label,
                median(p.value_us / nullif(r.total_us, 0)) as share_of_run
            from staging.trend_points as p
            inner join marts.run_summary as r on r.run_id = p.run_id
            where p.series = $series {label_filter.format(t="p")}
            group by p.kernel_kind, p.kernel, p.label
        )

        select
            {cols},
            s.share_of_run,
            t.median_us - t.baseline_median_us as delta_us
        from marts.kernel_trends as t
        left join shares as s
            on s.kernel_kind = t.kernel_kind and s.kernel = t.kernel and s.label = t.label
        where t.series = $series {label_filter.format(t="t")}
        order by t.label_seq, abs(t.delta_pct) desc nulls last, t.kernel_kind, t.kernel
    """  # noqa: S608 - only fixed text is spliced


def by_label(con, series: str, labels: list[str] | None = None) -> dict[str, list[dict]]:
    """Comparison rows of the labels of ``series`` (default: all; one query), by label."""
    out: dict[str, list[dict]] = {}
    if labels is None:
        sql, params = _shares_sql(con), {"series": series}
    else:
        sql = _shares_sql(con, "and {t}.label in (select unnest($labels::varchar[]))")
        params = {"series": series, "labels": labels}
    for r in rows(con, sql, params):
        out.setdefault(r["label"], []).append(r)
    return out


def known_series(con, marts: tuple[str, ...] = ()) -> list[str]:
    """The series of marts.kernel_trends and of the sibling ``marts`` (see :func:`fact_marts`)."""
    sql = " union ".join(f"select distinct series from marts.{m}"  # noqa: S608 - constants
                         for m in ("kernel_trends", *marts))
    return [r[0] for r in con.execute(
        f"select series from ({sql}) order by series").fetchall()]  # noqa: S608 - constants


def labels_of(con, series: str) -> list[tuple[str, int, object]]:
    """(label, label_seq, captured_at) of every label of ``series``, in order."""
    return con.execute(
        "select label, any_value(label_seq), any_value(captured_at) from marts.kernel_trends "
        "where series = ? group by label order by 2", [series]).fetchall()


# The sibling marts pwh compare judges beside marts.kernel_trends, with the columns it reads: a
# snapshot without one (or with one lacking a column) compares kernels only.
FACT_MARTS = {
    "trace_trends": ("series", "fact", "key", "label", "label_seq", "captured_at", "run_values",
                     "median", "baseline_median", "delta_pct", "verdict"),
    "metric_trends": ("series", "source_format", "kernel", "metric", "unit", "lower_is_better",
                      "label", "label_seq", "captured_at", "run_values", "median",
                      "baseline_median", "delta_pct", "verdict"),
}
# the trace facts in the order shown (the run-wide ones first), and their units
TRACE_UNITS = {"step_time": "ns", "gpu_idle_share": "share", "communication_ns": "ns",
               "op_kernel_ns": "ns"}
# Nsight Compute metrics shown first (issue 21: duration, SM and memory throughput, achieved
# occupancy, DRAM bytes): the raw names' prefixes (as the report's kernel pages plot them) and
# the names of a `--page details` export
DETAILS_KEY_METRICS = ("Duration", "Compute (SM) Throughput", "Memory Throughput",
                       "DRAM Throughput", "Achieved Occupancy")


def fact_marts(con) -> tuple[str, ...]:
    """The sibling marts the snapshot has with every column compare reads."""
    from warehouse.serving.report.data import table_columns

    return tuple(m for m, need in FACT_MARTS.items()
                 if set(need) <= set(table_columns(con, "marts", m)))


def key_metric(metric: str | None) -> bool:
    """True for the few metrics that matter first (durations, SM and memory throughput,
    achieved occupancy, DRAM bytes)."""
    from warehouse.serving.report.facts import KEY_METRICS

    return bool(metric) and (metric.startswith(KEY_METRICS) or metric in DETAILS_KEY_METRICS)


def _series_marts(con, series: str, marts: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(m for m in marts if con.execute(
        f"select count(*) from (select 1 from marts.{m} where series = ? limit 1)",  # noqa: S608
        [series]).fetchall()[0][0])


def _labels(con, series: str, marts: tuple[str, ...]) -> list[tuple[str, int, object]]:
    """The labels of ``series`` over marts.kernel_trends and ``marts``, in capture order (the
    marts' own order): a label's number is its kernel_trends ``label_seq`` where it has one,
    else its position among all of them."""
    if not marts:
        return labels_of(con, series)
    seq = {"kernel_trends": "label_seq"}
    union = " union all ".join(
        f"select label, {seq.get(m, 'null::bigint')} as kseq, captured_at "  # noqa: S608
        f"from marts.{m} where series = $series" for m in ("kernel_trends", *marts))
    got = con.execute(f"""
        select label, min(kseq), min(captured_at) as captured_at
        from ({union})
        group by label
        order by min(captured_at), label
    """, {"series": series}).fetchall()  # noqa: S608 - fixed text only
    return [(lab, i if k is None else k, c) for i, (lab, k, c) in enumerate(got)]


def _names(names: list[str], limit: int = 20) -> str:
    if len(names) <= limit:
        return ", ".join(names) or "(none)"
    return ", ".join(names[-limit:]) + f" (and {len(names) - limit} earlier)"


def compare(con, series: str, label: str | None = None, baseline: str | None = None
            ) -> Comparison:
    """The comparison of ``label`` (default: the latest) of ``series`` with its baseline.
    Raises :class:`UnknownName` naming the known series or labels."""
    marts = fact_marts(con)
    known = known_series(con, marts)
    if series not in known:
        raise UnknownName(f"unknown series {series!r}; known series: {_names(known, 50)}")
    marts = _series_marts(con, series, marts)
    labels = _labels(con, series, marts)
    names = [lab for lab, _, _ in labels]
    for want, what in ((label, "label"), (baseline, "baseline label")):
        if want is not None and want not in names:
            raise UnknownName(f"unknown {what} {want!r} in series {series!r}; its labels, "
                              f"oldest first: {_names(names)}")
    label = label if label is not None else names[-1]
    seq, captured = next((s, c) for lab, s, c in labels if lab == label)
    cmp = Comparison(series, label, seq, jsonable(captured),
                     "verdict baseline" if baseline is None else baseline)
    if baseline is None:
        cmp.rows = rows(con, _shares_sql(con, "and {t}.label = $label"),
                        {"series": series, "label": label})
        facts = [r for m in marts for r in _mart_rows(con, m, series, [label])]
    else:
        cmp.rows = _against(con, series, label, baseline)
        facts = [r for m in marts for r in _facts_against(con, m, series, label, baseline)]
    if facts:  # kernels only: the rows as they always were
        cmp.rows = sorted([_tagged(r, "kernel_trends") for r in cmp.rows] + facts,
                          key=_order)
    return cmp


def _mart_rows(con, mart: str, series: str, labels: list[str]) -> list[dict]:
    """Every row of ``mart`` for ``series`` at ``labels``, tagged (:func:`_tagged`)."""
    got = rows(con, f"""
        select {select_list(con, f"marts.{mart}", "t")}
        from marts.{mart} as t
        where t.series = $series and t.label in (select unnest($labels::varchar[]))
    """, {"series": series, "labels": labels})  # noqa: S608 - constants only
    return [_tagged(r, mart) for r in got]


def _tagged(r: dict, mart: str) -> dict:
    """A row with ``fact``, ``mart``, ``name``, ``median``, ``baseline_median``, ``unit`` and
    ``gates`` (see the module's docstring), its mart columns after them."""
    if mart == "kernel_trends":
        tag = {"fact": "kernel", "mart": mart, "name": r.get("kernel"), "unit": "us",
               "median": r.get("median_us"), "baseline_median": r.get("baseline_median_us"),
               "gates": True}
    elif mart == "trace_trends":
        tag = {"fact": r.get("fact"), "mart": mart, "name": r.get("key"),
               "unit": TRACE_UNITS.get(r.get("fact")), "gates": True}
    else:
        tag = {"fact": "metric", "mart": mart, "name": r.get("kernel"),
               "gates": r.get("lower_is_better") is True}
    return {**tag, **{k: v for k, v in r.items() if k not in tag}}


_GROUP = {**{f: i for i, f in enumerate(TRACE_UNITS)}, "kernel": len(TRACE_UNITS),
          "metric": len(TRACE_UNITS) + 1}


def _order(r: dict):
    """Run-wide trace facts, operators, kernels, then metrics (the key ones first); by |delta|
    within each."""
    d = r.get("delta_pct")
    return (_GROUP.get(r.get("fact"), len(_GROUP)),
            r.get("fact") == "metric" and not key_metric(r.get("metric")),
            -abs(d) if d is not None else 1, str(r.get("name")), str(r.get("metric") or ""),
            str(r.get("kernel_kind") or r.get("source_format") or ""))


def _directed(engine_verdict: str | None, lower_is_better) -> str | None:
    """marts.metric_trends' rule: the engine's regressed/improved (= the value rose/fell) stay
    so only for the lower-is-better metrics; others say increased/decreased."""
    if engine_verdict not in ("regressed", "improved") or lower_is_better is True:
        return engine_verdict
    return "increased" if engine_verdict == "regressed" else "decreased"


def _facts_against(con, mart: str, series: str, label: str, baseline: str) -> list[dict]:
    """The rows of ``mart`` at ``label`` judged against ``baseline``'s runs alone by the verdict
    engine, one call per group as the mart calls it (per trace fact; per metric)."""
    from warehouse.modelling import stats, verdicts

    def ident(r):  # (the mart's call group, the engine's kind, its key)
        if mart == "trace_trends":
            return r["fact"], r["fact"], r["key"]
        return r["metric"], f"{r['source_format']}|{r['unit']}", r["kernel"]

    both = _mart_rows(con, mart, series, [label, baseline])
    ours = {ident(r): r for r in both if r["label"] == label}
    groups: dict[str, list[dict]] = {}
    for r in both:
        g, kind, key = ident(r)
        if (g, kind, key) in ours:
            groups.setdefault(g, []).append({
                "kind": kind, "key": key, "label": r["label"],
                "label_seq": 1 if r["label"] == label else 0, "values": r["run_values"] or []})
    first = next(iter(ours.values()), {})
    cfg = stats.VerdictConfig.from_env(floor_pct=first.get("floor_pct"),
                                       alpha=first.get("alpha"))
    out = []
    for g, cells in groups.items():
        for v in verdicts.judge_series(cells, cfg):
            if v["label"] != label:
                continue
            r = dict(ours[(g, v["kind"], v["key"])])
            r.update({k: v.get(k) for k in (
                "median", "baseline_median", "baseline_mad", "baseline_labels", "baseline_runs",
                "baseline_from_label", "delta_pct", "p_value", "q_value", "min_detectable_pct",
                "confirmed_by_label", "method", "evidence")}, change_point=False)
            if mart == "metric_trends":
                r.update(engine_verdict=v["verdict"],
                         verdict=_directed(v["verdict"], r.get("lower_is_better")))
            else:
                r["verdict"] = v["verdict"]
            out.append(jsonable(r))
    return out


def _against(con, series: str, label: str, baseline: str) -> list[dict]:
    """Judge ``label`` against ``baseline`` alone with the verdict method."""
    from warehouse.modelling import stats, verdicts

    both = rows(con, _shares_sql(con, "and {t}.label in ($label, $baseline)"),
                {"series": series, "label": label, "baseline": baseline})
    ours = {(r["kernel_kind"], r["kernel"]): r for r in both if r["label"] == label}
    cells = [{"kind": r["kernel_kind"], "key": r["kernel"], "label": r["label"],
              "label_seq": 1 if r["label"] == label else 0, "values": r["run_values_us"] or []}
             for r in both if (r["kernel_kind"], r["kernel"]) in ours]
    first = next(iter(ours.values()), {})
    cfg = stats.VerdictConfig.from_env(floor_pct=first.get("floor_pct"),
                                       alpha=first.get("alpha"))
    out = []
    for v in verdicts.judge_series(cells, cfg):
        if v["label"] != label:
            continue
        r = dict(ours[(v["kind"], v["key"])])
        r.update(median_us=v["median"], baseline_median_us=v["baseline_median"],
                 baseline_mad_us=v["baseline_mad"], baseline_labels=v["baseline_labels"],
                 baseline_runs=v["baseline_runs"], baseline_from_label=v["baseline_from_label"],
                 delta_pct=v["delta_pct"], p_value=v["p_value"], q_value=v["q_value"],
                 min_attainable_p=v["min_attainable_p"], method=v["method"],
                 min_detectable_pct=v.get("min_detectable_pct"), runs_needed=v.get("runs_needed"),
                 confirmed_by_label=v.get("confirmed_by_label"),
                 verdict=v["verdict"], evidence=v["evidence"], change_point=False)
        r["delta_us"] = (None if r["baseline_median_us"] is None or r["median_us"] is None
                         else r["median_us"] - r["baseline_median_us"])
        out.append(jsonable(r))
    out.sort(key=lambda r: (-abs(r["delta_pct"]) if r["delta_pct"] is not None else 1,
                            r["kernel_kind"], r["kernel"]))
    return out
