"""The Spark tests' session, and the JVMs' options.

Every test here runs in one xdist worker (tests/conftest.py makes tests/jobs/ one unit of
work), so the session-scoped `spark` below is started once per run: one JVM, about 5 s idle
and 15 s on a loaded machine. The tests that need a JVM of their own (the job file run with
Python, a standalone cluster, spark-submit) start it as a child.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

# Spark's driver binds to loopback only in tests (no port on the machine's other addresses).
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
# Every JVM the tests start (this session's, the job file's driver, a cluster's master, workers,
# drivers and executors: the `java` launcher reads JDK_JAVA_OPTIONS, and children inherit it)
# compiles with C1 alone and collects with the serial collector: these JVMs live seconds to a
# minute on small data, where C2's compiler threads and G1's cost more than they win. Measured
# on 2 loaded cores: the job file run with Python 35-38 s without, 21-22 s with. Results are
# the same; only how the JVM compiles and collects changes.
os.environ.setdefault("JDK_JAVA_OPTIONS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")


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
