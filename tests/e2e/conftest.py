"""Real `twinlog serve` processes on free loopback ports, always stopped at the end."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 20.0

# Fast heartbeats and reconnects, small files, a short slave timeout and sync interval.
FAST_SETTINGS: dict[str, Any] = {
    "ha_send_heartbeat_interval_ms": 200,
    "ha_housekeeping_interval_ms": 2000,
    "ha_reconnect_interval_ms": 200,
    "ha_connect_timeout_ms": 1000,
    "slave_timeout_ms": 1500,
    "slave_sync_interval_s": 1,
    "mapped_file_size_bytes": 1 << 20,
    "message_size_max_bytes": 64 * 1024,
    "max_body_size_bytes": 256 * 1024,
    "log_level": "warning",
    "ha_secret": "test-ha-secret",
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(condition: Callable[[], bool], timeout_s: float = 15.0,
             what: str = "condition") -> None:
    """Poll `condition` until it holds; fail at the deadline."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not met within {timeout_s} s")
        time.sleep(0.02)


@dataclass
class BrokerProcess:
    name: str
    role: str
    http_port: int
    ha_port: int
    data_dir: Path
    arguments: list[str]
    environment: dict[str, str]
    log_path: Path
    process: subprocess.Popen[bytes] | None = None
    client: httpx.Client = field(init=False)

    def __post_init__(self) -> None:
        self.client = httpx.Client(base_url=self.url, timeout=10.0)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def ha_address(self) -> str:
        return f"127.0.0.1:{self.ha_port}"

    def start(self) -> BrokerProcess:
        assert self.process is None or self.process.poll() is not None
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "app.cli", "serve", *self.arguments], cwd=ROOT,
                env=self.environment, stdout=log, stderr=subprocess.STDOUT)
        self.wait_ready()
        return self

    def wait_ready(self) -> None:
        def ready() -> bool:
            assert self.process is not None
            if self.process.poll() is not None:
                raise AssertionError(f"{self.name} exited with {self.process.returncode}:\n"
                                     f"{self.log()}")
            try:
                return self.client.get("/readyz").status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(ready, READY_TIMEOUT_S, f"{self.name} ready")

    def stop(self) -> int:
        """SIGTERM, then SIGKILL after a bounded wait; returns the exit code."""
        process = self.process
        if process is None:
            return 0
        if process.poll() is None:
            process.send_signal(signal.SIGCONT)  # in case a test paused it
            process.terminate()
        try:
            return process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise AssertionError(
                f"{self.name} did not stop on SIGTERM:\n{self.log()}") from None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def get_json(self, path: str, **params: Any) -> Any:
        response = self.client.get(path, params=params)
        assert response.status_code == 200, response.text
        return response.json()


Launcher = Callable[..., BrokerProcess]


@pytest.fixture(scope="module")
def launch(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Launcher]:
    """Start brokers for a module; every one still running is stopped at the end."""
    started: list[BrokerProcess] = []
    root = tmp_path_factory.mktemp("e2e")

    def start(name: str, role: str, *, master: BrokerProcess | None = None,
              environment: dict[str, str] | None = None, **settings: Any) -> BrokerProcess:
        http_port, ha_port = free_port(), free_port()
        data_dir = root / name
        arguments = ["--role", role, "--http-port", str(http_port), "--ha-port", str(ha_port),
                     "--data-dir", str(data_dir)]
        if master is not None:
            arguments += ["--ha-master-address", master.ha_address,
                          "--master-http-address", master.url]
        for key, value in {**FAST_SETTINGS, **settings}.items():
            arguments += ["--set", f"{key}={value}"]
        env = {key: value for key, value in os.environ.items()
               if not key.startswith("TWINLOG_")}
        env.update(environment or {})
        broker = BrokerProcess(name, role, http_port, ha_port, data_dir, arguments, env,
                               root / f"{name}.log")
        started.append(broker)
        return broker.start()

    yield start
    for broker in reversed(started):
        broker.stop()
        broker.client.close()


def master_diff(master: BrokerProcess) -> dict[str, Any]:
    diff: dict[str, Any] = master.get_json("/admin/diff")["master"]
    return diff


def caught_up(master: BrokerProcess, slaves: int = 1) -> bool:
    """Every slave connected and acknowledged the master's max offset (diff 0)."""
    diff = master_diff(master)
    return (len(diff["slaves"]) == slaves and diff["max_diff_bytes"] == 0
            and all(s["ack_offset"] == diff["master_max_offset"] for s in diff["slaves"]))
