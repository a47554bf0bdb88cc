"""``pwh lake sync``: publish an existing DuckDB warehouse to the lake, incrementally.

* runs: every run of ``raw.files`` the lake's ledger does not hold, each as one exactly-once
  commit of all its raw rows (:func:`warehouse.lake.commit.commit_run`), so a sync racing an
  ingest of the same file, or an interrupted sync run again, never doubles a run; a rank file
  of a job is checked against the job's ranks in the lake (:mod:`warehouse.lake.ranks`): a
  duplicated or foreign rank (the lake got another file of that rank from ``pwh lake ingest``
  or another warehouse) is not synced, and reported (``refused``), never mixed in;
* ``checks.results``: replaced when it changed;
* models: an incremental model sends only its keys (runs, or series for ``-- incremental:
  series``) whose stamp in ``meta.model_runs`` changed since the last sync, plus removed keys;
  a model without incremental state is replaced when its content hash changed. The stamps the
  lake holds are kept in the catalog database (``pwh_lake_model_keys``) and recorded after
  the table's commit, so an interruption in between only re-sends those keys next time.

The DuckDB file is opened read-only for the duration (an ingest or build waits for it).
"""

from __future__ import annotations

from collections.abc import Callable

import duckdb

from warehouse.config import Settings
from warehouse.lake import commit, ledger, schemas
from warehouse.lake.catalog import LakeConfig, LakeError, open_catalog
from warehouse.modelling import models

WHOLE = "*"  # the key of a table synced whole


def _arrow(con, sql: str, params=None):
    return con.sql(sql, params=params).arrow().read_all()


def sync(settings: Settings, cfg: LakeConfig,
         progress: Callable[[str], None] | None = None) -> dict[str, int]:
    say = progress or (lambda _m: None)
    if not settings.warehouse.exists():
        raise LakeError(f"{settings.warehouse}: no DuckDB warehouse to sync")
    cat = open_catalog(cfg)
    from warehouse.lake.ingest import prepare

    prepare(cat)
    from warehouse import db

    con = duckdb.connect(str(settings.warehouse), read_only=True, config=dict(db.BASE_CONFIG))
    try:
        out = {"runs": 0, "refused": 0}
        _sync_runs(con, cat, say, out)
        out["checks"] = _sync_whole(con, cat, "checks.results", say)
        out["models"] = _sync_models(con, cat, say)
    finally:
        con.close()
    refused = f", {out['refused']} run(s) refused" if out["refused"] else ""
    say(f"synced {out['runs']} new run(s){refused}, {out['models']} model key(s) changed "
        f"[{cfg.shown}]")
    return out


def _sync_runs(con, cat, say, out: dict) -> None:
    from warehouse.errors import FormatError
    from warehouse.lake import ranks

    runs = [r[0] for r in con.execute(
        "SELECT sha256 FROM raw.files ORDER BY ingested_at, sha256").fetchall()]
    have = ledger.committed(cat.engine, cat.name, runs)
    raw = [n for n in schemas.raw_schemas() if n != "raw.files"]
    for sha in runs:
        if sha in have:
            continue
        tables = _run_tables(con, sha, raw)
        mine = ranks.claim_of(tables)  # a rank of a job: checked against the lake's ranks
        shown = tables["raw.files"].column("original_path")[0].as_py()
        fmt = tables["raw.files"].column("source_format")[0].as_py()
        try:
            done = commit.commit_run(cat, sha, fmt, tables,
                                     check=ranks.checker(cat, mine, shown),
                                     also=ranks.row(cat, mine))
        except FormatError as exc:
            out["refused"] += 1
            say(f"run {sha[:12]} not synced: {exc}")
            continue
        if done:
            out["runs"] += 1
            say(f"run {sha[:12]} ({fmt}) committed")


def _run_tables(con, sha: str, raw: list[str]) -> dict:
    """Run ``sha``'s rows of every raw table (``ns.table`` -> Arrow table)."""
    tables = {"raw.files": _arrow(con, "SELECT * FROM raw.files WHERE sha256 = ?", [sha])}
    for t in raw:
        if db_has(con, t):
            tables[t] = _arrow(con, f"SELECT * FROM {t} WHERE run_id = ?", [sha])  # noqa: S608
    return tables


def db_has(con, name: str) -> bool:
    schema, table = name.split(".")
    return bool(con.execute(
        "SELECT 1 FROM duckdb_tables() WHERE database_name = current_database() "
        "AND schema_name = ? AND table_name = ?", [schema, table]).fetchall())


def _stamps(cat, model: str) -> dict[str, str]:
    from sqlalchemy import select

    t = ledger.MODEL_KEYS
    with cat.engine.connect() as c:
        return dict(c.execute(select(t.c.key, t.c.stamp).where(
            t.c.catalog_name == cat.name, t.c.model == model)).all())


def _record(cat, model: str, stamps: dict[str, str], keys: set[str] | None) -> None:
    """Record the stamps of ``keys`` (all of the model's when ``None``)."""
    from sqlalchemy import delete, insert

    t = ledger.MODEL_KEYS
    with cat.engine.begin() as c:
        q = delete(t).where(t.c.catalog_name == cat.name, t.c.model == model)
        if keys is not None:
            q = q.where(t.c.key.in_(list(keys)))
        c.execute(q)
        rows = [{"catalog_name": cat.name, "model": model, "key": k, "stamp": s}
                for k, s in stamps.items() if keys is None or k in keys]
        if rows:
            c.execute(insert(t), rows)


def _sync_whole(con, cat, name: str, say) -> int:
    from warehouse.lake.tables import replace_table

    if not db_has(con, name):
        return 0
    stamp = con.execute(f"SELECT count(*)::VARCHAR || '|' || coalesce(md5(string_agg("  # noqa: S608
                        f"md5(t::VARCHAR), '' ORDER BY md5(t::VARCHAR))), '-') FROM {name} t"
                        ).fetchall()[0][0]
    if _stamps(cat, name).get(WHOLE) == stamp:
        return 0
    replace_table(cat, name, _arrow(con, f"SELECT * FROM {name}"))  # noqa: S608
    _record(cat, name, {WHOLE: stamp}, None)
    say(f"{name}: replaced")
    return 1


def _sync_models(con, cat, say) -> int:
    from warehouse.lake.tables import replace_keys

    project = models.load_project()
    has_state = db_has(con, "meta.model_runs")
    changed_total = 0
    for name in project.order:
        m = project.models[name]
        if not db_has(con, name):
            continue
        key = m.incremental
        if key is None or not has_state or not con.execute(
                "SELECT count(*) FROM meta.model_runs WHERE model = ?", [name]).fetchall()[0][0]:
            changed_total += _sync_whole(con, cat, name, say)
            continue
        if key == "run_id":
            now = dict(con.execute("SELECT run_id, stamp FROM meta.model_runs WHERE model = ?",
                                   [name]).fetchall())
        else:
            now = dict(con.execute(
                "SELECT series, md5(string_agg(stamp, '|' ORDER BY run_id)) FROM meta.model_runs "
                "WHERE model = ? AND series IS NOT NULL GROUP BY series", [name]).fetchall())
        before = _stamps(cat, name)
        if not cat.table_exists(tuple(name.split("."))):
            before = {}
        changed = {k for k, s in now.items() if before.get(k) != s} | (set(before) - set(now))
        if not changed:
            continue
        ks = sorted(changed)
        data = _arrow(con, f"SELECT * FROM {name} WHERE {key} IN "  # noqa: S608
                           "(SELECT unnest(?::VARCHAR[]))", [ks])
        if before:
            replace_keys(cat, name, key, ks, data, {"pwh.sync": "incremental"})
        else:
            from warehouse.lake.tables import replace_table

            replace_table(cat, name, data, {"pwh.sync": "full"})
        _record(cat, name, now, changed)
        changed_total += len(changed)
        say(f"{name}: {len(changed)} {key} key(s) sent")
    return changed_total
