"""`twinlog dev`: a SYNC_MASTER and its SLAVE as two `twinlog serve` child processes.

The master starts first; the slave is pointed at the HA port the master reports having bound
(`--port-file`), so any port given as 0 is picked by the kernel and shown in the banner. The
children, Ctrl-C, a child that dies and `restart NAME`: app/cli/supervisor.py (a restarted
broker gets the ports it had).

Development reserves little disk: commit-log files of 64 MiB (`--mapped-file-size-bytes`, or
TWINLOG_MAPPED_FILE_SIZE_BYTES) instead of the 1 GiB default, and the start says what they
reserve. A data dir keeps the size its files have (store/store_lifecycle.py), and a pair must
share one (a slave's files are byte copies of its master's), so the size of files already in
a member's data dir wins for every member; members whose files differ are refused.
"""

from __future__ import annotations

import os
import secrets
import socket
import sys
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path

import httpx

from app.cli.supervisor import POLL_S, READY_TIMEOUT_S, Child, disk_used, supervise, wait_ready
from app.server.port_file import read_port_file
from store.files.log_file_size import kept_file_size

MIB = 1 << 20
DEV_MAPPED_FILE_SIZE_BYTES = 64 * MIB


class DevError(Exception):
    """The dev brokers cannot start as asked; the message says why."""


@dataclass(frozen=True, slots=True)
class DevLayout:
    data_root: Path
    master_http_port: int = 8080
    slave_http_port: int = 8081
    ha_port: int = 10912
    host: str = "127.0.0.1"
    mapped_file_size_bytes: int = DEV_MAPPED_FILE_SIZE_BYTES

    @property
    def master_url(self) -> str:
        return f"http://{self.host}:{self.master_http_port}"

    @property
    def slave_url(self) -> str:
        return f"http://{self.host}:{self.slave_http_port}"

    def master_arguments(self) -> list[str]:
        return ["serve", "--role", "SYNC_MASTER", "--http-host", self.host,
                "--http-port", str(self.master_http_port), "--ha-port", str(self.ha_port),
                "--data-dir", str(self.data_root / "master"),
                "--set", f"mapped_file_size_bytes={self.mapped_file_size_bytes}"]

    def slave_arguments(self) -> list[str]:
        return ["serve", "--role", "SLAVE", "--http-host", self.host,
                "--http-port", str(self.slave_http_port),
                "--ha-master-address", f"{self.host}:{self.ha_port}",
                "--master-http-address", self.master_url,
                "--data-dir", str(self.data_root / "slave"),
                "--set", "ha_reconnect_interval_ms=1000",
                "--set", f"mapped_file_size_bytes={self.mapped_file_size_bytes}"]


def requested_file_size(flag_bytes: int | None) -> tuple[int, str]:
    """The commit-log file size asked for, and where it comes from."""
    if flag_bytes is not None:
        return flag_bytes, "--mapped-file-size-bytes"
    from_environment = os.environ.get("TWINLOG_MAPPED_FILE_SIZE_BYTES")
    if from_environment:
        try:
            return int(from_environment), "TWINLOG_MAPPED_FILE_SIZE_BYTES"
        except ValueError as error:
            raise DevError(f"TWINLOG_MAPPED_FILE_SIZE_BYTES={from_environment!r} is not a "
                           "number of bytes") from error
    return DEV_MAPPED_FILE_SIZE_BYTES, "the dev default"


def dev_file_size(data_dirs: list[Path], requested: tuple[int, str]) -> int:
    """The commit-log file size every member uses: the size of the files already in their
    data dirs, else the requested one; said on stdout with what it reserves."""
    found = {directory: size for directory in data_dirs
             if (size := kept_file_size(directory, requested[0])) is not None}
    if len(set(found.values())) > 1:
        raise DevError("the members' commit-log files differ in size (" + ", ".join(
            f"{directory}: {size} bytes" for directory, size in found.items()) + "); members "
            "must share one (their logs are byte copies): remove the data dirs, or all but one")
    size, source = requested
    if found:
        directory, size = next(iter(found.items()))
        source = f"kept from the files in {directory}"
    print(f"twinlog dev: commit-log files of {size / MIB:g} MiB ({source}): once it holds a "
          f"message, each broker reserves {2 * size / MIB:g} MiB for them (the file it writes, "
          "and the next one, allocated ahead of need)", flush=True)
    return size


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


def _banner(layout: DevLayout, children: list[Child]) -> str:
    master, slave = children
    return "\n".join([
        "",
        f"twinlog dev: master (SYNC_MASTER) {layout.master_url}   HA {layout.host}:"
        f"{layout.ha_port}   data {layout.data_root / 'master'}   pid {master.process.pid}",
        f"             slave  (SLAVE)       {layout.slave_url}   data "
        f"{layout.data_root / 'slave'}   pid {slave.process.pid}",
        "auth is OPEN (development mode): no token is needed, none is checked.",
        "data dirs on disk now: " + disk_used({"master": layout.master_url,
                                               "slave": layout.slave_url}),
        "try:",
        "  curl -H 'Content-Type: application/octet-stream' --data-binary 'hello' "
        f"{layout.master_url}/v1/topics/demo/messages",
        f"  curl '{layout.slave_url}/v1/topics/demo/queues/0/messages?body_encoding=utf8'",
        f"  curl {layout.master_url}/admin/diff",
        f"  open {layout.master_url}/docs",
        "A broker that dies leaves the other running: `restart master` (or slave) and Enter "
        "starts it again; `status` lists both.",
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


class _Arguments:
    """A child's arguments, replaced once its ports are known: a restart binds the same."""

    def __init__(self, arguments: list[str]) -> None:
        self.arguments = arguments

    def __call__(self) -> tuple[list[str], list[socket.socket]]:
        return self.arguments, []  # a classic broker binds its own ports


def _start_pair(layout: DevLayout, environment: dict[str, str], children: list[Child],
                stop: threading.Event) -> DevLayout | None:
    """Start the master, then the slave at the master's HA port; the layout with the ports
    they bound (a port given as 0 is chosen by the kernel), or None if one did not start."""
    layout.data_root.mkdir(parents=True, exist_ok=True)
    master_ports = layout.data_root / "master.ports"
    master_ports.unlink(missing_ok=True)
    master = _Arguments([*layout.master_arguments(), "--port-file", str(master_ports)])
    children.append(Child("master", master, environment))
    ports = _wait_ports(children[-1], master_ports, stop)
    if ports is None or ports[1] is None:
        return None
    layout = replace(layout, master_http_port=ports[0], ha_port=ports[1])
    master.arguments = [*layout.master_arguments(), "--port-file", str(master_ports)]
    slave_ports = layout.data_root / "slave.ports"
    slave_ports.unlink(missing_ok=True)
    slave = _Arguments([*layout.slave_arguments(), "--port-file", str(slave_ports)])
    children.append(Child("slave", slave, environment))
    ports = _wait_ports(children[-1], slave_ports, stop)
    if ports is None:
        return None
    layout = replace(layout, slave_http_port=ports[0])
    slave.arguments = [*layout.slave_arguments(), "--port-file", str(slave_ports)]
    return layout


def run_dev(layout: DevLayout, file_size_bytes: int | None = None) -> int:
    try:
        size = dev_file_size([layout.data_root / "master", layout.data_root / "slave"],
                             requested_file_size(file_size_bytes))
    except DevError as error:
        print(f"twinlog dev: {error}", file=sys.stderr)
        return 2
    layout = replace(layout, mapped_file_size_bytes=size)

    def start(environment: dict[str, str], children: list[Child],
              stop: threading.Event) -> str | None:
        started = _start_pair(layout, environment, children, stop)
        if started is None or not wait_ready(children, [started.master_url, started.slave_url],
                                             stop):
            return None
        if not _wait_in_sync(started, stop) and not stop.is_set():
            print("twinlog dev: the slave is not in sync yet; puts answer 202 until it is",
                  flush=True)
        return _banner(started, children)

    # The pair shares a secret made for this run: the HA link is authenticated even in dev.
    return supervise(start, {"TWINLOG_HA_SECRET": secrets.token_urlsafe(24)}, "both brokers")
