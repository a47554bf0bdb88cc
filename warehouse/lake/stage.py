"""A run's raw rows as Iceberg data files, parsed and loaded by ``pwh ingest``'s own loader.

The lake has no parser of its own: :func:`load_private` runs :func:`warehouse.ingesting.loader.
ingest_file` (every format, big profiles and traces streamed through the forked parser, the
same identity, run metadata, errors and quarantine) into a *private* in-memory DuckDB database
whose archive folder is a temporary folder inside the lake's own archive. :func:`data_files`
then writes each raw table that has rows with DuckDB's Parquet writer (``COPY … TO``, columns
cast to the Iceberg table's types and tagged with its field ids) straight to the table's data
folder, and describes each file for Iceberg from its Parquet footer (row count, column sizes,
bounds): no row passes through Python. Nothing is visible in the lake until
:func:`warehouse.lake.commit.commit_files` commits the run.

Threads: ``PWH_LAKE_THREADS`` caps DuckDB's and Arrow's threads of one writer (set it to 1 when
several writers share a machine's cores: ``pwh lake ingest`` processes started side by side,
the Dagster lake job's parallel ingests); unset, DuckDB uses every core.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

from warehouse.config import Settings
from warehouse.lake.catalog import LakeError, local_dir
from warehouse.lake.schemas import LakeTypeError


def threads() -> int | None:
    """``PWH_LAKE_THREADS`` (threads per writer), ``None`` when unset."""
    raw = os.environ.get("PWH_LAKE_THREADS", "").strip()
    if not raw:
        return None
    try:
        n = int(raw)
    except ValueError:
        raise LakeError(f"PWH_LAKE_THREADS={raw!r}: expected a whole number of threads "
                        "(1 or more)") from None
    if n < 1:
        raise LakeError(f"PWH_LAKE_THREADS={raw!r}: expected 1 or more threads")
    return n


def limit_arrow_threads() -> None:
    """Arrow's CPU and I/O pools to ``PWH_LAKE_THREADS`` (when set)."""
    n = threads()
    if n is not None:
        import pyarrow as pa

        pa.set_cpu_count(n)
        pa.set_io_thread_count(n)


def file_sha256(path: Path) -> str:
    """SHA-256 of the file's bytes (its ``run_id``), read in blocks (GIL released)."""
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


@dataclasses.dataclass(frozen=True)
class _PrivateSettings(Settings):
    """A warehouse in a temporary folder whose quarantine and landing are the real ones'."""

    real: Settings | None = None

    @property
    def quarantine_dir(self) -> Path:
        return self.real.quarantine_dir

    @property
    def landing_dir(self) -> Path:
        return self.real.landing_dir


@dataclasses.dataclass
class PrivateRun:
    """A run loaded into a private DuckDB database (``result`` says whether it was)."""

    result: object  # loader.IngestResult
    con: object  # duckdb connection, raw.* holding this run only
    tmp: Path

    def counts(self) -> dict[str, int]:
        """Rows per lake raw table (``raw.<table>``), tables without rows left out."""
        from warehouse.lake import schemas

        names = list(schemas.raw_schemas())
        q = " UNION ALL ".join(f"SELECT '{n}', count(*) FROM {n}" for n in names)  # noqa: S608
        return {n: c for n, c in self.con.execute(q).fetchall() if c}

    def archived_at(self) -> Path:
        return Path(self.con.execute("SELECT archive_path FROM raw.files").fetchone()[0])


def _tmp_root(settings: Settings, location: str) -> Path:
    """Scratch folder on the lake's own file system (archive and data files move by rename);
    the warehouse's state folder when the lake is in an object store."""
    d = local_dir(location)
    root = d / "archive" if d is not None else settings.state_dir / "lake-tmp"
    root.mkdir(parents=True, exist_ok=True)
    return root


@contextlib.contextmanager
def load_private(settings: Settings, location: str, path: Path, *, shown: str,
                 **meta_kw) -> Iterator[PrivateRun]:
    """``pwh ingest``'s own load of ``path`` into a private in-memory DuckDB database; the
    temporary folder and the database are gone when the block ends."""
    import duckdb

    from warehouse.ingesting import loader

    tmp = Path(tempfile.mkdtemp(prefix=f".pwh-run-{os.getpid()}-",
                                dir=_tmp_root(settings, location)))
    con = None
    try:
        config = {"temp_directory": str(tmp / "spill")}
        n = threads()
        if n is not None:
            config["threads"] = n
        con = duckdb.connect(":memory:", config=config)
        private = _PrivateSettings(tmp / "warehouse.duckdb", real=settings)
        res = loader.ingest_file(private, path, original_path=shown, con=con, **meta_kw)
        yield PrivateRun(res, con, tmp)
    finally:
        if con is not None:
            con.close()
        shutil.rmtree(tmp, ignore_errors=True)


def archive(cat, location: str, run: PrivateRun, sha: str) -> str:
    """Move the run's archived bytes from the private archive to ``<location>/archive/<sha>``
    (content-addressed; kept if already there); the private ``raw.files`` row is updated."""
    src = run.archived_at()
    dest = f"{location.rstrip('/')}/archive/{sha}"
    d = local_dir(location)
    if d is not None:
        final = d / "archive" / sha
        if final.exists() and final.stat().st_size == src.stat().st_size:
            pass
        elif src.is_relative_to(run.tmp):
            os.replace(src, final)  # the private copy: same file system, never half-written
        else:
            part = final.with_name(f".{sha}.{os.getpid()}.tmp")
            shutil.copyfile(src, part)
            os.replace(part, final)
        dest = str(final)
    else:
        io = cat._load_file_io(location=dest)
        inp = io.new_input(dest)
        if not (inp.exists() and len(inp) == src.stat().st_size):
            with open(src, "rb") as fh, io.new_output(dest).create(overwrite=True) as out:
                shutil.copyfileobj(fh, out, 8 << 20)  # object stores: one atomic put
    run.con.execute("UPDATE raw.files SET archive_path = ?", [dest])
    return dest


# Iceberg primitive type (its string form) -> the DuckDB type whose Parquet encoding it reads.
_DUCK = {
    "string": "VARCHAR", "long": "BIGINT", "int": "INTEGER", "double": "DOUBLE",
    "float": "FLOAT", "boolean": "BOOLEAN", "timestamp": "TIMESTAMP",
    "timestamptz": "TIMESTAMPTZ", "date": "DATE", "binary": "BLOB",
}


def _duck_type(t, where: str) -> tuple[str, object]:
    """(DuckDB type, FIELD_IDS entry children) of an Iceberg type."""
    from pyiceberg.types import ListType

    if isinstance(t, ListType):
        inner, sub = _duck_type(t.element_type, where + "[]")
        ids = {"element": t.element_id} if sub is None else {"element": {
            "__duckdb_field_id": t.element_id, **sub}}
        return f"{inner}[]", ids
    s = str(t)
    if s not in _DUCK:
        raise LakeError(f"{where}: the lake's type {s} has no DuckDB counterpart here")
    return _DUCK[s], None


def _ids_literal(ids: dict) -> str:
    parts = []
    for k, v in ids.items():
        val = _ids_literal(v) if isinstance(v, dict) else str(int(v))
        parts.append(f"'{k}': {val}")
    return "{" + ", ".join(parts) + "}"


def _select(con, name: str, schema) -> tuple[str, str]:
    """The SELECT that casts ``name``'s DuckDB columns to the Iceberg ``schema``, and the
    FIELD_IDS literal of the file."""
    have = [r[0] for r in con.execute(
        "SELECT column_name FROM duckdb_columns() WHERE schema_name = ? AND table_name = ? "
        "ORDER BY column_index", name.split(".")).fetchall()]
    want = {f.name for f in schema.fields}
    extra = [c for c in have if c not in want]
    if extra:
        raise LakeError(f"the lake table {name} has no column {', '.join(extra)} "
                        "(created by an older pwh?): nothing was written")
    cols, ids = [], {}
    for f in schema.fields:
        duck, sub = _duck_type(f.field_type, f"{name}.{f.name}")
        src = f'"{f.name}"' if f.name in have else "NULL"
        cols.append(f'CAST({src} AS {duck}) AS "{f.name}"')
        ids[f.name] = f.field_id if sub is None else {"__duckdb_field_id": f.field_id, **sub}
    return f"SELECT {', '.join(cols)} FROM {name}", _ids_literal(ids)  # noqa: S608


def data_files(run: PrivateRun, tables: dict[str, object], run_id: str) -> dict[str, list]:
    """Write each of ``tables`` (``ns.table`` -> loaded Iceberg table) from the private
    database as one Parquet data file of that table; their Iceberg descriptions. Written, not
    committed: invisible until the run's commit."""
    import duckdb
    from pyiceberg.io.pyarrow import parquet_file_to_data_file

    out = {}
    for name, tbl in tables.items():
        query, ids = _select(run.con, name, tbl.schema())
        fname = f"{uuid.uuid4()}-{run_id[:16]}.parquet"
        target = tbl.location_provider().new_data_location(fname)
        local = local_dir(target)
        dest = local if local is not None else run.tmp / fname
        dest.parent.mkdir(parents=True, exist_ok=True)
        try:
            run.con.execute(f"COPY ({query}) TO '{_sql_str(dest)}' "
                            f"(FORMAT parquet, COMPRESSION zstd, FIELD_IDS {ids})")
        except duckdb.ConversionException as exc:
            raise LakeTypeError(f"{name}: a value does not fit the lake's column type: "
                                f"{str(exc).splitlines()[0]}") from None
        except duckdb.Error as exc:
            raise LakeError(f"{name}: cannot write the data file {dest}: "
                            f"{str(exc).splitlines()[0]}") from None
        if local is None:
            with open(dest, "rb") as fh, tbl.io.new_output(target).create(overwrite=True) as o:
                shutil.copyfileobj(fh, o, 8 << 20)
            dest.unlink()
        try:
            out[name] = [parquet_file_to_data_file(tbl.io, tbl.metadata, target)]
        except ValueError as exc:
            raise LakeError(f"{name}: the data file {target} does not match the lake table: "
                            f"{exc}") from None
    return out


def _sql_str(p: Path) -> str:
    return str(p).replace("'", "''")
