"""What the warehouse did since a point in time, read without taking the writer from anyone.

The Dagster ``warehouse_sensor`` (``pipelines/observe.py``) reports work done outside Dagster
(``pwh ingest``, ``pwh check``, ``pwh build``, the Python API) to the Dagster instance, so the UI
shows one truth. It asks :func:`peek` on every tick:

* the file is opened read-only and only if nobody is writing it (DuckDB refuses a reader while
  a writer holds the file: then this tick reports nothing and the next one tries again), and
  only when its size or modification time changed since the last look;
* it reads the runs ingested, the runs validated and the models built after the watermarks it
  was given (with :func:`model_numbers`, what Dagster's own builds report), and the analysts'
  current snapshot version, and closes the file at once (a few milliseconds: a writer that starts meanwhile
  retries, see ``db.connect_rw``).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

import duckdb

from warehouse import db
from warehouse.config import Settings

EPOCH = dt.datetime(1970, 1, 1)


@dataclass
class Activity:
    runs: list[dict] = field(default_factory=list)        # raw.files rows ingested since
    rows: dict[str, dict[str, int]] = field(default_factory=dict)  # run -> raw table -> rows
    results: list = field(default_factory=list)           # checks.Result validated since
    builds: dict[str, dt.datetime] = field(default_factory=dict)  # model -> built_at, since
    models: dict[str, int] = field(default_factory=dict)  # model -> row count (when built)
    numbers: dict[str, dict[str, int]] = field(default_factory=dict)  # model -> model_numbers
    snapshot: str = ""  # the analysts' current snapshot version ("" before one is published)
    statuses: dict = field(default_factory=dict)  # status_counts, when runs were validated
    failing: list = field(default_factory=list)  # failing_results, when runs were ingested
    names: dict[str, str] = field(default_factory=dict)  # run -> file name, of those
    ingested_at: dt.datetime = EPOCH   # new watermarks
    validated_at: dt.datetime = EPOCH
    built_at: dt.datetime = EPOCH


def model_numbers(con, name: str) -> dict[str, int]:
    """What a model's materialisation plots, whoever built it (a Dagster op or ``pwh build``):
    ``row_count``; ``runs`` and ``series`` (distinct values) when it has those columns;
    ``regressions``, ``improvements``, ``inconclusive`` (rows per verdict) when it has a
    ``verdict``."""
    cols = {r[0] for r in con.execute(f"DESCRIBE {name}").fetchall()}  # noqa: S608 - catalog names
    out = {"row_count": con.execute(f"SELECT count(*) FROM {name}").fetchone()[0]}  # noqa: S608
    for col in ("run_id", "series"):
        if col in cols:
            out["runs" if col == "run_id" else col] = con.execute(
                f"SELECT count(DISTINCT {col}) FROM {name}").fetchone()[0]  # noqa: S608
    if "verdict" in cols:
        found = dict(con.execute(
            f"SELECT verdict, count(*) FROM {name} GROUP BY verdict").fetchall())  # noqa: S608
        out.update(regressions=found.get("regressed", 0), improvements=found.get("improved", 0),
                   inconclusive=found.get("inconclusive", 0))
    return out


def status_counts(con) -> dict[str, tuple[int, list[str]]]:
    """``checks.run_status`` in numbers: per status, the runs and (failed) the invariants."""
    rows = con.execute("select status, count(distinct run_id), list(distinct inv) from ("
                       "select run_id, status, unnest(coalesce(failed_invariants, "
                       "[null::varchar])) as inv from checks.run_status) group by status"
                       ).fetchall()
    return {st: (n, sorted(i for i in invs if i)) for st, n, invs in rows}


def failing_results(con, exclude=()) -> tuple[list, dict[str, str]]:
    """The failing results of the latest validation of every run not in ``exclude`` that still
    fails something, and run -> file name of those runs and of ``exclude``: what a check's
    outcome must still show whatever a later batch validated. A few milliseconds: only runs
    with a failing result are read."""
    from warehouse import checks

    exclude = set(exclude)
    runs = [r[0] for r in con.execute(
        "select distinct run_id from checks.results where not success").fetchall()
        if r[0] not in exclude]
    failing = [r for r in (checks.latest_results(con, runs) if runs else []) if not r.success]
    ids = sorted({r.run_id for r in failing} | exclude)
    names = dict(con.execute("select sha256, file_name from raw.files where sha256 in "
                             "(select unnest($ids))", {"ids": ids}).fetchall()) if ids else {}
    return failing, names


def file_signature(settings: Settings) -> list[int] | None:
    """Size and mtime of the warehouse file and its WAL: unchanged means nothing to read."""
    sig = []
    for p in (settings.warehouse, settings.warehouse.with_name(settings.warehouse.name + ".wal")):
        try:
            st = p.stat()
            sig += [st.st_size, st.st_mtime_ns]
        except FileNotFoundError:
            sig += [0, 0]
    return sig if sig[:2] != [0, 0] else None


def _open(settings: Settings):
    try:
        return duckdb.connect(str(settings.warehouse), read_only=True,
                              config=dict(db.BASE_CONFIG))
    except duckdb.IOException as exc:
        if "lock" in str(exc).lower():
            return None  # a writer is at work: look again next tick
        raise


def _tables(con) -> set[str]:
    return {f"{s}.{t}" for s, t in con.execute(
        "select schema_name, table_name from duckdb_tables() "
        "union all select schema_name, view_name from duckdb_views() where not internal"
    ).fetchall()}


def peek(settings: Settings, ingested_after: dt.datetime, validated_after: dt.datetime,
         built_after: dt.datetime, raw_tables: dict[str, str]) -> Activity | None:
    """Runs ingested, runs validated and models built after the given UTC times (None: the
    warehouse is being written right now). ``raw_tables``: raw table -> its run column."""
    from warehouse import checks

    if not settings.warehouse.exists():
        return Activity(ingested_at=ingested_after, validated_at=validated_after,
                        built_at=built_after)
    con = _open(settings)
    if con is None:
        return None
    try:
        have = _tables(con)
        act = Activity(ingested_at=ingested_after, validated_at=validated_after,
                       built_at=built_after)
        if "raw.files" in have:
            cur = con.execute(
                "select * from raw.files where ingested_at > ? order by ingested_at, sha256",
                [ingested_after])
            names = [d[0] for d in cur.description]
            act.runs = [dict(zip(names, r, strict=True)) for r in cur.fetchall()]
            if act.runs:
                act.ingested_at = max(r["ingested_at"] for r in act.runs)
                ids = [r["sha256"] for r in act.runs]
                for table, col in raw_tables.items():
                    if f"raw.{table}" not in have:
                        continue
                    for run, n in con.execute(
                            f"select {col}, count(*) from raw.{table} "  # noqa: S608 - fixed names
                            f"where {col} in (select unnest($ids)) group by 1",
                            {"ids": ids}).fetchall():
                        act.rows.setdefault(run, {})[table] = n
        if "checks.results" in have and act.runs:
            act.failing, act.names = failing_results(con)
        if "checks.results" in have:
            runs = [r[0] for r in con.execute(
                "select distinct run_id from checks.results where validated_at > ?",
                [validated_after]).fetchall()]
            if runs:
                act.results = checks.latest_results(con, runs)
                act.validated_at = max(r.validated_at for r in act.results)
                act.statuses = status_counts(con)
        if "meta.model_builds" in have:
            built = con.execute("select model, built_at from meta.model_builds "
                                "where built_at > ?", [built_after]).fetchall()
            if built:
                act.builds = dict(built)
                act.built_at = max(act.builds.values())
                for model in act.builds:
                    if model in have:
                        act.numbers[model] = model_numbers(con, model)
                        act.models[model] = act.numbers[model]["row_count"]
        from warehouse.serving import snapshot

        cur = snapshot.current(settings)
        act.snapshot = snapshot.version_of(cur) if cur is not None else ""
        return act
    finally:
        con.close()
