"""Failover and quiet-group figures of a store-backed DLedger group, members in real processes.

The group: member n0 in its own process (bench/dledger_member.py), the one killed with
SIGKILL; n1 and n2 in this process, where the client appends (DLedgerHost.append, the call the
broker's produce makes). All three with the default timing (HostConfig()).

- failover: n0 is made leader (leadership transfer), a client appends in a loop; kill -9 of
  n0; the time until the first append answered OK by n1 or n2. n0 is restarted on the same
  port and data between runs. p50 and max over the runs.
- quiet group: after the first leader, the terms seen over an idle period; every term past
  the first leader's is an election that should not have happened.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import time
from pathlib import Path

from bench.dledger_member import StoredMember, spawn_member, stop_member, stored_member
from ha.dledger.core.actions import AppendStatus, TransferStatus
from ha.dledger.core.member import Role
from ha.dledger.core.peers import Peer, format_peers
from ha.dledger.host.host_config import HostConfig
from store import Message

SECRET = b"bench-dledger-failover"
WAIT_S = 30.0
APPEND_WAIT_S = 5.0


def _listener(port: int = 0) -> socket.socket:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    return listener


class MixedGroup:
    """n0 in a child process, n1 and n2 here; ports fixed for the group's life."""

    def __init__(self, root: Path) -> None:
        self.root = root
        listeners = [_listener() for _ in range(3)]
        self.peers = tuple(Peer(f"n{i}", "127.0.0.1", listener.getsockname()[1])
                           for i, listener in enumerate(listeners))
        self.peers_text = format_peers(self.peers)
        self.child: subprocess.Popen[str] | None = None
        self._child_listener: socket.socket | None = listeners[0]
        self.local = {f"n{i}": stored_member(root / f"n{i}", f"n{i}", self.peers_text,
                                             listeners[i], SECRET, HostConfig())
                      for i in (1, 2)}

    def start(self) -> None:
        self.start_child()
        for member in self.local.values():
            member.server.start()

    def start_child(self) -> None:
        listener = self._child_listener or _listener(self.peers[0].port)
        self._child_listener = None
        self.child = spawn_member(self.root / "n0", "n0", self.peers_text, listener,
                                  SECRET.decode())

    def kill_child(self) -> None:
        assert self.child is not None
        self.child.send_signal(signal.SIGKILL)
        self.child.wait()
        self.child = None

    def stop(self) -> None:
        for member in self.local.values():
            member.server.stop()
        if self.child is not None:
            stop_member(self.child)

    def local_leader(self) -> StoredMember | None:
        for member in self.local.values():
            if member.server.host.status().role == Role.LEADER.value:
                return member
        return None

    def leader_id(self) -> str | None:
        """The leader the local members agree on (they hear the child's heartbeats)."""
        seen = {member.server.host.status().leader_id for member in self.local.values()}
        return seen.pop() if len(seen) == 1 else None

    def terms(self) -> list[int]:
        return [member.server.host.status().term for member in self.local.values()]

    def make_child_lead(self) -> None:
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            if self.leader_id() == "n0":
                return
            leader = self.local_leader()
            if leader is not None:
                status = leader.server.host.transfer_leadership("n0").result(WAIT_S)
                if status is not TransferStatus.OK:
                    time.sleep(0.05)
            else:
                time.sleep(0.01)
        raise RuntimeError("n0 did not become leader")

    @staticmethod
    def append_ok(member: StoredMember) -> bool:
        future = member.server.host.append(member.encoder(Message("Bench", b"failover")))
        return future.result(APPEND_WAIT_S).status is AppendStatus.OK


def failover_seconds(group: MixedGroup) -> float:
    """From kill -9 of the leader (n0) to the first append answered OK by its successor."""
    group.make_child_lead()
    killed_at = time.monotonic()
    group.kill_child()
    deadline = killed_at + WAIT_S
    while time.monotonic() < deadline:
        leader = group.local_leader()
        if leader is not None and group.append_ok(leader):
            return time.monotonic() - killed_at
        time.sleep(0.005)
    raise RuntimeError(f"no append committed within {WAIT_S} s of the kill")


def failover_runs(root: Path, runs: int) -> list[float]:
    group = MixedGroup(root)
    group.start()
    try:
        timings = []
        for _ in range(runs):
            timings.append(failover_seconds(group))
            group.start_child()
        return timings
    finally:
        group.stop()


def quiet_elections(root: Path, duration_s: float) -> tuple[int, int]:
    """(elections after the first leader, leader changes) over `duration_s` of an idle group."""
    group = MixedGroup(root)
    group.start()
    try:
        deadline = time.monotonic() + WAIT_S
        while group.leader_id() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        first_term = max(group.terms())
        leaders = [group.leader_id()]
        ends_at = time.monotonic() + duration_s
        while time.monotonic() < ends_at:
            time.sleep(0.1)
            leader_id = group.leader_id()
            if leader_id is not None and leader_id != leaders[-1]:
                leaders.append(leader_id)
        return max(group.terms()) - first_term, len(leaders) - 1
    finally:
        group.stop()

