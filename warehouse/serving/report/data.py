"""What the report shows, read from the published snapshot (read-only; never the live file).

Every function takes an analyst connection (``warehouse.serving.query.connect``) and returns
plain Python values (dicts keyed by column name) that go into the pages as JSON unchanged, so a
test can compare every number in a page with the mart it came from. Columns are read by name
with ``select *``: a mart that gains columns (evidence such as ``min_detectable_pct``) still
works, and the extra columns travel along as evidence.
"""

from __future__ import annotations

import datetime as dt
import decimal
import math

# Columns of marts.kernel_trends every page relies on; the others are shown as evidence when
# present (a later mart may add some, e.g. min_detectable_pct).
TREND_CORE = ("series", "kernel_kind", "kernel", "label", "label_seq", "captured_at", "repeats",
              "median_us", "baseline_median_us", "baseline_mad_us", "delta_pct", "q_value",
              "verdict", "evidence", "change_point", "floor_pct")
VERDICTS = ("regressed", "improved", "inconclusive", "unchanged")
# how bad a verdict is, for ``pwh compare --fail-on``
SEVERITY = {"regressed": 2, "inconclusive": 1, "improved": 0, "unchanged": 0, None: 0}
TOP_KERNELS = 10  # series pages plot the kernels with a verdict plus this many by share of run


def jsonable(v):
    """A DuckDB value as JSON: times as ISO text, NaN/inf as null."""
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, dt.datetime | dt.date | dt.time):
        return v.isoformat()
    if isinstance(v, decimal.Decimal):
        return float(v)
    if isinstance(v, list | tuple):
        return [jsonable(x) for x in v]
    if isinstance(v, dict):
        return {k: jsonable(x) for k, x in v.items()}
    return v


def rows(con, sql: str, params=None) -> list[dict]:
    """Rows as dicts. Queries select their columns through :func:`select_list`, so values
    arrive JSON-ready (times as text, no NaN); the rest is converted here."""
    cur = con.execute(sql, params)
    cols = [d[0] for d in cur.description]
    out = [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]
    slow = [c for c, d in zip(cols, cur.description, strict=True)
            if str(d[1]).upper() not in _PLAIN]
    for r in out:
        for c in slow:
            r[c] = jsonable(r[c])
    return out


# values JSON can take as they come (doubles are made finite by select_list; pages.json_text
# cleans any other non-finite value)
_PLAIN = {"VARCHAR", "BIGINT", "INTEGER", "BOOLEAN", "HUGEINT", "UBIGINT", "SMALLINT",
          "TINYINT", "UINTEGER", "STRING", "NUMBER", "DOUBLE", "FLOAT", "DOUBLE[]", "FLOAT[]",
          "VARCHAR[]", "BIGINT[]"}
_TIME = ("TIMESTAMP", "DATE", "TIME")
_FLOAT = ("DOUBLE", "FLOAT", "REAL", "DECIMAL")
_select_cache: dict[tuple[int, str, str], str] = {}


def clear_cache() -> None:
    """Forget the column lists read so far (a new snapshot may have new columns)."""
    _select_cache.clear()
    _columns_cache[:] = [None, {}]


def select_list(con, table: str, alias: str) -> str:
    """``alias.*`` spelled out with JSON-ready expressions: timestamps as ISO text (UTC),
    non-finite doubles as NULL. Every column of the table, whatever columns it gains."""
    key = (id(con), table, alias)
    if key in _select_cache:
        return _select_cache[key]
    schema, name = table.split(".")
    parts = []
    for col, typ in con.execute(
            "select column_name, data_type from information_schema.columns "
            "where table_schema = ? and table_name = ? order by ordinal_position",
            [schema, name]).fetchall():
        q = f'{alias}."{col.replace(chr(34), chr(34) * 2)}"'
        typ = typ.upper()
        if "[" in typ or "(" in typ and not typ.startswith("DECIMAL"):
            parts.append(q)  # lists, structs, maps: converted in Python
        elif typ.startswith(_TIME):
            tz = " at time zone 'UTC'" if "TIME ZONE" in typ else ""
            parts.append(f"strftime({q}{tz}, '%Y-%m-%dT%H:%M:%S') as {q.split('.', 1)[1]}")
        elif typ.startswith(_FLOAT):
            parts.append(f"case when isfinite({q}::double) then {q}::double end "
                         f"as {q.split('.', 1)[1]}")
        else:
            parts.append(q)
    _select_cache[key] = ", ".join(parts)
    return _select_cache[key]


def has_marts(con) -> bool:
    """True when the snapshot holds the marts the report reads (a built warehouse)."""
    need = {"kernel_trends", "run_summary", "kernel_run_rollup"}
    got = {r[0] for r in con.execute(
        "select table_name from information_schema.tables where table_schema = 'marts'"
    ).fetchall()}
    return need <= got


_columns_cache: list = [None, {}]  # [the connection read, {(schema, table): columns}]


def table_columns(con, schema: str, table: str) -> list[str]:
    """The columns of ``schema.table`` ([] when it does not exist), read once per connection
    for every table (each query of an analyst connection has a fixed cost)."""
    if _columns_cache[0] is not con:
        cols: dict[tuple[str, str], list[str]] = {}
        for sch, name, col in con.execute(
                "select table_schema, table_name, column_name from information_schema.columns "
                "order by table_schema, table_name, ordinal_position").fetchall():
            cols.setdefault((sch, name), []).append(col)
        _columns_cache[:] = [con, cols]
    return list(_columns_cache[1].get((schema, table), []))


def series_names(con) -> list[str]:
    """Every series with runs, in name order."""
    return [r[0] for r in con.execute(
        "select distinct series from marts.run_summary order by series").fetchall()]


def fingerprints(con, series: list[str]) -> dict[str, str]:
    """A content hash per series over everything its pages show (trends, per-run points, runs,
    rollups): a series whose hash did not change needs no page rewritten."""
    parts: dict[str, list[str]] = {s: [] for s in series}
    for table in ("marts.kernel_trends", "marts.run_summary", "marts.kernel_run_rollup",
                  "staging.trend_points", "marts.audit_category_rollup", "marts.metric_trends",
                  "marts.trace_trends",
                  *RUN_FACTS):
        schema, name = table.split(".")
        cols = table_columns(con, schema, name)
        if not cols:
            continue
        # table names are constants of this module
        sql = (f"select t.series, count(*), sum(hash(t))::varchar from {table} as t "  # noqa: S608
               "group by t.series") if "series" in cols else (
            f"select r.series, count(*), sum(hash(t))::varchar from {table} as t "  # noqa: S608
            "inner join marts.run_summary as r on r.run_id = t.run_id group by r.series")
        for s, n, h in con.execute(sql).fetchall():
            if s in parts:
                parts[s].append(f"{table}:{n}:{h}")
    import hashlib

    return {s: hashlib.sha256("|".join(p).encode()).hexdigest()[:16] for s, p in parts.items()}


# ------------------------------------------------------------------------------- index

def overview(con) -> list[dict]:
    """One row per series: runs, labels, latest label and capture time, and the verdict counts
    at the latest label."""
    return rows(con, """
        with runs as (
            select series, count(*) as runs, max(captured_at) as last_captured_at
            from marts.run_summary
            group by series
        ),

        latest as (
            select series, max(label_seq) as label_seq, count(distinct label) as labels
            from marts.kernel_trends
            group by series
        ),

        at_latest as (
            select
                t.series,
                any_value(t.label) as latest_label,
                any_value(t.captured_at) as latest_captured_at,
                count(*) as kernels,
                count(*) filter (where t.verdict = 'regressed') as regressed,
                count(*) filter (where t.verdict = 'improved') as improved,
                count(*) filter (where t.verdict = 'inconclusive') as inconclusive,
                count(*) filter (where t.verdict = 'unchanged') as unchanged
            from marts.kernel_trends as t
            inner join latest on latest.series = t.series and latest.label_seq = t.label_seq
            group by t.series
        )

        select
            runs.series,
            runs.runs,
            coalesce(latest.labels, 0) as labels,
            at_latest.latest_label,
            strftime(at_latest.latest_captured_at, '%Y-%m-%dT%H:%M:%S') as latest_captured_at,
            strftime(runs.last_captured_at, '%Y-%m-%dT%H:%M:%S') as last_captured_at,
            coalesce(at_latest.kernels, 0) as kernels,
            coalesce(at_latest.regressed, 0) as regressed,
            coalesce(at_latest.improved, 0) as improved,
            coalesce(at_latest.inconclusive, 0) as inconclusive,
            coalesce(at_latest.unchanged, 0) as unchanged
        from runs
        left join latest on latest.series = runs.series
        left join at_latest on at_latest.series = runs.series
        order by runs.series
    """)


def latest_changes(con) -> list[dict]:
    """The regressed and improved kernels at the latest label of every series."""
    cols = select_list(con, "marts.kernel_trends", "t")
    return rows(con, f"""
        with latest as (
            select series, max(label_seq) as label_seq
            from marts.kernel_trends
            group by series
        )

        select {cols}
        from marts.kernel_trends as t
        inner join latest on latest.series = t.series and latest.label_seq = t.label_seq
        where t.verdict in ('regressed', 'improved')
        order by t.verdict, abs(t.delta_pct) desc, t.series, t.kernel
    """)  # noqa: S608


# ------------------------------------------------------------------------------- series

def _key_list(keys) -> list[str]:
    return [f"{k}\x1f{n}" for k, n in keys]


def trends(con, series: str, kernels: list[tuple[str, str]]) -> list[dict]:
    """The kernel_trends rows of the given kernels of ``series``, every label."""
    return rows(con, f"select {select_list(con, 'marts.kernel_trends', 't')} "  # noqa: S608
                     "from marts.kernel_trends as t where t.series = ? "
                     "and t.kernel_kind || chr(31) || t.kernel in (select unnest(?::varchar[])) "
                     "order by t.kernel_kind, t.kernel, t.label_seq",
                [series, _key_list(kernels)])


def kernel_flags(con, series: str) -> list[dict]:
    """Per kernel of ``series``: ``changed`` (a regressed/improved verdict or a change point
    anywhere in its history, or inconclusive beyond the floor at the latest label: "looks
    changed, not proven"), ``latest_change`` (regressed/improved at the latest label) and
    ``confirmed`` (regressed/improved at some label)."""
    return rows(con, """
        with latest as (
            select max(label_seq) as label_seq
            from marts.kernel_trends
            where series = $series
        )

        select
            t.kernel_kind,
            t.kernel,
            bool_or(t.verdict in ('regressed', 'improved') or coalesce(t.change_point, false)
                or (t.label_seq = latest.label_seq and t.verdict = 'inconclusive'
                    and abs(t.delta_pct) >= coalesce(t.floor_pct, 0))) as changed,
            bool_or(t.label_seq = latest.label_seq
                and t.verdict in ('regressed', 'improved')) as latest_change,
            bool_or(t.verdict in ('regressed', 'improved')) as confirmed
        from marts.kernel_trends as t
        cross join latest
        where t.series = $series
        group by t.kernel_kind, t.kernel
    """, {"series": series})


def points(con, series: str, kernels: list[tuple[str, str]]) -> list[dict]:
    """Every run's value of the given trended kernels (staging.trend_points)."""
    return rows(con, """
        select
            p.run_id,
            p.label,
            strftime(p.captured_at, '%Y-%m-%dT%H:%M:%S') as captured_at,
            p.kernel_kind,
            p.kernel,
            p.value_us
        from staging.trend_points as p
        where p.series = ?
            and p.kernel_kind || chr(31) || p.kernel in (select unnest(?::varchar[]))
        order by p.kernel_kind, p.kernel, p.captured_at, p.run_id
    """, [series, _key_list(kernels)])


def runs_of(con, series: str) -> list[dict]:
    return rows(con, f"select {select_list(con, 'marts.run_summary', 'r')} "  # noqa: S608
                     "from marts.run_summary as r where r.series = ? "
                     "order by r.captured_at, r.run_id", [series])


def _hash_by(con, table: str, key: str, series: str) -> dict[str, str]:
    schema, name = table.split(".")
    cols = table_columns(con, schema, name)
    if not cols:
        return {}
    if "series" in cols:
        sql = (f"select t.{key}, count(*), sum(hash(t))::varchar from {table} as t "  # noqa: S608
               "where t.series = ? group by 1")
    else:  # a run-level fact mart: its series through the run
        sql = (f"select t.{key}, count(*), sum(hash(t))::varchar from {table} as t "  # noqa: S608
               "inner join marts.run_summary as r on r.run_id = t.run_id "
               "where r.series = ? group by 1")
    return {k: f"{n}:{h}" for k, n, h in con.execute(sql, [series]).fetchall()}


# run-level marts of other facts (steps, GPU timeline, operators): keyed by run_id, no series
RUN_FACTS = ("marts.step_times", "marts.gpu_timeline", "marts.op_rollup")


def run_fingerprints(con, series: str) -> dict[str, str]:
    """A content hash per run of the series over what its run page shows."""
    parts = [_hash_by(con, t, "run_id", series) for t in (
        "marts.run_summary", "marts.kernel_run_rollup", "marts.audit_category_rollup",
        *RUN_FACTS)]
    return {r: "|".join(p.get(r, "") for p in parts) for r in parts[0]}


def label_fingerprints(con, series: str) -> dict[str, str]:
    """A content hash per label of the series over what its label page shows (its kernels,
    and its metrics' and trace facts' changes)."""
    parts = [_hash_by(con, t, "label", series) for t in (
        "marts.kernel_trends", "staging.trend_points", "marts.run_summary",
        "marts.metric_trends", "marts.trace_trends")]
    return {lab: "|".join(p.get(lab, "") for p in parts) for lab in parts[0]}


def rollups(con, series: str, run_ids: list[str]) -> dict[str, list[dict]]:
    """kernel_run_rollup rows of the given runs, by run."""
    out: dict[str, list[dict]] = {}
    if not run_ids:
        return out
    for r in rows(con, f"select {select_list(con, 'marts.kernel_run_rollup', 'k')} "  # noqa: S608
                       "from marts.kernel_run_rollup as k where k.series = ? "
                       "and k.run_id in (select unnest(?::varchar[])) "
                       "order by k.run_id, k.rank_in_run", [series, run_ids]):
        out.setdefault(r["run_id"], []).append(r)
    return out


def categories(con, series: str, run_ids: list[str]) -> dict[str, list[dict]]:
    """audit_category_rollup rows (level 'run') of the given audit runs, by run."""
    if not run_ids or not table_columns(con, "marts", "audit_category_rollup"):
        return {}
    out: dict[str, list[dict]] = {}
    for r in rows(con, f"select {select_list(con, 'marts.audit_category_rollup', 'a')} "  # noqa: S608
                       "from marts.audit_category_rollup as a where a.series = ? "
                       "and a.level = 'run' and a.run_id in (select unnest(?::varchar[])) "
                       "order by a.run_id, a.us desc, a.category", [series, run_ids]):
        out.setdefault(r["run_id"], []).append(r)
    return out
