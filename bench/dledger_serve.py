"""A DLedger group of `twinlog serve` processes as HTTP clients see it (the group is
tests/support/dledger_group.py's: ports bound by this process, passed as descriptors; the
product's default DLedger timing).

- Failover: from kill -9 of the leader to the first 201 PUT_OK answered by a survivor (the
  client tries both survivors in turn: a follower answers 503 at once); the killed member
  restarts between runs and the next run kills whoever leads then.
- Produce throughput under wrk, next to a SYNC_MASTER broker with a slave process.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx

from bench.http_produce import BODY_100, Load, broker, ensure_wrk, measure
from tests.support.dledger_group import DLedgerGroup, Member, wait_for

TOPIC = "Failover"
WAIT_S = 30.0


def _put_ok(member: Member, body: str) -> bool:
    try:
        response = member.client.post(f"/v1/topics/{TOPIC}/messages", json={"body": body})
    except httpx.HTTPError:
        return False
    return response.status_code == 201


def first_put_ok_seconds(group: DLedgerGroup, leader: Member) -> float:
    survivors = [member for member in group.members.values() if member is not leader]
    killed_at = time.monotonic()
    group.kill(leader.node_id)
    attempt = 0
    while time.monotonic() - killed_at < WAIT_S:
        for member in survivors:
            attempt += 1
            if _put_ok(member, f"after-kill-{attempt}"):
                return time.monotonic() - killed_at
        time.sleep(0.005)
    raise RuntimeError(f"no 201 within {WAIT_S} s of the kill")


def http_failover_runs(root: Path, runs: int) -> list[float]:
    root.mkdir(parents=True, exist_ok=True)
    group = DLedgerGroup(root)
    try:
        group.start_all()
        timings = []
        for run in range(runs):
            leader = group.wait_leader(WAIT_S)
            wait_for(lambda leader=leader, run=run: _put_ok(leader, f"before-{run}"), WAIT_S,
                     "a 201 on the leader")
            timings.append(first_put_ok_seconds(group, leader))
            group.start(leader.node_id)
        return timings
    finally:
        group.stop_all()


def http_produce_loads(root: Path, duration_s: float) -> tuple[Load, Load]:
    """(SYNC_MASTER with a slave process, DLedger leader of three members): the same wrk load
    as bench/http_produce.py's case (c), single JSON produces of 100-byte bodies."""
    wrk = ensure_wrk()
    single = json.dumps({"body": BODY_100.decode()}).encode()
    path = f"/v1/topics/{TOPIC}/messages"
    with broker(root, "SYNC_MASTER", with_slave=True) as url:
        sync_master = measure(wrk, url + path, single, "application/json", duration_s, root)
    (root / "dledger").mkdir(parents=True, exist_ok=True)
    group = DLedgerGroup(root / "dledger", mapped_file_size_bytes=1 << 30, log_level="warning")
    try:
        group.start_all()
        leader = group.wait_leader(WAIT_S)
        dledger = measure(wrk, leader.url + path, single, "application/json", duration_s, root)
    finally:
        group.stop_all()
    return sync_master, dledger
