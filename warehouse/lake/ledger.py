"""The run ledger: which runs the lake holds, kept in the catalog's own database.

``pwh_lake_runs`` has one row per committed run, primary key (catalog, run_id). The row is
inserted in the same database transaction that moves the Iceberg tables' metadata pointers
(:mod:`warehouse.lake.commit`), so the ledger and the tables never disagree, and two writers
racing on the same run cannot both commit it: the second one's insert violates the key and its
whole transaction rolls back ("already ingested").

``pwh_lake_ranks`` indexes the runs of jobs of many ranks (series, label, job, rank; primary
key with the catalog): inserted in the transaction that commits the run, read to check a new rank
file against its job (:mod:`warehouse.lake.ranks`).

``pwh_lake_model_keys`` records, per model and key (run or series), the stamp of the rows
``pwh lake sync`` last published, so a sync sends only what changed.
"""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, DateTime, MetaData, String, Table, Text

META = MetaData()

RUNS = Table(
    "pwh_lake_runs", META,
    Column("catalog_name", String(255), primary_key=True),
    Column("run_id", String(64), primary_key=True),
    Column("source_format", String(64), nullable=False),
    Column("committed_at", DateTime, nullable=False),
)

RANKS = Table(
    "pwh_lake_ranks", META,
    Column("catalog_name", String(255), primary_key=True),
    Column("series", String(256), primary_key=True),
    Column("label", String(256), primary_key=True),
    Column("job", String(256), primary_key=True),
    Column("rank", BigInteger, primary_key=True, autoincrement=False),
    Column("run_id", String(64), nullable=False),
    Column("world_size", BigInteger, nullable=False),
    Column("file_name", String(1024), nullable=False),
    Column("info", Text, nullable=False),  # the run's distributedInfo (JSON)
)

MODEL_KEYS = Table(
    "pwh_lake_model_keys", META,
    Column("catalog_name", String(255), primary_key=True),
    Column("model", String(255), primary_key=True),
    Column("key", String(1024), primary_key=True),
    Column("stamp", String(64), nullable=False),
)


def ensure(engine) -> None:
    META.create_all(engine, checkfirst=True)


def committed(engine, catalog_name: str, run_ids: list[str] | None = None) -> set[str]:
    """The run ids the lake holds (of ``run_ids``, or all)."""
    from sqlalchemy import select

    q = select(RUNS.c.run_id).where(RUNS.c.catalog_name == catalog_name)
    out: set[str] = set()
    with engine.connect() as con:
        if run_ids is None:
            return {r[0] for r in con.execute(q)}
        for i in range(0, len(run_ids), 500):
            out |= {r[0] for r in con.execute(q.where(RUNS.c.run_id.in_(run_ids[i:i + 500])))}
    return out
