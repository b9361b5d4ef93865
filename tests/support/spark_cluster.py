"""A Spark standalone cluster on loopback: a master and N workers as separate JVM processes,
started with the pyspark package's own launcher (`bin/spark-class`), nothing downloaded.

Every port is picked by the kernel (`--port 0 --webui-port 0`); the master's URL is read from
its log. SPARK_LOCAL_IP=127.0.0.1 keeps every JVM (and drivers started with `environment()`)
on loopback. `stop()` ends each process group with SIGTERM, then SIGKILL after a bounded wait.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pyspark

SPARK_HOME = Path(pyspark.__file__).resolve().parent
START_TIMEOUT_S = 180.0
STOP_TIMEOUT_S = 30.0
_MASTER_URL = re.compile(r"Starting Spark master at (spark://127\.0\.0\.1:\d+)")
_WORKER_REGISTERED = re.compile(r"Registering worker 127\.0\.0\.1:\d+")


def environment() -> dict[str, str]:
    """The environment for the cluster's JVMs and for a driver that joins them."""
    return {**{k: v for k, v in os.environ.items() if not k.startswith("SPARK_")},
            "SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_NO_DAEMONIZE": "1"}


@dataclass
class SparkCluster:
    work_dir: Path
    worker_count: int = 2
    worker_memory: str = "1g"
    master_url: str = ""
    _processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def start(self) -> SparkCluster:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        master_log = self.work_dir / "master.log"
        self._spawn(["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                     "--port", "0", "--webui-port", "0"], master_log)
        found = self._wait_log(master_log, _MASTER_URL, 1, "the master's URL")
        self.master_url = found[0]
        for index in range(self.worker_count):
            self._spawn(["org.apache.spark.deploy.worker.Worker", self.master_url,
                         "--host", "127.0.0.1", "--port", "0", "--webui-port", "0",
                         "--cores", "1", "--memory", self.worker_memory,
                         "--work-dir", str(self.work_dir / f"worker-{index}")],
                        self.work_dir / f"worker-{index}.log")
        self._wait_log(master_log, _WORKER_REGISTERED, self.worker_count,
                       f"{self.worker_count} workers registered")
        return self

    def _spawn(self, arguments: list[str], log_path: Path) -> None:
        with log_path.open("wb") as log:
            self._processes.append(subprocess.Popen(
                [str(SPARK_HOME / "bin" / "spark-class"), *arguments], env=environment(),
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True))

    def _wait_log(self, log_path: Path, pattern: re.Pattern[str], count: int,
                  what: str) -> list[str]:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            for process in self._processes:
                if process.poll() is not None:
                    raise AssertionError(f"a cluster JVM exited with {process.returncode} "
                                         f"before {what}:\n{self.logs()}")
            found = pattern.findall(log_path.read_text(errors="replace"))
            if len(found) >= count:
                return found
            time.sleep(0.2)
        raise AssertionError(f"no {what} within {START_TIMEOUT_S} s:\n{self.logs()}")

    def logs(self) -> str:
        return "\n".join(f"--- {path.name}\n{path.read_text(errors='replace')[-3000:]}"
                         for path in sorted(self.work_dir.glob("*.log")))

    def stop(self) -> None:
        for process in reversed(self._processes):
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in reversed(self._processes):
            try:
                process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
