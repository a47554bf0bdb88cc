"""Jobs of many ranks in the lake: a rank file checked against the ranks the lake already holds.

``pwh lake ingest`` loads each file through ``pwh ingest``'s loader into a private in-memory
DuckDB database (:mod:`warehouse.lake.stage`). There :func:`warehouse.ingesting.jobs.join`
checks the file on its own (a Kineto trace, integer ``rank`` and ``world_size``,
``0 <= rank < world_size``) and writes its ``raw.trace_jobs`` row, but that database holds no
other run: the job's other ranks are in the lake. :func:`check` runs the same
:func:`jobs.join` (the same rules and messages) on a small DuckDB database holding the run and
the job's ranks in the lake, so a duplicated or foreign rank is refused naming the file and the
rule.

The job's ranks are read from the rank index ``pwh_lake_ranks`` (:data:`warehouse.lake.ledger.
RANKS`: one row per run of a job, with its series, label, job, rank, world size, file name and
``distributedInfo``) in the catalog's own database, not by scanning the Iceberg tables (whose
plan reads every commit's manifest: seconds once the lake holds some thousand runs). A run's
row is inserted in the database transaction that commits the run (:func:`row`, passed as
``also`` to :func:`warehouse.lake.commit.commit_files`), so the index and ``raw.trace_jobs``
never disagree; its primary key (catalog, series, label, job, rank) refuses a second run of one
rank outright.

Where it is exact: ``commit_files`` calls :func:`check` in the writer's commit turn, after the
tables the commit's snapshots are built on are loaded; a run of a job always writes
``raw.trace_jobs``, whose pointer the commit moves by compare-and-swap. A rank committed by any
other writer after that load moves the pointer too: the swap fails, and the check runs again
before the retry. So two writers never both commit one rank, nor ranks of two different jobs
under one name, whatever the interleaving (the turn itself is only an optimisation). The ingest
also checks before archiving the bytes and writing the data files, so that a refused run
usually leaves no orphan file. :func:`backfill` indexes the runs of a lake written before the
index existed.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable

JOBS = "raw.trace_jobs"
KINETO = "kineto_trace"


@dataclasses.dataclass(frozen=True)
class Claim:
    """What a run of a job claims: its rank of ``(series, label, job)``."""

    run_id: str
    meta: object  # runmeta.RunMeta: series, label, job, job_source
    rank: int
    world_size: int
    file_name: str
    info: str  # the run's distributedInfo, JSON

    def record(self, catalog_name: str) -> dict:
        """Its row of the rank index."""
        return {"catalog_name": catalog_name, "series": self.meta.series,
                "label": self.meta.label, "job": self.meta.job, "rank": self.rank,
                "run_id": self.run_id, "world_size": self.world_size,
                "file_name": self.file_name, "info": self.info}


_CLAIM_SQL = (
    "SELECT f.sha256, f.series, f.label, f.captured_at, f.meta_source, j.job, j.job_source, "
    "j.rank, j.world_size, f.file_name, t.metadata "
    "FROM {jobs} AS j JOIN {files} AS f ON f.sha256 = j.run_id "
    "LEFT JOIN {runs} AS t ON t.run_id = j.run_id")


def _claims(rows) -> list[Claim]:
    from warehouse.ingesting.runmeta import RunMeta

    out = []
    for sha, series, label, captured_at, source, job, job_source, rank, world, fname, md in rows:
        info = json.loads(md or "{}").get("distributedInfo")
        out.append(Claim(sha, RunMeta(series, label, captured_at, source, job=job,
                                      job_source=job_source),
                         rank, world, fname, json.dumps(info, sort_keys=True)))
    return out


def claim(con) -> Claim | None:
    """The claim of the one run on ``con`` (a private database, or :func:`claim_of`'s), or
    ``None`` when it is no rank of a job (no ``raw.trace_jobs`` row)."""
    rows = con.execute(_CLAIM_SQL.format(jobs="raw.trace_jobs", files="raw.files",
                                         runs="raw.trace_runs")).fetchall()
    return _claims(rows)[0] if rows else None


def claim_of(tables: dict) -> Claim | None:
    """The claim of one run given as Arrow tables (``ns.table`` -> rows of that run)."""
    import duckdb
    import pyarrow as pa

    jobs_rows = tables.get(JOBS)
    if jobs_rows is None or not jobs_rows.num_rows:
        return None
    runs = tables.get("raw.trace_runs")
    if runs is None or "metadata" not in runs.column_names:
        runs = pa.table({"run_id": pa.array([], pa.string()),
                         "metadata": pa.array([], pa.string())})
    con = duckdb.connect(":memory:")
    try:
        for alias, t in (("j", jobs_rows), ("f", tables["raw.files"]), ("t", runs)):
            con.register(alias, t)
        return _claims(con.execute(_CLAIM_SQL.format(jobs="j", files="f", runs="t")
                                   ).fetchall())[0]
    finally:
        con.close()


def _members(cat, mine: Claim) -> list[tuple]:
    """The job's other ranks in the index, as :func:`jobs.join` reads them."""
    from sqlalchemy import select

    from warehouse.lake import ledger

    t = ledger.RANKS
    q = (select(t.c.run_id, t.c.rank, t.c.world_size, t.c.file_name, t.c.info)
         .where(t.c.catalog_name == cat.name, t.c.series == mine.meta.series,
                t.c.label == mine.meta.label, t.c.job == mine.meta.job,
                t.c.run_id != mine.run_id))
    with cat.engine.connect() as c:
        return [tuple(r) for r in c.execute(q)]


# the columns jobs.join reads (its own query: a column it reads that is missing here fails)
_VIEW = ("CREATE SCHEMA raw;"
         "CREATE TABLE raw.trace_jobs (run_id VARCHAR, job VARCHAR, rank BIGINT, "
         "world_size BIGINT, job_source VARCHAR);"
         "CREATE TABLE raw.files (sha256 VARCHAR, file_name VARCHAR, series VARCHAR, "
         "label VARCHAR);"
         "CREATE TABLE raw.trace_runs (run_id VARCHAR, source_format VARCHAR, metadata VARCHAR)")


def check(cat, mine: Claim, shown: str) -> None:
    """Refuse (:class:`~warehouse.errors.FormatError`, kind ``job``, naming ``shown`` and the
    rule) the run of ``mine`` if it is a duplicated or foreign rank of its job as the lake's
    rank index holds it. The job's first rank passes (checked on its own by the loader)."""
    import duckdb

    from warehouse.ingesting import jobs

    members = _members(cat, mine)
    if not members:
        return
    con = duckdb.connect(":memory:")
    try:
        con.execute(_VIEW)
        for run_id, rank, world, fname, info in members:
            con.execute("INSERT INTO raw.trace_jobs VALUES (?, ?, ?, ?, NULL)",
                        [run_id, mine.meta.job, rank, world])
            con.execute("INSERT INTO raw.files VALUES (?, ?, ?, ?)",
                        [run_id, fname, mine.meta.series, mine.meta.label])
            con.execute("INSERT INTO raw.trace_runs VALUES (?, ?, ?)",
                        [run_id, KINETO, json.dumps({"distributedInfo": json.loads(info)})])
        con.execute("INSERT INTO raw.trace_runs VALUES (?, ?, ?)",
                    [mine.run_id, KINETO, json.dumps({"distributedInfo": json.loads(mine.info)})])
        jobs.join(con, mine.run_id, mine.meta, shown)
    finally:
        con.close()


def checker(cat, mine: Claim | None, shown: str) -> Callable[[dict], None] | None:
    """:func:`check` for :func:`warehouse.lake.commit.commit_files` (called with the tables as
    loaded for the commit: the run must write ``raw.trace_jobs``), ``None`` for no claim."""
    if mine is None:
        return None

    def run(loaded: dict) -> None:
        from warehouse.lake.catalog import LakeError

        if JOBS not in loaded:
            raise LakeError(f"run {mine.run_id}: a rank of job {mine.meta.job!r} must commit "
                            f"{JOBS} (its compare-and-swap guards the rank check)")
        check(cat, mine, shown)

    return run


def row(cat, mine: Claim | None) -> Callable | None:
    """What the run's commit transaction adds to the rank index (``None``: nothing)."""
    if mine is None:
        return None

    def insert(con) -> None:
        from sqlalchemy import insert as sql_insert

        from warehouse.lake import ledger

        con.execute(sql_insert(ledger.RANKS).values(**mine.record(cat.name)))

    return insert


def backfill(cat) -> int:
    """Index the runs of ``raw.trace_jobs`` that the rank index lacks (a lake written before
    the index existed, or by an older pwh); returns how many. Cheap when there are none: one
    count per table."""
    from sqlalchemy import func, select

    from warehouse.lake import commit, ledger
    from warehouse.lake.catalog import load_consistent

    with cat.engine.connect() as c:
        indexed = c.execute(select(func.count()).select_from(ledger.RANKS)
                            .where(ledger.RANKS.c.catalog_name == cat.name)).scalar_one()
    loaded = load_consistent(cat, [JOBS])
    snap = loaded[JOBS].current_snapshot() if JOBS in loaded else None
    total = int((snap.summary or {}).get("total-records", 0)) if snap is not None else 0
    if total <= indexed:
        return 0
    from pyiceberg.expressions import In

    with commit.commit_turn(cat):
        loaded = load_consistent(cat, [JOBS, "raw.files", "raw.trace_runs"])
        jobs_rows = loaded[JOBS].scan().to_arrow()
        with cat.engine.connect() as c:
            have = {r[0] for r in c.execute(select(ledger.RANKS.c.run_id).where(
                ledger.RANKS.c.catalog_name == cat.name))}
        ids = sorted(set(jobs_rows.column("run_id").to_pylist()) - have)
        if not ids:
            return 0
        tables = {JOBS: jobs_rows,
                  "raw.files": loaded["raw.files"].scan(row_filter=In("sha256", ids)).to_arrow(),
                  "raw.trace_runs": loaded["raw.trace_runs"].scan(
                      row_filter=In("run_id", ids),
                      selected_fields=("run_id", "metadata")).to_arrow()}
        claims = _all_claims(tables, set(ids))
        from sqlalchemy.exc import IntegrityError

        n = 0
        for cl in claims:  # one by one: a rank indexed twice (mixed before) keeps the first
            try:
                with cat.engine.begin() as c:
                    c.execute(ledger.RANKS.insert().values(**cl.record(cat.name)))
                n += 1
            except IntegrityError:
                pass
        return n


def _all_claims(tables: dict, ids: set[str]) -> list[Claim]:
    import duckdb

    con = duckdb.connect(":memory:")
    try:
        for alias, name in (("j", JOBS), ("f", "raw.files"), ("t", "raw.trace_runs")):
            con.register(alias, tables[name])
        rows = con.execute(_CLAIM_SQL.format(jobs="j", files="f", runs="t")
                           + " ORDER BY f.ingested_at, j.run_id").fetchall()
    finally:
        con.close()
    return [c for c in _claims(rows) if c.run_id in ids]
