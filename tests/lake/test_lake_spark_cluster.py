"""Every model on a standalone Spark cluster (a master and 2 workers on 127.0.0.1, started by
the fixture) equals the same model on DuckDB over the same lake."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark")
pytestmark = pytest.mark.slow  # a Spark session: minutes on a shared 2-core machine

from tests.lake.spark_equality import assert_spark_equals_duckdb  # noqa: E402


@pytest.fixture(scope="module")
def spark_on_cluster(spark_cluster):
    from warehouse.lake import spark

    sp = spark.get_session(spark_cluster)
    yield sp
    sp.stop()


def test_every_model_equal_on_a_standalone_cluster_and_duckdb(spark_on_cluster, spark_lake):
    sc = spark_on_cluster.sparkContext
    assert sc.master.startswith("spark://127.0.0.1:")
    assert_spark_equals_duckdb(spark_on_cluster, spark_lake)
    executors = sc._jsc.sc().getExecutorMemoryStatus().size()
    assert executors >= 3, "the driver and 2 workers' executors took part"
