"""Staging and mart assets, one per SQL model, generated from the model runner.

Nothing here is listed by hand: the models, their dependencies (parsed by sqlglot in
``warehouse.modelling.models``), their descriptions (the model header), their column schemas and their
column lineage all come from ``sql/``. Adding a ``.sql`` file adds an asset.

Models are unpartitioned: each build recomputes the whole table from every raw partition (one
transaction, readers see the old table or the new one). Every model asset takes the
``duckdb_writer`` pool and opens the warehouse only inside its op.
"""

import hashlib
from pathlib import Path

import dagster as dg

from pipelines import lineage
from pipelines.raw import RAW_TABLES, WRITER_POOL, raw_key, table_schema
from pipelines.resources import WarehouseResource
from warehouse import db
from warehouse.modelling import models

KINDS_MODEL = {"duckdb", "sql"}
# (Dagster run id, model) -> the runs whose rows this run's build of the model changed (None:
# all of them, a full build). The model's checks, later in the same run and process, validate
# those runs only; a check run without its model (a launch from the UI) validates every run.
REBUILT: dict[tuple[str, str], list[str] | None] = {}
# Columns whose values are counted into plotted metadata, when a model has them.
VERDICTS = ("regressed", "improved", "unchanged", "inconclusive")


def table_key(name: str) -> dg.AssetKey:
    """The asset key of a warehouse table ``schema.table`` (raw tables: the raw layer's keys)."""
    schema, table = name.split(".", 1)
    if schema == "raw" and table in RAW_TABLES:
        return raw_key(table)
    return dg.AssetKey([schema, table])


def description(m: models.Model) -> str:
    rel = f"sql/{m.schema}/{m.path.name}"
    return (f"{m.purpose[0].upper() + m.purpose[1:]}.\n\n"
            f"**Grain:** {m.grain}.\n\n"
            f"**Table:** `{m.name}`, built from `{rel}`; reads {', '.join(f'`{d}`' for d in m.deps)}.")


def _column_lineage(m: models.Model, schemas) -> dg.TableColumnLineage:
    deps = lineage.column_lineage(m, schemas)  # recomputed: cheap, keeps the two independent
    return dg.TableColumnLineage(deps_by_column={
        col: [dg.TableColumnDep(asset_key=table_key(t), column_name=c) for t, c in srcs]
        for col, srcs in deps.items() if srcs})


def _sources_text(srcs: list[tuple[str, str]]) -> str:
    return ", ".join(f"`{t}.{c}`" for t, c in srcs) if srcs else "no column (a count or constant)"


def _definition_metadata(m: models.Model, schemas, docs: dict[str, str]) -> dict:
    deps = lineage.column_lineage(m, schemas)
    # the open-source UI does not draw dagster/column_lineage: say it in words as well, in each
    # column's description (Columns table) and as a table on the asset page
    columns = [(c.name, c.type, " ".join(x for x in (
        docs.get(c.name, "").rstrip(".") + ("." if docs.get(c.name) else ""),
        f"**From** {_sources_text(deps.get(c.name, []))}.") if x))
        for c in schemas[m.name]]
    table_md = "| column | computed from |\n|---|---|\n" + "\n".join(
        f"| `{c.name}` | {_sources_text(deps.get(c.name, []))} |" for c in schemas[m.name])
    return {
        "dagster/column_schema": table_schema(columns),
        "dagster/column_lineage": _column_lineage(m, schemas),
        "column_lineage": dg.MetadataValue.md(table_md),
        "dagster/table_name": m.name,
        "grain": m.grain,
        "sql": dg.MetadataValue.path(f"sql/{m.schema}/{m.path.name}"),
        "materialized": m.header.get("materialized", "table"),
    }


def _model_runs(con, m: models.Model) -> dict[str, tuple]:
    """run_id -> (series, stamp) of an incremental model's last build (empty before one)."""
    if not m.incremental or not db.has_table(con, "meta", "model_runs"):
        return {}
    return {r[0]: (r[1], r[2]) for r in con.execute(
        "SELECT run_id, series, stamp FROM meta.model_runs WHERE model = ?", [m.name]).fetchall()}


def rebuilt_runs(m: models.Model, mode: str, before: dict[str, tuple], after: dict[str, tuple]
                 ) -> list[str] | None:
    """The runs whose rows a build changed: none when unchanged, those whose stamp changed
    (incremental by run), every run of a changed series (by series), ``None`` (all) after a
    full build."""
    if mode == "unchanged":
        return []
    if mode != "incremental":
        return None
    changed = {r for r in before.keys() | after.keys() if before.get(r) != after.get(r)}
    if m.incremental == "series":
        series = {x[r][0] for r in changed for x in (before, after) if r in x}
        return sorted(r for r, (s, _) in after.items() if s in series)
    return sorted(r for r in changed if r in after)


def numbers_metadata(numbers: dict[str, int]) -> dict:
    """``activity.model_numbers`` as the metadata Dagster plots across materialisations: the
    same keys whichever path built the model (this op, or ``pwh build`` reported by the
    warehouse sensor)."""
    return {("dagster/row_count" if k == "row_count" else k): dg.MetadataValue.int(v)
            for k, v in numbers.items()}


def _runtime_metadata(con, m: models.Model) -> dict:
    """Numbers Dagster plots across materialisations."""
    from warehouse.serving.activity import model_numbers

    return numbers_metadata(model_numbers(con, m.name))


def code_version(m: models.Model) -> str:
    """The asset's code version: its SQL's hash (a reported build carries the same)."""
    return hashlib.sha256(m.sql.encode()).hexdigest()[:12]


def model_asset(m: models.Model, schemas, docs: dict[str, str] | None = None
                ) -> dg.AssetsDefinition:
    definition_md = _definition_metadata(m, schemas, docs or {})

    @dg.asset(
        key=table_key(m.name),
        deps=[table_key(d) for d in m.deps],
        group_name=m.schema,
        kinds=KINDS_MODEL,
        pool=WRITER_POOL,
        description=description(m),
        metadata=definition_md,
        code_version=code_version(m),
    )
    def _model(context: dg.AssetExecutionContext, warehouse: WarehouseResource
               ) -> dg.MaterializeResult:
        with warehouse.exclusive(context.log), db.writer(warehouse.settings.warehouse) as con:
            before = _model_runs(con, m)
            (res,) = models.build(con, models.Project({m.name: m}, [m.name]))
            rebuilt = rebuilt_runs(m, res.mode, before, _model_runs(con, m))
            REBUILT[(context.run_id, m.name)] = rebuilt
            md = _runtime_metadata(con, m)
            con.execute("CHECKPOINT")
        context.log.info(f"built {m.name}: {res.rows} rows in {res.seconds:.2f} s ({res.mode}"
                         + (f", {res.keys} run(s)/series rebuilt)" if res.mode == "incremental"
                            else ")"))
        md["seconds"] = dg.MetadataValue.float(round(res.seconds, 3))
        md["build_mode"] = dg.MetadataValue.text(res.mode)
        md["keys_rebuilt"] = dg.MetadataValue.int(res.keys)
        if rebuilt is not None:
            md["runs_rebuilt"] = dg.MetadataValue.int(len(rebuilt))
        # lineage and schema again on the materialisation: the UI reads them from the latest one
        md["dagster/column_lineage"] = definition_md["dagster/column_lineage"]
        md["dagster/column_schema"] = definition_md["dagster/column_schema"]
        return dg.MaterializeResult(metadata=md)

    return _model


def external_specs(project: models.Project) -> list[dg.AssetSpec]:
    """Source tables models read that no asset materialises (e.g. ``checks.run_status``)."""
    raw_keys = {raw_key(t) for t in RAW_TABLES}
    names = sorted({d for m in project.models.values() for d in m.deps
                    if d not in project.models and table_key(d) not in raw_keys})
    return [dg.AssetSpec(
        key=table_key(n), group_name=n.split(".")[0], kinds={"duckdb"},
        description=f"`{n}`: written by the warehouse itself (check results, ingestion errors), "
        "not by an asset; models read it.",
        metadata={"dagster/table_name": n}) for n in names]


def build_model_assets(root: Path = models.SQL_DIR
                       ) -> tuple[list[dg.AssetsDefinition], list[dg.AssetSpec]]:
    project = models.load_project(root)
    schemas = lineage.model_schemas(project)
    docs = lineage.column_docs()
    return [model_asset(project.models[n], schemas, docs.get(n, {})) for n in project.order], \
        external_specs(project)
