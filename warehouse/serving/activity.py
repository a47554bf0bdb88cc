"""What the warehouse did since a point in time, read without taking the writer from anyone.

The Dagster ``warehouse_sensor`` (``pipelines/observe.py``) reports work done outside Dagster
(``pwh ingest``, ``pwh check``, ``pwh build``, the Python API) to the Dagster instance, so the UI
shows one truth. It asks :func:`peek` on every tick:

* the file is opened read-only and only if nobody is writing it (DuckDB refuses a reader while
  a writer holds the file: then this tick reports nothing and the next one tries again), and
  only when its size or modification time changed since the last look;
* it reads the runs ingested, the runs validated and the models built after the watermarks it
  was given, and closes the file at once (a few milliseconds: a writer that starts meanwhile
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
    ingested_at: dt.datetime = EPOCH   # new watermarks
    validated_at: dt.datetime = EPOCH
    built_at: dt.datetime = EPOCH


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
        if "checks.results" in have:
            runs = [r[0] for r in con.execute(
                "select distinct run_id from checks.results where validated_at > ?",
                [validated_after]).fetchall()]
            if runs:
                act.results = checks.latest_results(con, runs)
                act.validated_at = max(r.validated_at for r in act.results)
        if "meta.model_builds" in have:
            built = con.execute("select model, built_at from meta.model_builds "
                                "where built_at > ?", [built_after]).fetchall()
            if built:
                act.builds = dict(built)
                act.built_at = max(act.builds.values())
                for model in act.builds:
                    if model in have:
                        act.models[model] = con.execute(
                            f"select count(*) from {model}").fetchone()[0]  # noqa: S608 - catalog names
        return act
    finally:
        con.close()
