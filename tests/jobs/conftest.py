from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

# Spark's driver binds to loopback only in tests (no port on the machine's other addresses).
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One local[1] Spark for every report test (a JVM per module would cost seconds each)."""
    pyspark_sql = pytest.importorskip("pyspark.sql")
    session = (pyspark_sql.SparkSession.builder.master("local[1]").appName("twinlog-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.driver.host", "127.0.0.1")
               .config("spark.sql.shuffle.partitions", "1")
               .getOrCreate())
    yield session
    session.stop()
