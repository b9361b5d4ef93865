"""A DLedger group of real `twinlog serve` processes on loopback, for e2e tests and benches.

Every port is bound here, by this process, before any member starts: each member gets a
listening HTTP socket and a bound DLedger socket (port 0, the kernel picks), passed by
descriptor (`--http-listen-fd`, `--dledger-listen-fd`, `pass_fds`). So the peer strings are
known up front and no port is ever guessed free. This process keeps its copies for the life
of the group: a member restarted after `kill()` serves the very same ports. While a member is
down its ports still accept TCP connections into the backlog (nobody answers them): a client
sees a timeout, not a refusal, as with a hung host.

    group = DLedgerGroup(tmp_path)        # 3 members n0, n1, n2
    group.start_all()
    leader = group.wait_leader()          # the member every live member names as leader
    group.kill(leader.node_id)            # SIGKILL; group.start(node_id) restarts it
    group.stop_all()                      # SIGTERM each, then the sockets closed
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.support.metadata_template import seed_metadata
from tests.support.processes import terminate, terminate_all, wait_for
from tests.support.tcp_proxy import TcpProxy

__all__ = ["DLedgerGroup", "Member", "ProxiedGroup", "wait_for"]

ROOT = Path(__file__).resolve().parents[2]
# A bound, not a wait: on a machine shared by many suites (load 16-24) three members started
# at once took over 30 s to import and answer /readyz, with nothing wrong.
READY_TIMEOUT_S = 90.0
GROUP_SECRET = "test-dledger-secret"

# Small files and the product's default DLedger timing (failover is what tests measure).
FAST_SETTINGS: dict[str, Any] = {
    "mapped_file_size_bytes": 1 << 20,
    "message_size_max_bytes": 64 * 1024,
    "max_body_size_bytes": 256 * 1024,
    "log_level": "warning",
    "disk_max_used_ratio": 0.95,  # retention must not follow the host's disk use
    "slave_sync_interval_s": 1,
}


def _bound_socket(listening: bool) -> socket.socket:
    bound = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    bound.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    bound.bind(("127.0.0.1", 0))
    if listening:
        bound.listen(128)
    bound.set_inheritable(True)
    return bound


@dataclass
class Member:
    node_id: str
    data_dir: Path
    log_path: Path
    http_socket: socket.socket = field(default_factory=lambda: _bound_socket(True))
    dledger_socket: socket.socket = field(default_factory=lambda: _bound_socket(False))
    process: subprocess.Popen[bytes] | None = None

    def __post_init__(self) -> None:
        self.client = httpx.Client(base_url=self.url, timeout=5.0)

    @property
    def http_port(self) -> int:
        return int(self.http_socket.getsockname()[1])

    @property
    def dledger_port(self) -> int:
        return int(self.dledger_socket.getsockname()[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def is_alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def dledger(self) -> dict[str, Any]:
        """This member's GET /admin/dledger."""
        response = self.client.get("/admin/dledger")
        assert response.status_code == 200, response.text
        view: dict[str, Any] = response.json()
        return view

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]


class DLedgerGroup:
    def __init__(self, root: Path, size: int = 3, **settings: Any) -> None:
        self.root = root
        self.members = {f"n{number}": Member(f"n{number}", root / f"n{number}",
                                             root / f"n{number}.log")
                        for number in range(size)}
        self.settings = {**FAST_SETTINGS, "dledger_secret": GROUP_SECRET, **settings}

    def __getitem__(self, node_id: str) -> Member:
        return self.members[node_id]

    @property
    def peers(self) -> str:
        return ";".join(f"{m.node_id}-127.0.0.1:{m.dledger_port}" for m in self.members.values())

    @property
    def http_peers(self) -> str:
        return ";".join(f"{m.node_id}-127.0.0.1:{m.http_port}" for m in self.members.values())

    def arguments(self, member: Member) -> list[str]:
        arguments = [sys.executable, "-m", "app.cli.main", "serve",
                     "--http-listen-fd", str(member.http_socket.fileno()),
                     "--dledger-listen-fd", str(member.dledger_socket.fileno()),
                     "--data-dir", str(member.data_dir),
                     "--set", "replication_mode=dledger", "--set", f"dledger_self_id="
                     f"{member.node_id}", "--set", f"dledger_peers={self.peers}",
                     "--set", f"dledger_http_peers={self.http_peers}"]
        for key, value in self.settings.items():
            arguments += ["--set", f"{key}={value}"]
        return arguments

    def start(self, node_id: str) -> Member:
        """Start (or restart) one member on its ports; returns once it answers /readyz."""
        member = self.launch(node_id)
        self.wait_ready(member)
        return member

    def launch(self, node_id: str) -> Member:
        """Start (or restart) one member on its ports, without waiting for it."""
        member = self.members[node_id]
        assert not member.is_alive, f"{node_id} runs already"
        if "database_url" not in self.settings:
            seed_metadata(member.data_dir)  # migrated once per process, not by each member
        env = {key: value for key, value in os.environ.items()
               if not key.startswith("TWINLOG_")}
        env["PYTHONPATH"] = str(ROOT)
        with member.log_path.open("ab") as log:
            member.process = subprocess.Popen(
                self.arguments(member), cwd=ROOT, env=env, stdout=log,
                stderr=subprocess.STDOUT,
                pass_fds=(member.http_socket.fileno(), member.dledger_socket.fileno()))
        return member

    def start_all(self) -> None:
        """Every member at once, then wait until each answers /readyz."""
        for node_id in self.members:
            self.launch(node_id)
        for member in self.members.values():
            self.wait_ready(member)

    def wait_ready(self, member: Member) -> None:
        def ready() -> bool:
            if not member.is_alive:
                raise AssertionError(f"{member.node_id} exited:\n{member.log()}")
            try:
                return member.client.get("/readyz").status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(ready, READY_TIMEOUT_S, f"{member.node_id} ready")

    def live(self) -> list[Member]:
        return [member for member in self.members.values() if member.is_alive]

    def leader(self) -> Member | None:
        """The member that leads, takes writes (caught up in its term), and that every live
        member names as leader, else None."""
        views = {}
        for member in self.live():
            try:
                views[member.node_id] = member.dledger()
            except httpx.HTTPError:
                return None
        leaders = [node_id for node_id, view in views.items()
                   if view["role"] == "LEADER" and view["accepting_writes"]]
        if len(leaders) != 1:
            return None
        if any(view["leader_id"] != leaders[0] for view in views.values()):
            return None
        return self.members[leaders[0]]

    def wait_leader(self, timeout_s: float = 20.0) -> Member:
        found: list[Member] = []

        def elected() -> bool:
            leader = self.leader()
            if leader is not None:
                found.append(leader)
            return leader is not None

        wait_for(elected, timeout_s, "one leader named by every live member")
        return found[-1]

    def wait_new_leader(self, old: Member, timeout_s: float = 20.0) -> Member:
        """The leader every live member names, once it is not `old` (a killed one)."""
        found: list[Member] = []

        def elected() -> bool:
            leader = self.leader()
            if leader is not None and leader is not old:
                found.append(leader)
            return bool(found)

        wait_for(elected, timeout_s, "a new leader among the others")
        return found[-1]

    def kill(self, node_id: str) -> None:
        """SIGKILL: nothing flushed, nothing answered."""
        member = self.members[node_id]
        assert member.process is not None
        member.process.kill()
        member.process.wait()

    def stop(self, node_id: str) -> int:
        """SIGTERM, then SIGKILL after a bounded wait; returns the exit code."""
        member = self.members[node_id]
        return terminate(member.process, node_id, member.log)

    def stop_all(self) -> None:
        """Stop every member, then close this process's sockets and clients."""
        try:
            terminate_all([(member.process, node_id, member.log)
                           for node_id, member in self.members.items()])
        finally:
            for member in self.members.values():
                member.client.close()
                member.http_socket.close()
                member.dledger_socket.close()


class ProxiedGroup(DLedgerGroup):
    """Every DLedger link a -> b goes through its own TcpProxy to b's port, so a member can
    be cut off from the others (stalled proxies: connections stay open, nothing passes)."""

    def __init__(self, root: Path, **settings: Any) -> None:
        super().__init__(root, **settings)
        self.proxies = {(a, b): TcpProxy(("127.0.0.1", self.members[b].dledger_port))
                        for a in self.members for b in self.members if a != b}

    def arguments(self, member: Member) -> list[str]:
        peers = ";".join(
            f"{other.node_id}-127.0.0.1:" + str(
                other.dledger_port if other is member
                else self.proxies[(member.node_id, other.node_id)].port)
            for other in self.members.values())
        arguments = super().arguments(member)
        position = arguments.index(f"dledger_peers={self.peers}")
        arguments[position] = f"dledger_peers={peers}"
        return arguments

    def isolate(self, node_id: str) -> None:
        for (a, b), proxy in self.proxies.items():
            if node_id in (a, b):
                proxy.stall()

    def heal(self) -> None:
        for proxy in self.proxies.values():
            proxy.resume()
            proxy.cut()  # fresh connections, as after a real partition

    def close_proxies(self) -> None:
        for proxy in self.proxies.values():
            proxy.close()
