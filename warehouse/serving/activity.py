"""What the warehouse did since a point in time, read without taking the writer from anyone.

The Dagster ``warehouse_sensor`` (``pipelines/observe.py``) reports work done outside Dagster
(``pwh ingest``, ``pwh check``, ``pwh build``, the Python API) to the Dagster instance, so the UI
shows one truth. It asks :func:`peek` on every tick:

* the file is opened read-only and only if nobody is writing it (DuckDB refuses a reader while
  a writer holds the file: then this tick reports nothing and the next one tries again), and
  only when its size or modification time changed since the last look;
* it reads the runs ingested, the runs re-derived (``pwh rederive``, ``meta.rederivations``), the
  runs validated and the models built after the watermarks it was given (with
  :func:`model_numbers`, what Dagster's own builds report), and the analysts' current snapshot
  version, and closes the file at once (a few milliseconds: a writer that starts meanwhile
  retries, see ``db.connect_rw``);
* a watermark alone misses a run whose ingestion time is older than the watermark but which
  was not in the warehouse at the last look (committed late by a process whose clock or
  transaction started earlier, the clock stepped back, a backup restored or the file replaced):
  so each look also returns a digest of the runs and re-derivations up to its watermarks
  (:func:`runs_digest`: their count and the XOR of their hashes, one scan of the manifest), and
  the next look compares it with the runs and re-derivations up to the same watermarks now;
  when they differ it looks at every run (``Activity.rewound``): the caller leaves out those it
  reported already.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

import duckdb

from warehouse import db
from warehouse.config import Settings

EPOCH = dt.datetime(1970, 1, 1)
# written by `pwh rederive` (warehouse.ingesting.rederive): one row per run re-derived
REDERIVATIONS = "meta.rederivations"


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
    derived_at: dt.datetime = EPOCH    # of the re-derivations
    # runs_digest up to the new ingestion and re-derivation watermarks (give it to the next look)
    seen: list[int] = field(default_factory=lambda: [0, 0])
    rewound: bool = False  # the runs up to the watermarks given were not those seen: all looked at


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


def runs_digest(con, have: set[str], ingested_upto: dt.datetime, derived_upto: dt.datetime
                ) -> tuple[list[int], list[int]]:
    """[count, XOR of hashes] of the runs ingested up to ``ingested_upto`` and the
    re-derivations up to ``derived_upto``, and the same of all of them (what a look that read
    every run since those watermarks has seen), in one scan: equal digests, the same runs and
    re-derivations (a DuckDB upgrade that changes ``hash`` makes one look a rewound one)."""
    parts, params = [], {}
    if "raw.files" in have:
        parts.append("select hash(sha256) as h, ingested_at <= $i as upto from raw.files")
        params["i"] = ingested_upto
    if REDERIVATIONS in have:
        parts.append("select hash(run_id, rederived_at), rederived_at <= $d "
                     "from meta.rederivations")
        params["d"] = derived_upto
    if not parts:
        return [0, 0], [0, 0]
    sql = ("select count(*) filter (where upto), coalesce(bit_xor(h) filter (where upto), 0), "  # noqa: S608 - fixed parts
           "count(*), coalesce(bit_xor(h), 0) from (" + " union all ".join(parts) + ")")
    n, x, n_all, x_all = con.execute(sql, params).fetchone()
    return [int(n), int(x)], [int(n_all), int(x_all)]


def _runs_since(con, have: set[str], ingested_after: dt.datetime, derived_after: dt.datetime
                ) -> list[dict]:
    """The manifest rows of the runs ingested or re-derived after the watermarks, with
    ``rederived_at`` (their latest re-derivation; None: never re-derived), in ingestion order."""
    if REDERIVATIONS in have:
        cur = con.execute(
            "select f.*, d.rederived_at from raw.files f left join (select run_id, "
            "max(rederived_at) as rederived_at from meta.rederivations group by run_id) d "
            "on d.run_id = f.sha256 where f.ingested_at > $i or d.rederived_at > $d "
            "order by f.ingested_at, f.sha256", {"i": ingested_after, "d": derived_after})
    else:
        cur = con.execute("select *, null::timestamp as rederived_at from raw.files "
                          "where ingested_at > ? order by ingested_at, sha256", [ingested_after])
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]


def peek(settings: Settings, ingested_after: dt.datetime, validated_after: dt.datetime,
         built_after: dt.datetime, raw_tables: dict[str, str],
         derived_after: dt.datetime = EPOCH, seen: list[int] | None = None) -> Activity | None:
    """Runs ingested (or re-derived), runs validated and models built after the given UTC times
    (None: the warehouse is being written right now). ``raw_tables``: raw table -> its run
    column. ``seen``: the digest the last look returned (``Activity.seen``) for
    ``ingested_after`` and ``derived_after``: when the runs and re-derivations up to them are
    not those any more, or ``seen`` is None while one of them is set, every run is looked at
    (``rewound``)."""
    from warehouse import checks

    if not settings.warehouse.exists():
        return Activity(ingested_at=ingested_after, validated_at=validated_after,
                        built_at=built_after, derived_at=derived_after, seen=seen or [0, 0])
    con = _open(settings)
    if con is None:
        return None
    try:
        have = _tables(con)
        marked = ingested_after > EPOCH or derived_after > EPOCH
        # the new watermarks end up past every run and re-derivation: the digest of all of them
        # is what this look has seen
        now, everything = runs_digest(con, have, ingested_after, derived_after)
        rewound = marked and now != seen
        if rewound:
            ingested_after = derived_after = EPOCH
        act = Activity(ingested_at=ingested_after, validated_at=validated_after,
                       built_at=built_after, derived_at=derived_after, rewound=rewound,
                       seen=everything)
        if REDERIVATIONS in have:
            last = con.execute("select max(rederived_at) from meta.rederivations").fetchone()[0]
            act.derived_at = max(derived_after, last or EPOCH)
        if "raw.files" in have:
            act.runs = _runs_since(con, have, ingested_after, derived_after)
            if act.runs:
                act.ingested_at = max(ingested_after, *(r["ingested_at"] for r in act.runs))
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
