"""The changes in effect: every confirmed regression and improvement that still holds at the
latest label of its series, with the label it began at, its size, the time it adds per run and
its share of the run; the others (reverted, or no longer measured) as history.

Read from the marts only: ``marts.kernel_trends`` (every ``kernel_kind``: kernels, families,
audit signatures), when they exist ``marts.metric_trends`` (Nsight Compute metrics per kernel)
and ``marts.trace_trends`` (the trace facts of Kineto runs: ``step_time``, ``gpu_idle_share``,
``communication_ns``, ``op_kernel_ns``; kind = the fact, name = its key: ``(run)``, ``rank N``
or the operator).

The rule, per key (series, kind, name), over its confirmed changes in label order (a change is
a row whose verdict is ``regressed`` / ``improved``, or ``increased`` / ``decreased`` for a
metric without a documented direction):

* ``now`` is the key's level at the latest label of its series: the median of its label medians
  from its latest change on (one noisy label neither reverts nor inflates a change). A key not
  measured at the latest label has no change in effect: its changes go to history ("not
  measured at the latest label").
* A change **holds** while ``now`` still differs from the change's baseline (the level before
  it) in the change's direction by at least the floor (``floor_pct`` of the row, 5 % without).
* A change that no longer holds is **reverted**; the later change that brought the level back
  is named (the first later change in the opposite direction), or "drifted back" without one.
* A later change in the opposite direction that merely undid an earlier one (``now`` within
  the floor of that earlier change's baseline) is history too: "reverts <label>".
* The rest are in effect. Their ``now_pct`` is ``now`` against the change's baseline, their
  ``adds_us`` the time per run (``now`` − baseline, kernel time per run) and ``adds_share``
  that time over the median run total at the latest label. Sorted by impact: the share of the
  run (then |now_pct|) first; changes without a share of the run after, by |now_pct|.

Trace facts (``marts.trace_trends``) follow the same rule per (series, fact, key); their time
per run is only what the fact honestly is:

* ``op_kernel_ns`` (GPU kernel time under an operator per run) and ``communication_ns`` (the
  communication time of a run's GPU timeline) are GPU time per run: ``adds_us`` is their
  ``now`` − baseline in µs, ``adds_share`` that over the median run total (kernel time), as
  for a kernel.
* ``step_time`` (the mean training step, under ``(run)`` or ``rank N``) is the run itself: a
  step X % slower makes the run X % slower, so ``adds_share`` is ``now_pct`` / 100 and
  ``adds_us`` is left empty (the change is per step, not per run).
* ``gpu_idle_share`` is a ratio, not a time: no ``adds_us`` nor ``adds_share``; it is ordered
  with the metrics, by |now_pct|.
"""

from __future__ import annotations

from warehouse.serving.report.data import rows, table_columns

DEFAULT_FLOOR = 5.0
SIGN = {"regressed": 1, "improved": -1, "increased": 1, "decreased": -1}
# how a trace fact's change counts per run (see the module's docstring): "ns" = GPU time per
# run in ns, "step" = the step time (the run's own pace); a fact not listed has no share
TRACE_PER_RUN = {"op_kernel_ns": "ns", "communication_ns": "ns", "step_time": "step"}
TRACE_NEED = {"series", "fact", "key", "label", "label_seq", "median", "baseline_median",
              "delta_pct", "verdict"}


def _has_trace_trends(con) -> set[str] | None:
    """marts.trace_trends' columns when it has those the report reads, else None."""
    cols = set(table_columns(con, "marts", "trace_trends"))
    return cols if TRACE_NEED <= cols else None


def trace_kinds(con) -> set[str]:
    """The facts of marts.trace_trends (the kinds of its changes), empty without the mart."""
    if _has_trace_trends(con) is None:
        return set()
    return {f for (f,) in con.execute("select distinct fact from marts.trace_trends").fetchall()}


def _changes(con, mart: str, kind: str, name: str, median: str, baseline: str,
             optional: tuple[str, ...], cols: set[str], extra: str = "") -> list[dict]:
    """The rows of every change of a trend mart (``regressed`` / ``improved``) and each changed
    key's row at the latest label of its series, with the key's ``level`` (the median of its
    label medians from its latest change on). A key is (series, ``kind``, ``name``); ``median``
    and ``baseline`` name the mart's value columns; ``optional`` columns are null where the mart
    lacks them; ``extra`` adds fixed select items."""
    opt = ", ".join(f"t.{c}" if c in cols else f"null as {c}" for c in optional)
    cap = ("strftime(t.captured_at, '%Y-%m-%dT%H:%M:%S')" if "captured_at" in cols
           else "null")
    same = " and ".join(f"{{a}}.{c} = t.{c}" for c in ("series", kind, name))
    return rows(con, f"""
        with latest as (
            select series, max(label_seq) as label_seq
            from marts.{mart}
            group by series
        ),

        changed as (
            select series, {kind}, {name}, max(label_seq) as last_seq
            from marts.{mart}
            where verdict in ('regressed', 'improved')
            group by series, {kind}, {name}
        ),

        level as (
            select
                t.series,
                t.{kind},
                t.{name},
                median(t.{median}) filter (where isfinite(t.{median})) as level
            from marts.{mart} as t
            inner join changed on {same.format(a="changed")}
            where t.label_seq >= changed.last_seq
            group by t.series, t.{kind}, t.{name}
        )

        select
            t.series,
            t.{kind} as kind,
            t.{name} as name,
            t.label,
            t.label_seq,
            {cap} as captured_at,
            t.verdict,
            case when isfinite(t.delta_pct) then t.delta_pct end as delta_pct,
            t.{median} as median,
            t.{baseline} as baseline,
            t.label_seq = latest.label_seq as is_latest,
            level.level,
            {extra}{opt}
        from marts.{mart} as t
        inner join changed on {same.format(a="changed")}
        inner join level on {same.format(a="level")}
        inner join latest on latest.series = t.series
        where t.verdict in ('regressed', 'improved') or t.label_seq = latest.label_seq
        order by t.series, t.{kind}, t.{name}, t.label_seq
    """)  # noqa: S608 - only fixed column names are spliced


def _trace_changes(con) -> list[dict]:
    """Changed (series, fact, key) of marts.trace_trends, when that mart exists: the rows of
    their changes and their row at the latest label of the series."""
    cols = _has_trace_trends(con)
    if cols is None:
        return []
    return _changes(con, "trace_trends", "fact", "key", "median", "baseline_median", (
        "q_value", "p_value", "confirmed_by_label", "min_detectable_pct", "method",
        "evidence", "floor_pct", "baseline_from_label"), cols, extra="true as trace, ")


def _kernel_changes(con) -> list[dict]:
    """Changed (series, kernel_kind, kernel) of marts.kernel_trends, as :func:`_changes`."""
    cols = set(table_columns(con, "marts", "kernel_trends"))
    return _changes(con, "kernel_trends", "kernel_kind", "kernel", "median_us",
                    "baseline_median_us", (
                        "q_value", "p_value", "confirmed_by_label", "min_detectable_pct",
                        "runs_needed", "method", "evidence", "floor_pct",
                        "baseline_from_label", "kernel_delta_pct", "run_wide_pct"), cols)


def _metric_ctes(con) -> str | None:
    """``labels`` and ``m`` (marts.metric_trends with ``seq_``, its label order, and ``base_``,
    its baseline), or None without a usable marts.metric_trends. Labels are ordered by its own
    label_seq or, without one, by kernel_trends' order of the labels."""
    cols = set(table_columns(con, "marts", "metric_trends"))
    need = {"series", "kernel", "metric", "label", "median", "verdict"}
    base = next((c for c in ("baseline", "baseline_median") if c in cols), None)
    if not need <= cols or base is None:
        return None
    seq = "m.label_seq" if "label_seq" in cols else "l.label_seq"
    return f"""
        labels as (
            select series, label, min(label_seq) as label_seq
            from marts.kernel_trends
            group by series, label
        ),

        m as (
            select m.*, {seq} as seq_, m.{base} as base_
            from marts.metric_trends as m
            left join labels as l on l.series = m.series and l.label = m.label
        )"""  # noqa: S608 - fixed column names only


def _metric_changes(con) -> list[dict]:
    """Changed (series, kernel, metric) of marts.metric_trends, when that mart exists."""
    ctes = _metric_ctes(con)
    if ctes is None:
        return []
    cols = set(table_columns(con, "marts", "metric_trends"))
    opt = ", ".join(f"m.{c}" if c in cols else f"null as {c}" for c in (
        "q_value", "p_value", "evidence", "floor_pct", "unit"))
    # the date under the label a change began at, as for a kernel's (the landed mart has it)
    captured = ("strftime(m.captured_at, '%Y-%m-%dT%H:%M:%S')" if "captured_at" in cols
                else "null")
    return rows(con, f"""
        with {ctes},

        latest as (
            select series, max(seq_) as seq_
            from m
            group by series
        ),

        changed as (
            select series, kernel, metric, max(seq_) as last_seq
            from m
            where verdict in ('regressed', 'improved', 'increased', 'decreased')
            group by series, kernel, metric
        ),

        level as (
            select
                m.series,
                m.kernel,
                m.metric,
                median(m.median::double) filter (where isfinite(m.median::double)) as level
            from m
            inner join changed
                on changed.series = m.series and changed.kernel = m.kernel
                and changed.metric = m.metric
            where m.seq_ >= changed.last_seq
            group by m.series, m.kernel, m.metric
        )

        select
            m.series,
            'metric' as kind,
            m.kernel || ' \u00b7 ' || m.metric as name,
            m.kernel,
            m.metric,
            m.label,
            m.seq_ as label_seq,
            {captured} as captured_at,
            m.verdict,
            case when m.base_ <> 0 and isfinite(m.median::double / m.base_::double)
                then (m.median::double / m.base_::double - 1) * 100 end as delta_pct,
            case when isfinite(m.median::double) then m.median::double end as median,
            case when isfinite(m.base_::double) then m.base_::double end as baseline,
            m.seq_ = latest.seq_ as is_latest,
            level.level,
            {opt}
        from m
        inner join changed
            on changed.series = m.series and changed.kernel = m.kernel
            and changed.metric = m.metric
        inner join level
            on level.series = m.series and level.kernel = m.kernel and level.metric = m.metric
        inner join latest on latest.series = m.series
        where m.verdict in ('regressed', 'improved', 'increased', 'decreased')
            or m.seq_ = latest.seq_
        order by m.series, m.kernel, m.metric, m.seq_
    """)  # noqa: S608 - only fixed column names are spliced


def _run_totals(con) -> dict[str, float]:
    """Median run total (µs) at the latest label of each series."""
    return dict(con.execute("""
        with latest as (
            select series, arg_max(label, label_seq) as label
            from marts.kernel_trends
            group by series
        )

        select r.series, median(r.total_us)
        from marts.run_summary as r
        inner join latest on latest.series = r.series and latest.label = r.label
        group by r.series
    """).fetchall())


def _pct(a, b) -> float | None:
    if a is None or b is None or b == 0:
        return None
    return (a / b - 1) * 100


def classify(rows_: list[dict], totals: dict[str, float]) -> tuple[list[dict], list[dict]]:
    """(in effect, history) from the rows of changed keys: their change rows and their row at
    the latest label (``is_latest``), in (series, kind, name, label_seq) order."""
    keys: dict[tuple, list[dict]] = {}
    for r in rows_:
        keys.setdefault((r["series"], r["kind"], r["name"]), []).append(r)
    effect, history = [], []
    for (series, _kind, _name), rs in keys.items():
        latest = next((r for r in rs if r["is_latest"]), None)
        # the level now: the median of the label medians since the key's latest change (one
        # noisy label does not revert a change), given the key is measured at the latest label
        now = None if latest is None else (
            latest["level"] if latest.get("level") is not None else latest["median"])
        changes = [dict(r) for r in rs if r["verdict"] in SIGN]
        for c in changes:
            c["sign"] = SIGN[c["verdict"]]
            c["floor"] = c.get("floor_pct") if c.get("floor_pct") is not None else DEFAULT_FLOOR
            c["now"] = now
            c["now_label"] = latest["label"] if latest else None
            c["now_pct"] = _pct(now, c["baseline"])
            c["holds"] = c["now_pct"] is not None and c["now_pct"] * c["sign"] >= c["floor"]
            c["status"] = "in effect"
        for i, c in enumerate(changes):
            if now is None:
                c["status"] = "not measured at the latest label"
            elif not c["holds"]:
                undo = next((d for d in changes[i + 1:] if d["sign"] == -c["sign"]), None)
                c["status"] = f"reverted at {undo['label']}" if undo else "drifted back"
            else:
                undone = next((e for e in reversed(changes[:i]) if e["sign"] == -c["sign"]
                               and not e["holds"] and e["now_pct"] is not None
                               and abs(e["now_pct"]) < e["floor"]), None)
                if undone:
                    c["status"] = f"reverts {undone['label']}"
        for c in changes:
            per_run = TRACE_PER_RUN.get(c["kind"]) if c.get("trace") else (
                None if c["kind"] == "metric" else "us")
            known = now is not None and c["baseline"] is not None
            c["adds_us"] = None
            if known and per_run == "us":
                c["adds_us"] = now - c["baseline"]
            elif known and per_run == "ns":
                c["adds_us"] = (now - c["baseline"]) / 1000
            total = totals.get(series)
            c["adds_share"] = c["adds_us"] / total if c["adds_us"] is not None and total \
                else None
            if per_run == "step" and c["now_pct"] is not None:
                c["adds_share"] = c["now_pct"] / 100  # the step is the run's pace
            c["trace"] = bool(c.get("trace"))
            for k in ("is_latest", "holds", "level"):
                c.pop(k, None)
            (effect if c["status"] == "in effect" else history).append(c)
    effect.sort(key=lambda c: (c["adds_share"] is None, -abs(c["adds_share"] or 0),
                               -abs(c["now_pct"] or 0), c["series"], c["name"]))
    history.sort(key=lambda c: (c["series"], c["name"], c["label_seq"]))
    return effect, history


def changes(con) -> tuple[list[dict], list[dict]]:
    """(changes in effect, history) of every series; see the module's docstring."""
    return classify(_kernel_changes(con) + _metric_changes(con) + _trace_changes(con),
                    _run_totals(con))


def trails(con, keys: set[tuple[str, str, str]]) -> dict[tuple[str, str, str], dict]:
    """Label medians of the given (series, kind, name) keys (marts.kernel_trends; kind
    ``metric``: marts.metric_trends; a trace fact: marts.trace_trends), for the index's
    sparklines: ``{"seq": [label_seq, ...], "median": [...]}``."""
    out: dict[tuple[str, str, str], dict] = {}
    facts = trace_kinds(con) if keys else set()
    trace_keys = ["\x1f".join(k) for k in keys if k[1] in facts]
    kernel_keys = ["\x1f".join(k) for k in keys if k[1] != "metric" and k[1] not in facts]
    if trace_keys:
        for s, k, n, seq, med in con.execute("""
            select t.series, t.fact, t.key, list(t.label_seq order by t.label_seq),
                list(case when isfinite(t.median) then t.median end order by t.label_seq)
            from marts.trace_trends as t
            where t.series || chr(31) || t.fact || chr(31) || t.key
                in (select unnest(?::varchar[]))
            group by t.series, t.fact, t.key
        """, [trace_keys]).fetchall():
            out[(s, k, n)] = {"seq": seq, "median": med}
    metric_keys = ["\x1f".join((k[0], k[2])) for k in keys if k[1] == "metric"]
    if kernel_keys:
        for s, k, n, seq, med in con.execute("""
            select t.series, t.kernel_kind, t.kernel, list(t.label_seq order by t.label_seq),
                list(case when isfinite(t.median_us) then t.median_us end order by t.label_seq)
            from marts.kernel_trends as t
            where t.series || chr(31) || t.kernel_kind || chr(31) || t.kernel
                in (select unnest(?::varchar[]))
            group by t.series, t.kernel_kind, t.kernel
        """, [kernel_keys]).fetchall():
            out[(s, k, n)] = {"seq": seq, "median": med}
    ctes = _metric_ctes(con) if metric_keys else None
    if ctes:
        for s, n, seq, med in con.execute(f"""
            with {ctes}
            select m.series, m.kernel || ' \u00b7 ' || m.metric, list(m.seq_ order by m.seq_),
                list(case when isfinite(m.median::double) then m.median::double end
                     order by m.seq_)
            from m
            where m.series || chr(31) || m.kernel || ' \u00b7 ' || m.metric
                in (select unnest(?::varchar[]))
            group by m.series, m.kernel, m.metric
        """, [metric_keys]).fetchall():  # noqa: S608 - fixed text only
            out[(s, "metric", n)] = {"seq": seq, "median": med}
    return out
