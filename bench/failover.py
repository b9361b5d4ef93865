"""Failover by hand with real `twinlog serve` processes on loopback: how long from the
promote request to the first PUT_OK on the new master, and to the first consume that sees
the consumer group's committed offset (it travels in the log: nothing to wait for).

    python bench/failover.py [--rounds N]

Each round starts a SYNC_MASTER and its slave, produces, kills the master with SIGKILL,
then times:
  (baseline) a broker process from exec to ready on the same machine;
  promote -> first PUT_OK, promoted as ASYNC_MASTER (no slave needed for PUT_OK);
  promote -> first PUT_OK, promoted as SYNC_MASTER with the old master restarted as its slave
  (so it includes that process's start and its epoch check).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.server.port_file import read_port_file  # noqa: E402
from bench.common import header, row  # noqa: E402

SETTINGS = ["--set", "log_level=warning", "--set", "mapped_file_size_bytes=67108864",
            "--set", "ha_secret=bench-ha-secret", "--set", "ha_reconnect_interval_ms=200",
            "--set", "ha_send_heartbeat_interval_ms=200",
            "--set", "ha_housekeeping_interval_ms=2000"]
DEADLINE_S = 60.0
GROUP = "bench"
COMMITTED_OFFSET = 150
T = TypeVar("T")


class Broker:
    def __init__(self, root: Path, name: str, arguments: list[str]) -> None:
        self.port_file = root / f"{name}.ports"
        self.port_file.unlink(missing_ok=True)
        environment = {k: v for k, v in os.environ.items() if not k.startswith("TWINLOG_")}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "app.cli.main", "serve", *arguments, "--data-dir",
             str(root / name), "--http-port", "0", "--ha-port", "0", "--port-file",
             str(self.port_file), *SETTINGS],
            cwd=ROOT, env=environment, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        ports = _until(lambda: read_port_file(self.port_file), "ports")
        assert ports[1] is not None or "SLAVE" in arguments
        self.url = f"http://127.0.0.1:{ports[0]}"
        self.ha_port = ports[1]
        self.client = httpx.Client(base_url=self.url, timeout=10.0)
        _until(lambda: self._ready() or None, "ready")

    def _ready(self) -> bool:
        try:
            return self.client.get("/readyz").status_code == 200
        except httpx.HTTPError:
            return False

    def put(self) -> int:
        return self.client.post("/v1/topics/Bench/messages",
                                json={"body": "x", "queue_id": 0}).status_code

    def consume_at_committed(self) -> bool | None:
        """The group's committed offset of queue 0 read back, and a consume from there that
        finds messages (None until both are true)."""
        offsets = self.client.get(f"/v1/groups/{GROUP}/offsets", params={"topic": "Bench"})
        if offsets.status_code != 200:
            return None
        committed = [entry["offset"] for entry in offsets.json()["offsets"]
                     if entry["queue_id"] == 0]
        if committed != [COMMITTED_OFFSET]:
            return None
        page = self.client.get("/v1/topics/Bench/queues/0/messages",
                               params={"offset": COMMITTED_OFFSET, "max_messages": 1})
        return True if page.status_code == 200 and page.json()["messages"] else None

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(30)
        self.client.close()


def _until(probe: Callable[[], T | None], what: str) -> T:
    deadline = time.monotonic() + DEADLINE_S
    while (value := probe()) is None:
        if time.monotonic() > deadline:
            raise SystemExit(f"bench: {what} not reached in {DEADLINE_S} s")
        time.sleep(0.01)
    return value


def _promote(slave: Broker, role: str) -> None:
    def promoted() -> bool | None:
        answer = slave.client.post("/admin/ha/promote", json={"role": role})
        return True if answer.status_code == 200 else None

    _until(promoted, "promotion")


def one_round(root: Path, role: str) -> tuple[float, float, float]:
    """(process start to ready s, promote to first PUT_OK s, promote to the first consume
    at the group's committed offset s) for one failover."""
    started = time.perf_counter()
    master = Broker(root, "master", ["--role", "SYNC_MASTER"])
    start_s = time.perf_counter() - started
    slave = Broker(root, "slave", ["--role", "SLAVE", "--ha-master-address",
                                   f"127.0.0.1:{master.ha_port}", "--master-http-address",
                                   master.url])
    rejoined = None
    try:
        _until(lambda: master.put() == 201 or None, "a first PUT_OK")
        for _ in range(200):
            master.put()
        committed = master.client.put(f"/v1/groups/{GROUP}/offsets/Bench/queues/0",
                                      json={"offset": COMMITTED_OFFSET})
        assert committed.status_code == 200, committed.text
        master.kill()
        # The slave notices the dead link first (a connection reset arrives at once).
        _until(lambda: (not slave.client.get("/admin/diff").json()["slave"]["connected"])
               or None, "link down")
        started = time.perf_counter()
        _promote(slave, role)
        if role == "SYNC_MASTER":
            ha_port = slave.client.get("/admin/ha").json()["master"]["listen_address"]
            rejoined = Broker(root, "master", ["--role", "SLAVE", "--ha-master-address",
                                               ha_port, "--master-http-address", slave.url])
        _until(lambda: slave.put() == 201 or None, "a PUT_OK on the new master")
        put_s = time.perf_counter() - started
        _until(slave.consume_at_committed, "a consume at the committed offset")
        return start_s, put_s, time.perf_counter() - started
    finally:
        for broker in (rejoined, slave, master):
            if broker is not None:
                broker.stop()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    arguments = parser.parse_args()
    header(f"failover by hand, {arguments.rounds} rounds each, medians")
    starts: list[float] = []
    results: dict[str, list[float]] = {"ASYNC_MASTER": [], "SYNC_MASTER": []}
    offsets_seen: list[float] = []
    for role, times in results.items():
        for _ in range(arguments.rounds):
            root = Path(tempfile.mkdtemp(prefix="twinlog-bench-failover-"))
            try:
                start_s, promote_s, offset_s = one_round(root, role)
            finally:
                shutil.rmtree(root, ignore_errors=True)
            starts.append(start_s)
            times.append(promote_s)
            if role == "ASYNC_MASTER":
                offsets_seen.append(offset_s)
    baseline_ms = statistics.median(starts) * 1000
    row("broker process exec to ready (baseline)", baseline_ms, "ms")
    row("promote -> first PUT_OK, as ASYNC_MASTER",
        statistics.median(results["ASYNC_MASTER"]) * 1000, "ms", baseline_ms)
    row("promote -> first consume at the committed offset, as ASYNC_MASTER",
        statistics.median(offsets_seen) * 1000, "ms", baseline_ms)
    row("promote -> first PUT_OK, as SYNC_MASTER", statistics.median(results["SYNC_MASTER"])
        * 1000, "ms", baseline_ms)
    print("    (SYNC: includes restarting the old master as the new master's slave)")


if __name__ == "__main__":
    main()
