"""Real `twinlog serve` processes for end-to-end tests: launched, awaited, read and stopped."""

from __future__ import annotations

import os
import ssl
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from app.server.port_file import read_port_file
from tests.support.metadata_template import seed_metadata
from tests.support.processes import terminate, terminate_all, wait_for

ROOT = Path(__file__).resolve().parents[2]
READY_TIMEOUT_S = 30.0


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
    "disk_max_used_ratio": 0.95,  # retention must not follow the host's disk use
    "ha_secret": "test-ha-secret",
}


@dataclass
class BrokerProcess:
    name: str
    role: str
    data_dir: Path
    arguments: list[str]
    environment: dict[str, str]
    log_path: Path
    process: subprocess.Popen[bytes] | None = None
    http_port: int = 0  # known once started (from the port file)
    ha_port: int | None = None
    # What runs `serve`: the CLI itself, or a wrapper around it (tests/support/power_broker.py),
    # or an installed `twinlog` script (tests/e2e/test_wheel.py), from `cwd`.
    entry_point: list[str] = field(default_factory=lambda: ["-m", "app.cli.main"])
    executable: str = sys.executable
    cwd: Path = ROOT
    # Set when it serves HTTPS: the CA its certificate is verified against.
    tls_ca: Path | None = None
    client: httpx.Client = field(init=False)

    def __post_init__(self) -> None:
        self.client = httpx.Client(timeout=10.0, verify=self.verify)

    @property
    def verify(self) -> ssl.SSLContext | bool:
        return ssl.create_default_context(cafile=str(self.tls_ca)) if self.tls_ca else True

    @property
    def port_file(self) -> Path:
        return self.log_path.with_suffix(".ports")

    @property
    def url(self) -> str:
        assert self.http_port, f"{self.name} is not started"
        scheme = "https" if self.tls_ca else "http"
        return f"{scheme}://127.0.0.1:{self.http_port}"

    @property
    def ha_address(self) -> str:
        assert self.ha_port is not None, f"{self.name} has no HA listener"
        return f"127.0.0.1:{self.ha_port}"

    def start(self) -> BrokerProcess:
        """Start on fresh ports (a restart may get other ports than the last run)."""
        assert self.process is None or self.process.poll() is not None
        self.port_file.unlink(missing_ok=True)
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [self.executable, *self.entry_point, "serve", *self.arguments, "--http-port", "0",
                 "--ha-port", "0", "--port-file", str(self.port_file)], cwd=self.cwd,
                env=self.environment, stdout=log, stderr=subprocess.STDOUT)
        self._wait_ports()
        self.client.close()
        self.client = httpx.Client(base_url=self.url, timeout=10.0, verify=self.verify)
        self.wait_ready()
        return self

    def _wait_ports(self) -> None:
        ports: tuple[int, int | None] | None = None

        def reported() -> bool:
            nonlocal ports
            self._check_alive()
            ports = read_port_file(self.port_file)
            return ports is not None

        wait_for(reported, READY_TIMEOUT_S, f"{self.name} ports")
        assert ports is not None
        self.http_port, self.ha_port = ports

    def _check_alive(self) -> None:
        assert self.process is not None
        if self.process.poll() is not None:
            raise AssertionError(f"{self.name} exited with {self.process.returncode}:\n"
                                 f"{self.log()}")

    def wait_ready(self) -> None:
        def ready() -> bool:
            self._check_alive()
            try:
                return self.client.get("/readyz").status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(ready, READY_TIMEOUT_S, f"{self.name} ready")

    def stop(self) -> int:
        """SIGTERM, then SIGKILL after a bounded wait; returns the exit code."""
        return terminate(self.process, self.name, self.log)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def get_json(self, path: str, **params: Any) -> Any:
        response = self.client.get(path, params=params)
        assert response.status_code == 200, response.text
        return response.json()


Launcher = Callable[..., BrokerProcess]


def _launching(root: Path) -> Iterator[Launcher]:
    started: list[BrokerProcess] = []

    def start(name: str, role: str, *, master: BrokerProcess | None = None,
              environment: dict[str, str] | None = None, tls_ca: Path | None = None,
              **settings: Any) -> BrokerProcess:
        data_dir = root / name
        if "database_url" not in settings:
            seed_metadata(data_dir)  # migrated once per process, not by each broker
        arguments = ["--role", role, "--data-dir", str(data_dir)]
        if master is not None:
            arguments += ["--ha-master-address", master.ha_address,
                          "--master-http-address", master.url]
        for key, value in {**FAST_SETTINGS, **settings}.items():
            arguments += ["--set", f"{key}={value}"]
        env = {key: value for key, value in os.environ.items()
               if not key.startswith("TWINLOG_")}
        env.update(environment or {})
        broker = BrokerProcess(name, role, data_dir, arguments, env, root / f"{name}.log",
                               tls_ca=tls_ca)
        started.append(broker)
        return broker.start()

    try:
        yield start
    finally:
        # The test's clients first: an HTTPS broker's graceful shutdown waits for each open
        # connection's TLS close, and an idle client left open never sends it (10 s, the
        # whole `timeout_graceful_shutdown_s`, at the end of tests/e2e/test_tls.py).
        for broker in started:
            broker.client.close()
        terminate_all([(broker.process, broker.name, broker.log)
                       for broker in reversed(started)])


def master_diff(master: BrokerProcess) -> dict[str, Any]:
    diff: dict[str, Any] = master.get_json("/admin/diff")["master"]
    return diff


def caught_up(master: BrokerProcess, slaves: int = 1) -> bool:
    """Every slave connected and acknowledged the master's max offset (diff 0)."""
    diff = master_diff(master)
    return (len(diff["slaves"]) == slaves and diff["max_diff_bytes"] == 0
            and all(s["ack_offset"] == diff["master_max_offset"] for s in diff["slaves"]))


def read_queues(broker: BrokerProcess, topic: str, queue_count: int = 4) -> list[list[Any]]:
    """Every message of each of the topic's queues, in queue order (UTF-8 bodies)."""
    queues = queues_when_current(broker, topic, queue_count)
    assert queues is not None, f"{broker.name}: its tables trail its log"
    return queues


def queues_when_current(broker: BrokerProcess, topic: str,
                        queue_count: int = 4) -> list[list[Any]] | None:
    """`read_queues`, or None while the broker answers 503 METADATA_CATCHING_UP (its tables
    have not applied its whole log yet: retry); any other refusal fails, a 404 included
    (the tables hold the whole log and lack the topic)."""
    queues = []
    for queue_id in range(queue_count):
        messages: list[Any] = []
        offset = 0
        while True:
            response = broker.client.get(
                f"/v1/topics/{topic}/queues/{queue_id}/messages",
                params={"offset": offset, "max_messages": 500, "body_encoding": "utf8"})
            if response.status_code == 503 and \
                    response.json().get("error_code") == "METADATA_CATCHING_UP":
                return None
            assert response.status_code == 200, response.text
            page = response.json()
            messages += page["messages"]
            if page["next_offset"] >= page["max_offset"]:
                break
            offset = page["next_offset"]
        queues.append(messages)
    return queues


def log_bytes(data_dir: Path, end_offset: int) -> bytes:
    """A stopped broker's commit log, [0, end_offset), read straight from its files."""
    files = sorted((path for path in (data_dir / "commitlog").iterdir() if path.name.isdigit()),
                   key=lambda path: int(path.name))
    return b"".join(path.read_bytes() for path in files)[:end_offset]


def kill_and_promote(master: BrokerProcess, slave: BrokerProcess,
                     role: str = "ASYNC_MASTER") -> None:
    """kill -9 the master, then promote its slave to `role` once the dead master's link has
    dropped (a promotion is refused while the master is heard from)."""
    assert master.process is not None
    master.process.kill()
    master.process.wait(10)

    def promote() -> bool:
        response = slave.client.post("/admin/ha/promote", json={"role": role})
        assert response.status_code in (200, 409), response.text
        return response.status_code == 200

    wait_for(promote, 15, "promotion (the dead master's link must drop first)")
