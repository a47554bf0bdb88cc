"""Through a Spark Connect session (a server started by the fixture on 127.0.0.1, ``local[2]``
behind it) the models of :func:`tests.lake.spark_equality.deployment_models` equal the same
models on DuckDB over the same lake.

The reduced set (the upstream of marts.kernel_trends: 8 models, every Python UDF) goes through
everything that differs over Connect: the ``sc://`` session, the source views and the empty
``checks.results`` (``createDataFrame``) sent to the server, the UDFs pickled by the client and
run by the server's Python workers, each result written by the server (``mode("error")``, all
Connect knows) and models reading models built before them. The SQL is the same text local[2]
runs for every model in test_lake_spark_local (details: the spark_equality module's
docstring)."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark")
# the Spark Connect client's own requirement, in the [lake] extra (a venv made before it was
# added: pip install -e '.[all,dev]' again)
pytest.importorskip("grpc_status", reason="grpcio-status (the [lake] extra) is not installed")
pytestmark = pytest.mark.slow  # a Spark server: minutes on a shared 2-core machine

from tests.lake.spark_equality import (  # noqa: E402
    assert_spark_equals_duckdb,
    deployment_models,
)


@pytest.fixture(scope="module")
def spark_over_connect(spark_connect):
    from warehouse.lake import spark

    sp = spark.get_session(spark_connect)
    yield sp
    sp.stop()


def test_models_equal_over_spark_connect_and_duckdb(spark_over_connect, spark_lake,
                                                    spark_lake_on_duckdb):
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    assert isinstance(spark_over_connect, ConnectSession), "not a Spark Connect session"
    assert_spark_equals_duckdb(spark_over_connect, spark_lake, spark_lake_on_duckdb,
                               deployment_models())
