"""Where the lake is: the catalog (by URI) and the warehouse location, and how to open them.

* catalog URI: ``--catalog``, else ``$PWH_LAKE_CATALOG``, else a SQLite file beside the DuckDB
  warehouse (``<state>/lake/catalog.db``). ``postgresql://user@host/db`` (or
  ``postgresql:///db?host=/socket/dir``) for teams: driven by psycopg 3.
* location: ``--location``, else ``$PWH_LAKE_LOCATION``, else ``<state>/lake/warehouse``. A
  folder here; in production an object-store URI (``s3://…``, ``gs://…``) that pyiceberg's
  FileIO writes to (documented in docs/scale-out.md, not tested here).

The lake is plain Iceberg: ``pyiceberg.catalog.load_catalog("pwh", type="sql", uri=URI,
warehouse=LOCATION)`` reads every table. Namespaces: ``raw``, ``checks``, ``staging``,
``marts``, with the DuckDB warehouse's table and column names.
"""

from __future__ import annotations

import os
import random
import time
from dataclasses import dataclass
from pathlib import Path

from warehouse.config import Settings
from warehouse.errors import PwhError

CATALOG_NAME = "pwh"
NAMESPACES = ("raw", "checks", "staging", "marts")


class LakeError(PwhError):
    """The lake cannot be opened or written: the message names the catalog or table and why."""


@dataclass(frozen=True)
class LakeConfig:
    uri: str  # SQLAlchemy URI of the catalog database
    location: str  # warehouse location (folder path or object-store URI)

    @property
    def shown(self) -> str:
        return f"catalog {redact(self.uri)}, location {self.location}"


def redact(uri: str) -> str:
    """The URI without a password, for messages."""
    if "://" not in uri or "@" not in uri:
        return uri
    scheme, rest = uri.split("://", 1)
    cred, host = rest.rsplit("@", 1)
    user = cred.split(":", 1)[0]
    return f"{scheme}://{user}@{host}"


def resolve(settings: Settings, catalog: str | None = None,
            location: str | None = None) -> LakeConfig:
    """The lake of these options, else ``$PWH_LAKE_CATALOG``/``$PWH_LAKE_LOCATION``, else a
    SQLite catalog and a folder beside the DuckDB warehouse."""
    lake_dir = settings.state_dir / "lake"
    uri = catalog or os.environ.get("PWH_LAKE_CATALOG") or f"sqlite:///{lake_dir / 'catalog.db'}"
    loc = location or os.environ.get("PWH_LAKE_LOCATION") or str(lake_dir / "warehouse")
    return LakeConfig(normalise_uri(uri), normalise_location(loc))


def normalise_uri(uri: str) -> str:
    """``postgresql://`` means psycopg 3 (the ``[lake]`` extra); a bare path means SQLite."""
    if uri.startswith(("postgresql://", "postgres://")):
        return "postgresql+psycopg://" + uri.split("://", 1)[1]
    if "://" not in uri:
        return f"sqlite:///{Path(uri).expanduser().resolve()}"
    return uri


def normalise_location(loc: str) -> str:
    if "://" in loc:
        return loc
    return str(Path(loc).expanduser().resolve())


def local_dir(location: str) -> Path | None:
    """The folder of a local location, ``None`` for an object store."""
    if location.startswith("file://"):
        return Path(location[len("file://"):])
    return None if "://" in location else Path(location)


def open_catalog(cfg: LakeConfig):
    """The SQL catalog with the pwh namespaces and the run ledger, created if missing.

    Creating the catalog tables races between processes starting at once on a new database:
    such an error is retried a few times."""
    try:
        from pyiceberg.catalog.sql import SqlCatalog
    except ImportError as exc:
        raise LakeError(f"lake mode needs the [lake] extra (pip install -e '.[lake]'): {exc}"
                        ) from None
    from sqlalchemy.exc import SQLAlchemyError

    keep_null_struct_lists()
    if cfg.uri.startswith("sqlite:///"):
        Path(cfg.uri[len("sqlite:///"):]).parent.mkdir(parents=True, exist_ok=True)
    d = local_dir(cfg.location)
    if d is not None:
        d.mkdir(parents=True, exist_ok=True)
    last: Exception | None = None
    for attempt in range(8):
        try:
            cat = SqlCatalog(CATALOG_NAME, uri=cfg.uri, warehouse=_warehouse_uri(cfg.location))
            _tune(cat)
            for ns in NAMESPACES:
                cat.create_namespace_if_not_exists(ns)
            from warehouse.lake import ledger

            ledger.ensure(cat.engine)
            return cat
        except SQLAlchemyError as exc:
            last = exc
            if "already exists" not in str(exc) and "locked" not in str(exc) \
                    and "duplicate key" not in str(exc) and "UNIQUE" not in str(exc):
                break
            time.sleep(0.05 * (attempt + 1) * (1 + random.random()))
    raise LakeError(f"{cfg.shown}: cannot open the Iceberg catalog: "
                    f"{str(last).splitlines()[0] if last else 'unknown error'}")


def keep_null_struct_lists() -> None:
    """Work around pyiceberg 0.12 turning a NULL list of structs into ``[]``.

    Its Arrow projection (writing and reading alike) rebuilds a list-of-struct column with
    ``LargeListArray.from_arrays(offsets, values)``, which drops the list's validity: DuckDB's
    NULL ``per_device`` of a non-trace run came back as ``[]``. The patched method passes the
    NULL mask along; anything else is pyiceberg's own code. Readers that do not go through
    pwh (plain pyiceberg) still see ``[]`` for such a NULL until pyiceberg fixes it."""
    import pyarrow as pa
    from pyiceberg.io import pyarrow as pio

    visitor = pio.ArrowProjectionVisitor
    if getattr(visitor.list, "_pwh_keeps_nulls", False):
        return
    original = visitor.list

    def list_(self, list_type, list_array, value_array):
        if (isinstance(list_array, (pa.ListArray, pa.LargeListArray))
                and isinstance(value_array, pa.StructArray) and list_array.null_count):
            value_array = self._cast_if_needed(list_type.element_field, value_array)
            field = pa.large_list(self._construct_field(list_type.element_field,
                                                        value_array.type))
            offsets = list_array.offsets.cast(pa.int64())
            return pa.LargeListArray.from_arrays(offsets, value_array, type=field,
                                                 mask=list_array.is_null())
        return original(self, list_type, list_array, value_array)

    list_._pwh_keeps_nulls = True
    visitor.list = list_


def _warehouse_uri(location: str) -> str:
    return location if "://" in location else f"file://{location}"


def _tune(cat) -> None:
    """SQLite: wait up to 60 s for the database lock (concurrent writers), WAL journal."""
    if cat.engine.dialect.name != "sqlite":
        return
    from sqlalchemy import event

    @event.listens_for(cat.engine, "connect")
    def _on_connect(dbapi_con, _record):  # pragma: no cover - exercised by every SQLite test
        dbapi_con.execute("PRAGMA busy_timeout = 60000")
        dbapi_con.execute("PRAGMA journal_mode = WAL")

    cat.engine.dispose()  # connections opened from now on get the pragmas


def table_ident(name: str) -> tuple[str, str]:
    ns, _, table = name.partition(".")
    return ns, table


def load_consistent(cat, names: list[str]) -> dict[str, object]:
    """Load ``names`` (``ns.table``) as of one instant: every metadata location is read in one
    query, so a run committed across several tables is either in all of them or in none.
    Missing tables are left out."""
    from pyiceberg.catalog.sql import IcebergTables
    from pyiceberg.serializers import FromInputFile
    from pyiceberg.table import Table
    from sqlalchemy import select
    from sqlalchemy.orm import Session

    with Session(cat.engine) as session:
        rows = session.execute(
            select(IcebergTables.table_namespace, IcebergTables.table_name,
                   IcebergTables.metadata_location)
            .where(IcebergTables.catalog_name == cat.name)).all()
    where = {f"{ns}.{t}": loc for ns, t, loc in rows}
    out = {}
    for n in names:
        loc = where.get(n)
        if loc is None:
            continue
        io = cat._load_file_io(location=loc)
        meta = FromInputFile.table_metadata(io.new_input(loc))
        out[n] = Table(identifier=table_ident(n), metadata=meta, metadata_location=loc, io=io,
                       catalog=cat)
    return out


def existing_tables(cat) -> list[str]:
    out = []
    for ns in NAMESPACES:
        out += [f"{ns}.{t[-1]}" for t in cat.list_tables(ns)]
    return sorted(out)
