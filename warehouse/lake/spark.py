"""The SQL models on Spark (``pwh lake build --engine spark``).

* Session: ``local[2]``, a standalone master (``spark://127.0.0.1:7077``) or Spark Connect
  (``sc://host:port``); ANSI mode off (DuckDB's lenient semantics: NULL for an index out of
  bounds or a division by zero), UTC, Parquet timestamps as microseconds.
* Sources: the lake's raw and checks tables as of one instant, read through pyiceberg's file
  plan (``plan_files`` -> ``spark.read.parquet``): the Iceberg Spark runtime is not needed,
  which holds for tables without delete files, as pyiceberg writes them.
* Models: :func:`warehouse.lake.dialect.spark_sql` (sqlglot + overrides) in dependency order;
  ``pwh_kernel_name``, ``pwh_kernel_family`` and ``pwh_judge_series`` are the same Python
  functions, as Spark UDFs (:func:`functions`; the lint refuses a model calling any other).
  Each result is cast to the column types the model has on DuckDB (found by running it on
  empty inputs), written as Parquet under the table's location and committed with
  ``add_files`` replacing the table's previous files in one commit.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

from warehouse.errors import ModelError
from warehouse.lake import dialect, schemas
from warehouse.lake.catalog import load_consistent, local_dir
from warehouse.modelling import models

DEFAULT_MASTER = "local[2]"

RUN_STATUS_SQL = """
with latest as (
    select run_id, max(validated_at) as validated_at from checks__results group by run_id
)
select
    r.run_id,
    case when bool_or(not r.success and r.critical) then 'failed' else 'passed' end as status,
    case when count(case when not r.success and r.critical then 1 end) = 0 then null
         else array_sort(collect_set(case when not r.success and r.critical
                                          then r.invariant_id end)) end as failed_invariants,
    max(r.validated_at) as validated_at
from checks__results r join latest l
    on l.run_id = r.run_id and l.validated_at = r.validated_at
group by r.run_id
"""


@contextlib.contextmanager
def session(master: str | None = None, *, app: str = "pwh-lake") -> Iterator[object]:
    """A Spark session for the models; stopped at the end (unless it was already running)."""
    sp = get_session(master, app=app)
    try:
        yield sp
    finally:
        if not os.environ.get("PWH_SPARK_KEEP"):
            sp.stop()


def get_session(master: str | None = None, *, app: str = "pwh-lake"):
    try:
        from pyspark.sql import SparkSession
    except ImportError as exc:
        raise ModelError(f"--engine spark needs the [lake] extra (pyspark): {exc}") from None
    master = master or os.environ.get("PWH_SPARK_MASTER") or DEFAULT_MASTER
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    conf = {
        "spark.sql.ansi.enabled": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
        "spark.sql.sources.partitionColumnTypeInference.enabled": "false",
        "spark.sql.shuffle.partitions": os.environ.get("PWH_SPARK_SHUFFLE_PARTITIONS", "2"),
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.legacy.timeParserPolicy": "CORRECTED",
    }
    if master.startswith("sc://"):
        b = SparkSession.builder.remote(master).appName(app)
        for k, v in conf.items():
            b = b.config(k, v)
        return b.getOrCreate()
    # A Spark Connect session earlier in this process (a test run, a notebook) leaves
    # SPARK_CONNECT_MODE_ENABLED set and spark.remote in the shared builder: a classic session
    # would then be refused with CONNECT_URL_NOT_SET.
    if "SPARK_REMOTE" not in os.environ:
        os.environ.pop("SPARK_CONNECT_MODE_ENABLED", None)
    SparkSession.builder._options.pop("spark.remote", None)
    b = SparkSession.builder.master(master).appName(app)
    conf.update({
        "spark.ui.enabled": "false",
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.driver.memory": os.environ.get("PWH_SPARK_DRIVER_MEMORY", "1g"),
        "spark.executor.memory": os.environ.get("PWH_SPARK_EXECUTOR_MEMORY", "1g"),
        "spark.executorEnv.PYTHONPATH": os.pathsep.join(sys.path),
        "spark.sql.warehouse.dir": os.environ.get("PWH_SPARK_WAREHOUSE_DIR",
                                                  "/tmp/pwh-spark-warehouse"),
    })
    for k, v in conf.items():
        b = b.config(k, v)
    sp = b.getOrCreate()
    sp.sparkContext.setLogLevel("ERROR")
    return sp


# ------------------------------------------------------------------ Python functions as UDFs


def spark_type(duck_type: str):
    """The Spark type of a DuckDB type string (the few the UDFs return)."""
    import sqlglot
    from pyspark.sql.types import _parse_datatype_string

    return _parse_datatype_string(sqlglot.transpile(f"CAST(NULL AS {duck_type})", read="duckdb",
                                                    write="spark")[0]
                                  .removeprefix("CAST(NULL AS ").removesuffix(")"))


def _kernel_name(name):
    from warehouse.modelling import kernel_names

    return None if name is None else kernel_names.parse(name).as_dict()


def _kernel_family(name):
    from warehouse.modelling import kernel_names

    return None if name is None else kernel_names.normalise(name)


def _judge_series(cells):
    from warehouse.modelling import stats, udfs, verdicts

    if cells is None:
        return None
    cfg = stats.VerdictConfig.from_env()
    rows = verdicts.judge_series([c.asDict() if hasattr(c, "asDict") else c for c in cells], cfg)
    return [{n: r[n] for n, _, _ in udfs.TREND_FIELDS} for r in rows]


def functions() -> dict[str, tuple[Callable, str]]:
    """Every Python function the models may call: name -> (Spark UDF, DuckDB return type).
    The same Python code as :mod:`warehouse.modelling.udfs` registers on DuckDB."""
    from warehouse.modelling import udfs

    return {
        "pwh_kernel_name": (_kernel_name, udfs.KERNEL_NAME_TYPE),
        "pwh_kernel_family": (_kernel_family, "VARCHAR"),
        "pwh_judge_series": (_judge_series, udfs.TREND_TYPE),
    }


def register_functions(sp) -> None:
    """Every function of :func:`functions` as a Spark UDF."""
    for name, (fn, duck_type) in functions().items():
        sp.udf.register(name, fn, spark_type(duck_type))


# ------------------------------------------------------------------ reading the lake


def _files(tbl) -> list[str]:
    return [t.file.file_path for t in tbl.scan().plan_files()]


def source_views(sp, cat) -> dict[str, int]:
    """Every raw/checks table as a temporary view ``schema__table`` (as of one instant)."""
    names = list(schemas.source_schemas())
    loaded = load_consistent(cat, names)
    out = {}
    for n in names:
        arrow_schema = schemas.source_schemas()[n]
        tbl = loaded.get(n)
        files = _files(tbl) if tbl is not None else []
        if files:
            df = sp.read.parquet(*files)
        else:
            df = sp.createDataFrame([], schema=_spark_schema(arrow_schema))
        df.createOrReplaceTempView(dialect.view_name(n))
        out[n] = len(files)
    sp.sql(RUN_STATUS_SQL).createOrReplaceTempView("checks__run_status")
    return out


def _spark_schema(arrow_schema):
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(arrow_schema)


# ------------------------------------------------------------------ the models


def expected_schemas(project) -> dict[str, object]:
    """Each model's Arrow schema on DuckDB (the models run on empty sources: cheap)."""
    from warehouse.lake import duck

    con = duck.connect()
    try:
        from warehouse import db

        db.ensure_schema(con)
        models.build(con, project, full_refresh=True)
        return {n: con.sql(f"SELECT * FROM {n} LIMIT 0").arrow().read_all().schema  # noqa: S608
                for n in project.order}
    finally:
        con.close()


def _cast_to(df, arrow_schema, name: str):
    """``df`` with the DuckDB model's column names, order and types."""
    from pyspark.sql import functions as F

    target = _spark_schema(schemas.iceberg_compatible(arrow_schema.empty_table(), name).schema)
    have = set(df.columns)
    missing = [f.name for f in target.fields if f.name not in have]
    if missing or len(df.columns) != len(target.fields):
        raise ModelError(f"{name}: on Spark the columns are {df.columns}, on DuckDB "
                         f"{[f.name for f in target.fields]}")
    return df.select([F.col(f"`{f.name}`").cast(f.dataType).alias(f.name)
                      for f in target.fields])


def build(sp, cat, select=None, progress: Callable | None = None, *,
          project=None) -> list[models.BuildResult]:
    """Build the models on Spark over the lake and replace their lake tables. A model that
    cannot run the same on Spark is refused before anything runs."""
    from warehouse.lake.tables import ensure_table

    project = project or models.load_project()
    names = project.order if select is None else project.upstream(select)
    sqls = {n: dialect.spark_sql(project.models[n])[0] for n in names}  # refuse before running
    for n in names:
        missing = dialect.python_functions(project.models[n]) - set(functions())
        if missing:
            raise ModelError(f"{project.models[n].path}: calls {', '.join(sorted(missing))}, "
                             "which warehouse/lake/spark.py does not register on Spark")
    expected = expected_schemas(project)
    register_functions(sp)
    source_views(sp, cat)
    results = []
    for n in names:
        t0 = time.perf_counter()
        df = _cast_to(sp.sql(sqls[n]), expected[n], n)
        arrow_schema = schemas.iceberg_compatible(expected[n].empty_table(), n).schema
        tbl = ensure_table(cat, n, arrow_schema)
        out = f"{tbl.location().rstrip('/')}/data/spark-{uuid.uuid4().hex}"
        df.write.mode("error").parquet(out)  # = errorifexists; Spark Connect knows "error" only
        files = _written(out)
        rows = _rows(files)
        _commit_files(tbl, files)
        view = sp.read.parquet(out) if files else sp.createDataFrame([], df.schema)
        view.createOrReplaceTempView(dialect.view_name(n))
        r = models.BuildResult(n, rows, time.perf_counter() - t0)
        results.append(r)
        if progress:
            progress(r)
    return results


def _written(out: str) -> list[str]:
    d = local_dir(out.removeprefix("file:"))
    if d is None:
        raise ModelError(f"{out}: listing Spark output on an object store needs the Iceberg "
                         "Spark runtime (see docs/scale-out.md)")
    return sorted(f"file://{p}" if out.startswith("file:") else str(p)
                  for p in Path(d).glob("*.parquet"))


def _rows(files: list[str]) -> int:
    import pyarrow.parquet as pq

    return sum(pq.ParquetFile(f.removeprefix("file://")).metadata.num_rows for f in files)


def _commit_files(tbl, files: list[str]) -> None:
    """Replace every data file of ``tbl`` with ``files``, in one commit."""
    import warnings

    from pyiceberg.expressions import AlwaysTrue

    with tbl.transaction() as txn, warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # an empty table: "did not match"
        txn.delete(AlwaysTrue())
        if files:
            txn.add_files(files, snapshot_properties={"pwh.engine": "spark"})
