"""Reference loads the benchmark compares ``pwh ingest`` with, each run in its own process.

* ``msgspec FILE`` — the parse-only floor: read the file, then decode it with msgspec into the
  project's own typed schema (``warehouse.ingesting.formats.profile.Profile``), GC off, and free it. Prints
  the decode time only (not the read, not the interpreter start); the harness also times the
  whole process, the floor the goal uses (``pwh ingest`` is timed as a whole process too).
* ``duckdb FILE DB`` — DuckDB reading the whole document with ``read_json`` (explicit columns, no
  auto-detection), UNNEST of samples and metadata into two tables of an on-disk database, commit
  and checkpoint. Prints the time from the first SQL statement to the end of the checkpoint.

Each prints one JSON object: ``{"seconds": …, "rows": …}``. ``python -m bench.refs --help``.
"""

from __future__ import annotations

import argparse
import gc
import json
import time
from pathlib import Path

DDL = """
create table samples (run_id varchar, sample_idx bigint, physical_tile bigint,
    offset_cycles bigint, duration_cycles bigint, phase bigint, epoch bigint, kind varchar,
    operation varchar, kernel varchar);
create table sample_metadata (run_id varchar, sample_idx bigint, meta_idx integer,
    name varchar, value varchar);
"""

LOAD = """
create temp table doc_samples as
with doc as (
    select samples
    from read_json(
        $path, format = 'unstructured', records = true, maximum_object_size = 4294967295,
        columns = {'samples': 'STRUCT("physicalTile" BIGINT, "offset" BIGINT, "duration" BIGINT,
            "phase" BIGINT, "epoch" BIGINT, "kind" VARCHAR, "operation" VARCHAR, "kernel" VARCHAR,
            "metadata" STRUCT("name" VARCHAR, "value" VARCHAR)[])[]'})
)
select generate_subscripts(samples, 1) - 1 as sample_idx, unnest(samples) as s
from doc
"""

INSERT_SAMPLES = """
insert into samples
select $run_id, sample_idx, s.physicalTile, s.offset, s.duration, s.phase, s.epoch, s.kind,
       s.operation, s.kernel
from doc_samples
"""

INSERT_METADATA = """
insert into sample_metadata
with pairs as (
    select sample_idx, generate_subscripts(s.metadata, 1) - 1 as meta_idx,
           unnest(s.metadata) as m
    from doc_samples
)
select $run_id, sample_idx, meta_idx, m.name, m.value from pairs
"""


def msgspec_floor(file: str) -> dict:
    import msgspec

    from warehouse.ingesting.formats.profile import Profile

    data = Path(file).read_bytes()
    dec = msgspec.json.Decoder(Profile)
    gc.disable()
    t0 = time.perf_counter()
    doc = dec.decode(data)
    seconds = time.perf_counter() - t0
    rows = len(doc.samples)
    del doc  # freed before exit, as every real parse must
    return {"seconds": seconds, "rows": rows}


def duckdb_load(file: str, db: str) -> dict:
    import duckdb

    con = duckdb.connect(db, config={"autoinstall_known_extensions": False})
    con.execute(DDL)
    t0 = time.perf_counter()
    con.execute("begin")
    con.execute(LOAD, {"path": file})
    con.execute(INSERT_SAMPLES, {"run_id": "r" * 64})
    con.execute(INSERT_METADATA, {"run_id": "r" * 64})
    con.execute("drop table doc_samples")
    con.execute("commit")
    con.execute("checkpoint")
    seconds = time.perf_counter() - t0
    rows = con.execute("select (select count(*) from samples), "
                       "(select count(*) from sample_metadata)").fetchone()
    con.close()
    return {"seconds": seconds, "rows": list(rows)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.refs", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="what", required=True)
    m = sub.add_parser("msgspec", help="parse-only floor")
    m.add_argument("file")
    d = sub.add_parser("duckdb", help="DuckDB read_json load")
    d.add_argument("file")
    d.add_argument("db")
    a = ap.parse_args(argv)
    out = msgspec_floor(a.file) if a.what == "msgspec" else duckdb_load(a.file, a.db)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
