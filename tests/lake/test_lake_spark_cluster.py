"""On a standalone Spark cluster (a master and 2 workers on 127.0.0.1, started by the fixture)
the models of :func:`tests.lake.spark_equality.deployment_models` equal the same models on DuckDB
over the same lake, and the workers' executors took part.

The reduced set (the upstream of marts.kernel_trends: 8 models, every Python UDF) goes through
everything that differs on a cluster: the sources read and each result written as Parquet by
executors in the workers' JVMs, shuffles between two executors, the UDFs in the workers' own
Python processes (which import ``warehouse`` through ``spark.executorEnv.PYTHONPATH``), models
reading models built before them. The SQL is the same text local[2] runs for every model in
test_lake_spark_local (details: the spark_equality module's docstring)."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark")
pytestmark = pytest.mark.slow  # a Spark session: minutes on a shared 2-core machine

from tests.lake.spark_equality import (  # noqa: E402
    assert_spark_equals_duckdb,
    deployment_models,
)


@pytest.fixture(scope="module")
def spark_on_cluster(spark_cluster):
    from warehouse.lake import spark

    sp = spark.get_session(spark_cluster)
    yield sp
    sp.stop()


def test_models_equal_on_a_standalone_cluster_and_duckdb(spark_on_cluster, spark_lake,
                                                         spark_lake_on_duckdb):
    sc = spark_on_cluster.sparkContext
    assert sc.master.startswith("spark://127.0.0.1:")
    assert_spark_equals_duckdb(spark_on_cluster, spark_lake, spark_lake_on_duckdb,
                               deployment_models())
    executors = sc._jsc.sc().getExecutorMemoryStatus().size()
    assert executors >= 3, "the driver and 2 workers' executors took part"
