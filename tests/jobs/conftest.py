from __future__ import annotations

import os

# Spark's driver binds to loopback only in tests (no port on the machine's other addresses).
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
