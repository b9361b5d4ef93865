"""`twinlog dev`: a SYNC_MASTER and its SLAVE as two `twinlog serve` child processes.

The master starts first; the slave is pointed at the HA port the master reports having bound
(`--port-file`), so any port given as 0 is picked by the kernel and shown in the banner.

Each child is its own broker process (DESIGN: one broker = one process) in its own session, so
a terminal's Ctrl-C reaches only this supervisor, which then stops both children with SIGTERM
(a clean broker shutdown: no abort marker), waits a bounded time, and kills what is left.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from types import FrameType
from typing import IO

import httpx

from app.server.port_file import read_port_file

READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 20.0
POLL_S = 0.2


@dataclass(frozen=True, slots=True)
class DevLayout:
    data_root: Path
    master_http_port: int = 8080
    slave_http_port: int = 8081
    ha_port: int = 10912
    host: str = "127.0.0.1"

    @property
    def master_url(self) -> str:
        return f"http://{self.host}:{self.master_http_port}"

    @property
    def slave_url(self) -> str:
        return f"http://{self.host}:{self.slave_http_port}"

    def master_arguments(self) -> list[str]:
        return ["serve", "--role", "SYNC_MASTER", "--http-host", self.host,
                "--http-port", str(self.master_http_port), "--ha-port", str(self.ha_port),
                "--data-dir", str(self.data_root / "master")]

    def slave_arguments(self) -> list[str]:
        return ["serve", "--role", "SLAVE", "--http-host", self.host,
                "--http-port", str(self.slave_http_port),
                "--ha-master-address", f"{self.host}:{self.ha_port}",
                "--master-http-address", self.master_url,
                "--data-dir", str(self.data_root / "slave"),
                "--set", "ha_reconnect_interval_ms=1000"]


class Child:
    def __init__(self, name: str, arguments: list[str], environment: dict[str, str],
                 pass_fds: tuple[int, ...] = ()) -> None:
        self.name = name
        self._terminated = False
        self.process = subprocess.Popen(
            [sys.executable, "-m", "app.cli.main", *arguments], env=environment,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
            start_new_session=True, pass_fds=pass_fds)
        assert self.process.stdout is not None
        # Not a ServiceThread: blocked reading the child's pipe until EOF; not a round-based loop.
        self._relay = threading.Thread(target=self._copy_output, args=(self.process.stdout,),
                                       name=f"dev-{name}-output", daemon=True)
        self._relay.start()

    def _copy_output(self, stream: IO[str]) -> None:
        for line in stream:
            sys.stdout.write(f"[{self.name}] {line}")
            sys.stdout.flush()

    def terminate(self) -> None:
        """SIGTERM once, without waiting (`stop` waits): a second one would cut the child's
        graceful shutdown short."""
        if not self._terminated and self.process.poll() is None:
            self._terminated = True
            self.process.send_signal(signal.SIGTERM)

    def stop(self) -> int:
        """SIGTERM, a bounded wait, then SIGKILL; returns the exit code."""
        self.terminate()
        try:
            code = self.process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            print(f"twinlog dev: {self.name} did not stop in {STOP_TIMEOUT_S:.0f} s; killing it",
                  flush=True)
            self.process.kill()
            code = self.process.wait()
        self._relay.join(timeout=2)
        return code


def wait_ready(children: list[Child], urls: list[str], stop: threading.Event) -> bool:
    deadline = time.monotonic() + READY_TIMEOUT_S
    pending = dict(zip(urls, children, strict=True))
    with httpx.Client(timeout=1.0) as client:
        while pending and time.monotonic() < deadline and not stop.is_set():
            for url, child in list(pending.items()):
                if child.process.poll() is not None:
                    print(f"twinlog dev: {child.name} exited with {child.process.returncode}",
                          flush=True)
                    return False
                try:
                    if client.get(f"{url}/readyz").status_code == 200:
                        del pending[url]
                except httpx.HTTPError:
                    pass
            stop.wait(POLL_S)
    return not pending


def _wait_in_sync(layout: DevLayout, stop: threading.Event) -> bool:
    """Until the master counts the slave in sync (so that a first SYNC_MASTER put is 201)."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    with httpx.Client(timeout=1.0) as client:
        while time.monotonic() < deadline and not stop.is_set():
            try:
                diff = client.get(f"{layout.master_url}/admin/diff").json()
                if diff["master"]["in_sync_slave_count"] >= 1:
                    return True
            except (httpx.HTTPError, ValueError, KeyError, TypeError):
                pass
            stop.wait(POLL_S)
    return False


def _banner(layout: DevLayout) -> str:
    return "\n".join([
        "",
        f"twinlog dev: master (SYNC_MASTER) {layout.master_url}   HA {layout.host}:"
        f"{layout.ha_port}   data {layout.data_root / 'master'}",
        f"             slave  (SLAVE)       {layout.slave_url}   data "
        f"{layout.data_root / 'slave'}",
        "auth is OPEN (development mode): no token is needed, none is checked.",
        "try:",
        "  curl -H 'Content-Type: application/octet-stream' --data-binary 'hello' "
        f"{layout.master_url}/v1/topics/demo/messages",
        f"  curl '{layout.slave_url}/v1/topics/demo/queues/0/messages?body_encoding=utf8'",
        f"  curl {layout.master_url}/admin/diff",
        f"  open {layout.master_url}/docs",
        "Ctrl-C stops both.",
        "",
    ])


def _wait_ports(child: Child, port_file: Path,
                stop: threading.Event) -> tuple[int, int | None] | None:
    """The ports a child bound (its --port-file), or None if it exits or never reports."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline and not stop.is_set():
        ports = read_port_file(port_file)
        if ports is not None:
            return ports
        if child.process.poll() is not None:
            print(f"twinlog dev: {child.name} exited with {child.process.returncode}",
                  flush=True)
            return None
        stop.wait(POLL_S)
    return None


def _start_pair(layout: DevLayout, environment: dict[str, str], children: list[Child],
                stop: threading.Event) -> DevLayout | None:
    """Start the master, then the slave at the master's HA port; the layout with the ports
    they bound (a port given as 0 is chosen by the kernel), or None if one did not start."""
    layout.data_root.mkdir(parents=True, exist_ok=True)
    master_ports = layout.data_root / "master.ports"
    master_ports.unlink(missing_ok=True)
    children.append(Child("master", [*layout.master_arguments(), "--port-file",
                                      str(master_ports)], environment))
    ports = _wait_ports(children[-1], master_ports, stop)
    if ports is None or ports[1] is None:
        return None
    layout = replace(layout, master_http_port=ports[0], ha_port=ports[1])
    slave_ports = layout.data_root / "slave.ports"
    slave_ports.unlink(missing_ok=True)
    children.append(Child("slave", [*layout.slave_arguments(), "--port-file",
                                     str(slave_ports)], environment))
    ports = _wait_ports(children[-1], slave_ports, stop)
    return None if ports is None else replace(layout, slave_http_port=ports[0])


def run_dev(layout: DevLayout) -> int:
    def start(environment: dict[str, str], children: list[Child],
              stop: threading.Event) -> str | None:
        started = _start_pair(layout, environment, children, stop)
        if started is None or not wait_ready(children, [started.master_url, started.slave_url],
                                             stop):
            return None
        if not _wait_in_sync(started, stop) and not stop.is_set():
            print("twinlog dev: the slave is not in sync yet; puts answer 202 until it is",
                  flush=True)
        return _banner(started)

    # The pair shares a secret made for this run: the HA link is authenticated even in dev.
    return supervise(start, {"TWINLOG_HA_SECRET": secrets.token_urlsafe(24)}, "both brokers")


Starter = Callable[[dict[str, str], list[Child], threading.Event], "str | None"]


def supervise(start: Starter, environment_extra: dict[str, str], what: str) -> int:
    """Run `start` (it starts the children and returns the banner, or None if they did not
    come up), then wait for Ctrl-C or SIGTERM (or a child's exit) and stop every child."""
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    environment = {**os.environ, "TWINLOG_AUTH_TOKENS": "{}", "PYTHONUNBUFFERED": "1",
                   **environment_extra}
    environment.pop("TWINLOG_CONFIG_FILE", None)
    children: list[Child] = []
    try:
        banner = start(environment, children, stop)
        if banner is not None:
            print(banner, flush=True)
            while not stop.is_set() and all(c.process.poll() is None for c in children):
                stop.wait(POLL_S)
        elif not stop.is_set():
            print("twinlog dev: the brokers did not become ready; stopping", flush=True)
    finally:
        print(f"twinlog dev: stopping {what}", flush=True)
        # All at once: stopped one after another, a member still running would wait on a
        # request to one already gone (a DLedger follower's metadata sync: up to its timeout).
        for child in children:
            child.terminate()
        codes = [child.stop() for child in children]
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    for child, code in zip(children, codes, strict=True):
        print(f"twinlog dev: {child.name} exited with {code}", flush=True)
    return 0 if all(code == 0 for code in codes) else 1
