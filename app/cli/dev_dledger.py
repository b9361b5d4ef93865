"""`twinlog dev --dledger`: a DLedger group of three `twinlog serve` children on loopback.

The supervisor binds every member's HTTP and DLedger socket first (the given ports, or port 0
and the kernel picks) and hands them to the children by descriptor (`--http-listen-fd`,
`--dledger-listen-fd`), so the peer strings name real ports before any member starts. The
group shares a secret made for this run. Once a leader is named by all three the banner
shows it; Ctrl-C stops the three (app/cli/dev.py's supervisor: SIGTERM, a bounded wait, SIGKILL).
"""

from __future__ import annotations

import secrets
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from app.cli.dev import POLL_S, READY_TIMEOUT_S, Child, supervise, wait_ready

MEMBER_COUNT = 3


@dataclass(frozen=True, slots=True)
class DLedgerDevLayout:
    data_root: Path
    http_port: int = 8080  # members take http_port, +1, +2 (0: the kernel picks each)
    dledger_port: int = 20911  # likewise
    host: str = "127.0.0.1"


@dataclass(slots=True)
class _Member:
    node_id: str
    http_socket: socket.socket
    dledger_socket: socket.socket

    @property
    def http_port(self) -> int:
        return int(self.http_socket.getsockname()[1])

    @property
    def dledger_port(self) -> int:
        return int(self.dledger_socket.getsockname()[1])


def _bound(host: str, port: int, listening: bool) -> socket.socket:
    bound = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        bound.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        bound.bind((host, port))
        if listening:
            bound.listen(2048)
    except BaseException:
        bound.close()
        raise
    return bound


def _offset(port: int, number: int) -> int:
    return port + number if port else 0


def _bind_members(layout: DLedgerDevLayout) -> list[_Member]:
    members: list[_Member] = []
    try:
        for number in range(MEMBER_COUNT):
            http_socket = _bound(layout.host, _offset(layout.http_port, number), True)
            try:
                dledger_socket = _bound(layout.host, _offset(layout.dledger_port, number),
                                        False)
            except BaseException:
                http_socket.close()
                raise
            members.append(_Member(f"n{number}", http_socket, dledger_socket))
    except BaseException:
        _close(members)
        raise
    return members


def _close(members: list[_Member]) -> None:
    for member in members:
        member.http_socket.close()
        member.dledger_socket.close()


def _arguments(layout: DLedgerDevLayout, members: list[_Member], member: _Member) -> list[str]:
    peers = ";".join(f"{m.node_id}-{layout.host}:{m.dledger_port}" for m in members)
    http_peers = ";".join(f"{m.node_id}-{layout.host}:{m.http_port}" for m in members)
    return ["serve", "--http-listen-fd", str(member.http_socket.fileno()),
            "--dledger-listen-fd", str(member.dledger_socket.fileno()),
            "--data-dir", str(layout.data_root / member.node_id),
            "--set", "replication_mode=dledger", "--set", f"dledger_self_id={member.node_id}",
            "--set", f"dledger_peers={peers}", "--set", f"dledger_http_peers={http_peers}",
            "--set", "slave_sync_interval_s=2"]


def _wait_leader(urls: list[str], stop: threading.Event) -> str | None:
    """The leader's id once every member names the same one, else None at the deadline."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    with httpx.Client(timeout=1.0) as client:
        while time.monotonic() < deadline and not stop.is_set():
            try:
                named = {client.get(f"{url}/admin/dledger").json()["leader_id"] for url in urls}
            except (httpx.HTTPError, ValueError, KeyError, TypeError):
                named = set()
            leader_id = named.pop() if len(named) == 1 else None
            if isinstance(leader_id, str):
                return leader_id
            stop.wait(POLL_S)
    return None


def _banner(layout: DLedgerDevLayout, members: list[_Member], leader_id: str) -> str:
    url = {m.node_id: f"http://{layout.host}:{m.http_port}" for m in members}
    lines = ["", "twinlog dev --dledger: a DLedger group of three"]
    for member in members:
        role = "LEADER  " if member.node_id == leader_id else "follower"
        lines.append(f"  {member.node_id} {role} {url[member.node_id]}   DLedger "
                     f"{layout.host}:{member.dledger_port}   data "
                     f"{layout.data_root / member.node_id}")
    leader = url[leader_id]
    lines += [
        "auth is OPEN (development mode): no token is needed, none is checked.",
        "try:",
        "  curl -H 'Content-Type: application/octet-stream' --data-binary 'hello' "
        f"{leader}/v1/topics/demo/messages",
        f"  curl {leader}/admin/dledger",
        "  (a follower answers writes 503 NOT_LEADER naming the leader)",
        "Ctrl-C stops all three.",
        "",
    ]
    return "\n".join(lines)


def run_dev_dledger(layout: DLedgerDevLayout) -> int:
    members = _bind_members(layout)

    def start(environment: dict[str, str], children: list[Child],
              stop: threading.Event) -> str | None:
        layout.data_root.mkdir(parents=True, exist_ok=True)
        for member in members:
            children.append(Child(member.node_id, _arguments(layout, members, member),
                                  environment, (member.http_socket.fileno(),
                                                member.dledger_socket.fileno())))
        urls = [f"http://{layout.host}:{m.http_port}" for m in members]
        if not wait_ready(children, urls, stop):
            return None
        leader_id = _wait_leader(urls, stop)
        return None if leader_id is None else _banner(layout, members, leader_id)

    try:
        return supervise(start, {"TWINLOG_DLEDGER_SECRET": secrets.token_urlsafe(24)},
                         "all three members")
    finally:
        _close(members)
