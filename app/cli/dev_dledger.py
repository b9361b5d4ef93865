"""`twinlog dev --dledger`: a DLedger group of three `twinlog serve` children on loopback.

The supervisor binds every member's HTTP and DLedger socket first (the given ports, or port 0
and the kernel picks) and hands them to the children by descriptor (`--http-listen-fd`,
`--dledger-listen-fd`), so the peer strings name real ports before any member starts. It keeps
no copy: a member's ports close when it exits, and `restart NAME` binds the same ports again
(app/cli/supervisor.py). The group shares a secret made for this run. Once a leader is named
by all three the banner shows it, with each member's pid (kill -9 the leader to watch the
failover: the others keep running, and the supervisor names the next leader). Commit-log
files are dev-sized, as `twinlog dev`'s (app/cli/dev.py).
"""

from __future__ import annotations

import secrets
import socket
import sys
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import httpx

from app.cli.dev import DEV_MAPPED_FILE_SIZE_BYTES, DevError, dev_file_size, requested_file_size
from app.cli.supervisor import POLL_S, READY_TIMEOUT_S, Child, disk_used, supervise, wait_ready

MEMBER_COUNT = 3


@dataclass(frozen=True, slots=True)
class DLedgerDevLayout:
    data_root: Path
    http_port: int = 8080  # members take http_port, +1, +2 (0: the kernel picks each)
    dledger_port: int = 20911  # likewise
    host: str = "127.0.0.1"
    mapped_file_size_bytes: int = DEV_MAPPED_FILE_SIZE_BYTES


@dataclass(slots=True)
class _Member:
    node_id: str
    http_port: int
    dledger_port: int
    # Bound and not yet handed to the member (at first the kernel-picked ports; after the
    # member's exit, None until a restart binds them again).
    sockets: tuple[socket.socket, socket.socket] | None = field(default=None, repr=False)


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


def _bind(host: str, http_port: int, dledger_port: int) -> tuple[socket.socket, socket.socket]:
    http_socket = _bound(host, http_port, True)
    try:
        return http_socket, _bound(host, dledger_port, False)
    except BaseException:
        http_socket.close()
        raise


def _offset(port: int, number: int) -> int:
    return port + number if port else 0


def _bind_members(layout: DLedgerDevLayout) -> list[_Member]:
    members: list[_Member] = []
    try:
        for number in range(MEMBER_COUNT):
            sockets = _bind(layout.host, _offset(layout.http_port, number),
                            _offset(layout.dledger_port, number))
            members.append(_Member(f"n{number}", sockets[0].getsockname()[1],
                                   sockets[1].getsockname()[1], sockets))
    except BaseException:
        _close(members)
        raise
    return members


def _close(members: list[_Member]) -> None:
    for member in members:
        for bound in member.sockets or ():
            bound.close()
        member.sockets = None


def _arguments(layout: DLedgerDevLayout, members: list[_Member], member: _Member,
               fds: tuple[int, int]) -> list[str]:
    peers = ";".join(f"{m.node_id}-{layout.host}:{m.dledger_port}" for m in members)
    http_peers = ";".join(f"{m.node_id}-{layout.host}:{m.http_port}" for m in members)
    return ["serve", "--http-listen-fd", str(fds[0]), "--dledger-listen-fd", str(fds[1]),
            "--data-dir", str(layout.data_root / member.node_id),
            "--set", "replication_mode=dledger", "--set", f"dledger_self_id={member.node_id}",
            "--set", f"dledger_peers={peers}", "--set", f"dledger_http_peers={http_peers}",
            "--set", "slave_sync_interval_s=2",
            "--set", f"mapped_file_size_bytes={layout.mapped_file_size_bytes}"]


class _Launch:
    """A member's start: its sockets (bound again at its ports for a restart), handed over."""

    def __init__(self, layout: DLedgerDevLayout, members: list[_Member], member: _Member) -> None:
        self._layout, self._members, self._member = layout, members, member

    def __call__(self) -> tuple[list[str], list[socket.socket]]:
        member = self._member
        sockets = member.sockets or _bind(self._layout.host, member.http_port,
                                          member.dledger_port)
        member.sockets = None  # the child's from now on (the supervisor closes its copies)
        fds = (sockets[0].fileno(), sockets[1].fileno())
        return _arguments(self._layout, self._members, member, fds), list(sockets)


def _leaders(urls: list[str], timeout_s: float) -> set[tuple[str | None, int]]:
    """The (leader id, term) each member that answers names."""
    named: set[tuple[str | None, int]] = set()
    with httpx.Client(timeout=timeout_s) as client:
        for url in urls:
            try:
                view = client.get(f"{url}/admin/dledger").json()
                named.add((view["leader_id"], view["term"]))
            except (httpx.HTTPError, ValueError, KeyError, TypeError):
                continue
    return named


def _wait_leader(urls: list[str], stop: threading.Event) -> str | None:
    """The leader's id once every member names the same one, else None at the deadline."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline and not stop.is_set():
        named = {leader_id for leader_id, _ in _leaders(urls, 1.0)}
        if len(named) == 1 and (leader_id := named.pop()) is not None:
            return leader_id
        stop.wait(POLL_S)
    return None


class _LeaderWatch:
    """Says when the members that run agree on a new leader (after a kill, say)."""

    def __init__(self, urls: dict[str, str], leader_id: str) -> None:
        self._urls = urls
        self._said = leader_id

    def __call__(self, children: list[Child]) -> None:
        running = [self._urls[child.name] for child in children if child.is_running]
        named = _leaders(running, 0.5)
        if len(named) != 1:
            return
        ((leader_id, term),) = named
        if leader_id is not None and leader_id != self._said:
            self._said = leader_id
            print(f"twinlog dev: {leader_id} leads now (term {term}): {self._urls[leader_id]}",
                  flush=True)


def _banner(layout: DLedgerDevLayout, members: list[_Member], children: list[Child],
            leader_id: str) -> str:
    url = {m.node_id: f"http://{layout.host}:{m.http_port}" for m in members}
    pid = {child.name: child.process.pid for child in children}
    lines = ["", "twinlog dev --dledger: a DLedger group of three"]
    for member in members:
        role = "LEADER  " if member.node_id == leader_id else "follower"
        lines.append(f"  {member.node_id} {role} {url[member.node_id]}   DLedger "
                     f"{layout.host}:{member.dledger_port}   data "
                     f"{layout.data_root / member.node_id}   pid {pid[member.node_id]}")
    leader = url[leader_id]
    lines += [
        "auth is OPEN (development mode): no token is needed, none is checked.",
        "data dirs on disk now: " + disk_used(url),
        "try:",
        "  curl -H 'Content-Type: application/octet-stream' --data-binary 'hello' "
        f"{leader}/v1/topics/demo/messages",
        f"  curl {leader}/admin/dledger",
        "  (a follower answers writes 503 NOT_LEADER naming the leader)",
        f"  kill -9 {pid[leader_id]}   (the leader: the others elect another, named here)",
        "A member that dies leaves the others running: `restart NAME` and Enter starts it "
        "again; `status` lists the three.",
        "Ctrl-C stops all three.",
        "",
    ]
    return "\n".join(lines)


def run_dev_dledger(layout: DLedgerDevLayout, file_size_bytes: int | None = None) -> int:
    try:
        size = dev_file_size([layout.data_root / f"n{number}" for number in range(MEMBER_COUNT)],
                             requested_file_size(file_size_bytes))
    except DevError as error:
        print(f"twinlog dev: {error}", file=sys.stderr)
        return 2
    layout = replace(layout, mapped_file_size_bytes=size)
    members = _bind_members(layout)
    urls = {m.node_id: f"http://{layout.host}:{m.http_port}" for m in members}
    watch: list[_LeaderWatch] = []

    def start(environment: dict[str, str], children: list[Child],
              stop: threading.Event) -> str | None:
        layout.data_root.mkdir(parents=True, exist_ok=True)
        for member in members:
            children.append(Child(member.node_id, _Launch(layout, members, member),
                                  environment))
        if not wait_ready(children, list(urls.values()), stop):
            return None
        leader_id = _wait_leader(list(urls.values()), stop)
        if leader_id is None:
            return None
        watch.append(_LeaderWatch(urls, leader_id))
        return _banner(layout, members, children, leader_id)

    try:
        return supervise(start, {"TWINLOG_DLEDGER_SECRET": secrets.token_urlsafe(24)},
                         "all three members", lambda children: watch[0](children))
    finally:
        _close(members)
