"""Every model through a Spark Connect session (a server started by the fixture on 127.0.0.1,
``local[2]`` behind it) equals the same model on DuckDB over the same lake."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark")
# the Spark Connect client's own requirement, in the [lake] extra (a venv made before it was
# added: pip install -e '.[all,dev]' again)
pytest.importorskip("grpc_status", reason="grpcio-status (the [lake] extra) is not installed")
pytestmark = pytest.mark.slow  # a Spark server: minutes on a shared 2-core machine

from tests.lake.spark_equality import assert_spark_equals_duckdb  # noqa: E402


@pytest.fixture(scope="module")
def spark_over_connect(spark_connect):
    from warehouse.lake import spark

    sp = spark.get_session(spark_connect)
    yield sp
    sp.stop()


def test_every_model_equal_over_spark_connect_and_duckdb(spark_over_connect, spark_lake):
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    assert isinstance(spark_over_connect, ConnectSession), "not a Spark Connect session"
    assert_spark_equals_duckdb(spark_over_connect, spark_lake)
