"""Kernels new at a label and gone since the previous label (a kernel swap: a library picks
another kernel), for the label pages and the index.

The rule, on ``marts.kernel_trends`` (a kernel is *measured* at a label when the mart has its
row there): the *previous label* of a label is the one before it in the series' capture order
(``label_seq``). A kernel is **new at** a label when it is measured there and not at the
previous label (it may have been measured earlier: ``last_seen_label`` says where); it is
**gone since the previous label** when it is measured at the previous label and not at this
one (a kernel seen earlier but absent at the previous label is not gone since it). The first
label of a series has neither (no previous label).

Each row's numbers are those of the label it was measured at (``at_label``: this label for a
new kernel, the previous one for a gone kernel): ``median_us`` and ``repeats`` of its
``marts.kernel_trends`` row (time per run, runs measuring it), ``share_of_run`` the median over
those runs of its time over the run's total (``staging.trend_points``, ``marts.run_summary``:
the share every label page shows) and ``calls`` the median over those runs of its calls
(``marts.kernel_run_rollup``: the rows of the run with that kernel name, or of that family for
an audit family; none for an audit signature / category). :func:`sql` is the query, with
the series and label spelled out, that the page shows under the lists.
"""

from __future__ import annotations

from warehouse.serving.report.data import rows

CHANGES = ("new", "gone")
COLUMNS = ("change", "kernel_kind", "kernel", "at_label", "at_seq", "median_us", "repeats",
           "share_of_run", "calls", "last_seen_label", "last_seen_seq")

# the kernels measured per (series, label), each label with the one before it: {where} narrows
# the series (``where series = …``)
_PAIRS = """
    present as (
        select series, kernel_kind, kernel, label, label_seq, median_us, repeats
        from marts.kernel_trends
        {where}
    ),

    ordered as (
        select
            series,
            label,
            label_seq,
            lag(label) over (partition by series order by label_seq) as prev_label
        from (select distinct series, label, label_seq from present)
    ),

    swaps as (
        -- new: measured at the label, not at the label before it
        select o.series, o.label, 'new' as change, c.kernel_kind, c.kernel, c.label as at_label
        from ordered as o
        inner join present as c on c.series = o.series and c.label = o.label
        where o.prev_label is not null {labels}
            and not exists (
                select 1
                from present as p
                where p.series = o.series and p.label = o.prev_label
                    and p.kernel_kind = c.kernel_kind and p.kernel = c.kernel
            )
        union all
        -- gone: measured at the label before, not at the label
        select o.series, o.label, 'gone' as change, p.kernel_kind, p.kernel, p.label as at_label
        from ordered as o
        inner join present as p on p.series = o.series and p.label = o.prev_label
        where true {labels}
            and not exists (
                select 1
                from present as c
                where c.series = o.series and c.label = o.label
                    and c.kernel_kind = p.kernel_kind and c.kernel = p.kernel
            )
    )"""

_ROWS = """
    runs as (
        select
            s.label,
            s.change,
            s.kernel_kind,
            s.kernel,
            p.run_id,
            p.value_us / nullif(r.total_us, 0) as share,
            (
                select sum(k.calls)
                from marts.kernel_run_rollup as k
                where k.run_id = p.run_id
                    and case when p.kernel_kind = 'family' then k.kernel_family
                        else k.kernel end = p.kernel
                    and p.kernel_kind <> 'signature_category'
            ) as calls
        from swaps as s
        inner join staging.trend_points as p
            on p.series = s.series and p.label = s.at_label
                and p.kernel_kind = s.kernel_kind and p.kernel = s.kernel
        inner join marts.run_summary as r on r.run_id = p.run_id
    ),

    per_kernel as (
        select
            label,
            change,
            kernel_kind,
            kernel,
            median(share) as share_of_run,
            median(calls) as calls
        from runs
        group by label, change, kernel_kind, kernel
    )

    select
        s.label,
        s.change,
        s.kernel_kind,
        s.kernel,
        s.at_label,
        t.label_seq as at_seq,
        t.median_us,
        t.repeats,
        k.share_of_run,
        k.calls,
        arg_max(e.label, e.label_seq) as last_seen_label,
        max(e.label_seq) as last_seen_seq
    from swaps as s
    inner join present as t
        on t.series = s.series and t.label = s.at_label
            and t.kernel_kind = s.kernel_kind and t.kernel = s.kernel
    left join per_kernel as k
        on k.label = s.label and k.change = s.change
            and k.kernel_kind = s.kernel_kind and k.kernel = s.kernel
    -- a new kernel measured before the previous label: where it was measured last
    left join present as e
        on s.change = 'new' and e.series = s.series and e.kernel_kind = s.kernel_kind
            and e.kernel = s.kernel and e.label_seq < t.label_seq
    group by all
    order by s.label, s.change desc, t.median_us desc nulls last, s.kernel_kind, s.kernel"""


def _query(where: str, labels: str) -> str:
    return "with " + _PAIRS.format(where=where, labels=labels).strip() + ",\n\n" + _ROWS.strip()


def by_label(con, series: str, labels: list[str] | None = None) -> dict[str, dict[str, list]]:
    """``{label: {"new": [row, …], "gone": [row, …]}}`` for the labels of ``series`` (default:
    all) with a kernel new or gone there; rows by time per run, largest first (see the
    module's docstring)."""
    lab = "" if labels is None else "and o.label in (select unnest($labels::varchar[]))"
    params: dict = {"series": series}
    if labels is not None:
        params["labels"] = list(labels)
    out: dict[str, dict[str, list]] = {}
    for r in rows(con, _query("where series = $series", lab), params):
        d = out.setdefault(r.pop("label"), {c: [] for c in CHANGES})
        d[r["change"]].append(r)
    return out


def counts(con) -> dict[tuple[str, str], dict[str, int]]:
    """``{(series, label): {"new": n, "gone": m}}`` over every series, for the labels with a
    kernel new or gone (the index mentions them beside the changes that began there)."""
    sql = ("with " + _PAIRS.format(where="", labels="").strip()
           + "\nselect series, label, count(*) filter (where change = 'new') as new,"
             " count(*) filter (where change = 'gone') as gone"
             " from swaps group by series, label")
    return {(s, lab): {"new": n, "gone": g} for s, lab, n, g in con.execute(sql).fetchall()}


def sql(series: str, label: str) -> str:
    """The query behind one label's lists, with its series and label spelled out (``pwh sql``
    returns the rows the page shows)."""
    def q(s: str) -> str:
        return "'" + s.replace("'", "''") + "'"

    return _query(f"where series = {q(series)}", f"and o.label = {q(label)}").replace(
        "\n    ", "\n") + ";"
