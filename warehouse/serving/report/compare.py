"""Label vs baseline: every kernel of one label of a series, sorted by |delta|, with its share of
the run, delta, q and verdict. The same rows feed the report's "label vs baseline" pages and
``pwh compare`` (the CI gate).

By default a label is compared with the baseline its verdicts were decided on
(``marts.kernel_trends``: the previous labels since the last accepted change). With an explicit
baseline label the two labels' runs are judged afresh by the same method
(:func:`warehouse.modelling.verdicts.judge_series` on those two labels only, with the floor and
alpha recorded in the mart).
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

    def counts(self) -> dict[str, int]:
        out = dict.fromkeys(("regressed", "improved", "inconclusive", "unchanged"), 0)
        for r in self.rows:
            if r.get("verdict") in out:
                out[r["verdict"]] += 1
        return out

    def worst(self) -> str | None:
        """The most severe verdict present (regressed > inconclusive > anything else)."""
        present = [r.get("verdict") for r in self.rows]
        return max(present, key=lambda v: SEVERITY.get(v, 0), default=None)

    def fails(self, fail_on: str) -> bool:
        if fail_on == "never":
            return False
        return any(SEVERITY.get(r.get("verdict"), 0) >= SEVERITY[fail_on] for r in self.rows)


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


def known_series(con) -> list[str]:
    return [r[0] for r in con.execute(
        "select distinct series from marts.kernel_trends order by series").fetchall()]


def labels_of(con, series: str) -> list[tuple[str, int, object]]:
    """(label, label_seq, captured_at) of every label of ``series``, in order."""
    return con.execute(
        "select label, any_value(label_seq), any_value(captured_at) from marts.kernel_trends "
        "where series = ? group by label order by 2", [series]).fetchall()


def _names(names: list[str], limit: int = 20) -> str:
    if len(names) <= limit:
        return ", ".join(names) or "(none)"
    return ", ".join(names[-limit:]) + f" (and {len(names) - limit} earlier)"


def compare(con, series: str, label: str | None = None, baseline: str | None = None
            ) -> Comparison:
    """The comparison of ``label`` (default: the latest) of ``series`` with its baseline.
    Raises :class:`UnknownName` naming the known series or labels."""
    known = known_series(con)
    if series not in known:
        raise UnknownName(f"unknown series {series!r}; known series: {_names(known, 50)}")
    labels = labels_of(con, series)
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
        return cmp
    cmp.rows = _against(con, series, label, baseline)
    return cmp


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
