"""Jobs of many ranks in the lake: a rank file checked against the ranks the lake already holds.

``pwh lake ingest`` loads each file through ``pwh ingest``'s loader into a private in-memory
DuckDB database (:mod:`warehouse.lake.stage`). There :func:`warehouse.ingesting.jobs.join`
checks the file on its own (a Kineto trace, integer ``rank`` and ``world_size``,
``0 <= rank < world_size``) and writes its ``raw.trace_jobs`` row, but that database holds no
other run: the job's other ranks are in the lake. :func:`check` applies the same rules (the
same :func:`jobs.join`, so the same refusals and messages) against the job's ranks in the lake
(``raw.trace_jobs`` rows of the job's name whose ``raw.files`` row has the run's series and
label, with their ``raw.trace_runs`` header): a duplicated or foreign rank is refused, naming
the file and the rule.

Where it is exact: :func:`warehouse.lake.commit.commit_files` calls it in the writer's commit
turn on the tables as loaded for the commit, and a run of a job always writes
``raw.trace_jobs``, whose pointer that commit moves by compare-and-swap. A rank committed by
any other writer after that load moves the pointer too, the swap fails, and the check runs
again on the new tables before the retry: two writers never both commit one rank of one job,
whatever the interleaving (the turn itself is only an optimisation). The ingest also calls it
before archiving the bytes and writing the data files, so that a refused run usually leaves no
orphan file.
"""

from __future__ import annotations

from collections.abc import Callable

JOBS = "raw.trace_jobs"
# What jobs.join reads of the job's other ranks (a rank file of a job writes all three)
READS = ("raw.trace_jobs", "raw.files", "raw.trace_runs")


def claim(con) -> tuple | None:
    """``(run_id, RunMeta)`` of the private database's run when it is a rank of a job (its
    ``raw.trace_jobs`` row written by :func:`jobs.join`), else ``None``."""
    from warehouse.ingesting.runmeta import RunMeta

    rows = con.execute(
        "SELECT f.sha256, f.series, f.label, f.captured_at, f.meta_source, j.job, j.job_source "
        "FROM raw.trace_jobs AS j JOIN raw.files AS f ON f.sha256 = j.run_id").fetchall()
    if not rows:
        return None
    sha, series, label, captured_at, source, job, job_source = rows[0]
    return sha, RunMeta(series, label, captured_at, source, job=job, job_source=job_source)


def _members(loaded: dict, run_id: str, meta) -> dict[str, object]:
    """The lake's rows (Arrow tables, per raw table of :data:`READS`) of the job's other ranks:
    same job name, series and label."""
    import pyarrow as pa
    import pyarrow.compute as pc
    from pyiceberg.expressions import And, EqualTo, In

    if JOBS not in loaded:
        return {}
    jobs_rows = loaded[JOBS].scan(row_filter=EqualTo("job", meta.job)).to_arrow()
    ids = sorted(set(jobs_rows.column("run_id").to_pylist()) - {run_id})
    if not ids:
        return {}
    files = loaded["raw.files"].scan(row_filter=And(
        In("sha256", ids), And(EqualTo("series", meta.series),
                               EqualTo("label", meta.label)))).to_arrow()
    ids = sorted(set(files.column("sha256").to_pylist()))
    if not ids:
        return {}
    keep = pa.array(ids, pa.string())
    return {
        JOBS: jobs_rows.filter(pc.is_in(jobs_rows.column("run_id"), value_set=keep)),
        "raw.files": files,
        "raw.trace_runs": loaded["raw.trace_runs"].scan(row_filter=In("run_id", ids)).to_arrow()
        if "raw.trace_runs" in loaded else pa.table({}),
    }


def check(con, loaded: dict, shown: str) -> None:
    """Refuse (:class:`~warehouse.errors.FormatError`, kind ``job``, naming ``shown`` and the
    rule) the private database's run on ``con`` if it is a duplicated or foreign rank of a job
    whose other ranks are in the lake tables ``loaded`` (``ns.table`` -> pyiceberg table, as
    of one instant). A run of no job passes. ``con`` is left as it was."""
    from warehouse.ingesting import jobs

    mine = claim(con)
    if mine is None:
        return
    run_id, meta = mine
    members = _members(loaded, run_id, meta)
    if not members:
        return  # the job's first rank in the lake: jobs.join checked it on its own already
    con.execute("BEGIN")
    try:
        # the private database as the DuckDB warehouse would be: the job's ranks beside the run
        con.execute("DELETE FROM raw.trace_jobs WHERE run_id = ?", [run_id])
        for name, rows in members.items():
            if rows.num_rows:
                con.register("_pwh_lake_rank", rows)
                try:
                    con.execute(f"INSERT INTO {name} BY NAME "  # noqa: S608
                                "SELECT * FROM _pwh_lake_rank")
                finally:
                    con.unregister("_pwh_lake_rank")
        jobs.join(con, run_id, meta, shown)
    finally:
        con.execute("ROLLBACK")


def scratch():
    """An in-memory DuckDB database with the warehouse's raw layer, for :func:`hold`."""
    import duckdb

    from warehouse import db

    con = duckdb.connect(":memory:", config=dict(db.BASE_CONFIG))
    db.ensure_schema(con)
    return con


def hold(con, tables: dict) -> None:
    """Make the :data:`READS` tables of ``con`` hold one run's rows (``ns.table`` -> Arrow
    table, e.g. a DuckDB warehouse's run that ``pwh lake sync`` publishes) and nothing else."""
    con.execute("BEGIN")
    try:
        for name in READS:
            con.execute(f"DELETE FROM {name}")  # noqa: S608
            rows = tables.get(name)
            if rows is not None and rows.num_rows:
                con.register("_pwh_lake_rank", rows)
                try:
                    con.execute(f"INSERT INTO {name} BY NAME "  # noqa: S608
                                "SELECT * FROM _pwh_lake_rank")
                finally:
                    con.unregister("_pwh_lake_rank")
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise


def checker(con, shown: str) -> Callable[[dict], None] | None:
    """:func:`check` for :func:`warehouse.lake.commit.commit_files` (called with the tables
    as loaded for the commit), ``None`` when the run is no rank of a job."""
    if claim(con) is None:
        return None
    return lambda loaded: check(con, loaded, shown)
