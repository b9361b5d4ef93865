"""DLedger failover as a consumer group sees it (issue 26), `twinlog serve` processes on
127.0.0.1 (tests/support/dledger_group.py's group, the product's default timing).

Each run: a message produced and the group's offset committed past it on the leader (200:
committed and applied there), then kill -9 of the leader. From the kill, three clients poll
the two survivors at once, each recording its first success:

- produce (the baseline, today's failover figure): the first 201;
- consume: the first read, on the member that names itself leader, of the group's offset
  that sees the value committed before the kill, and a consume from it that answers 200;
- commit: the first offset commit answered 200 after that read (a consumer's whole loop).

The killed member restarts between runs; the next run kills whoever leads then. p50 and max
over the runs, each next to the produce baseline of the same runs.

    python -m bench.dledger_state_failover [--runs 10]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from tests.support.dledger_group import DLedgerGroup, Member, wait_for

TOPIC, GROUP = "Failover", "billing"
WAIT_S = 30.0
POLL_S = 0.005


def _answer(call: Callable[[], httpx.Response], status: int) -> httpx.Response | None:
    try:
        response = call()
    except httpx.HTTPError:
        return None
    return response if response.status_code == status else None


def _produced(member: Member, body: str, queue_id: int) -> dict[str, int] | None:
    answer = _answer(lambda: member.client.post(f"/v1/topics/{TOPIC}/messages",
                                                json={"body": body, "queue_id": queue_id}), 201)
    return answer.json() if answer is not None else None


def _read(member: Member, offset: int) -> bool:
    """Whether a consume of queue 0 at `offset` answers 200 with a message."""
    answer = _answer(lambda: member.client.get(f"/v1/topics/{TOPIC}/queues/0/messages",
                                               params={"offset": offset, "max_messages": 1}),
                     200)
    return answer is not None and bool(answer.json()["messages"])


def _commit(member: Member, offset: int) -> bool:
    return _answer(lambda: member.client.put(f"/v1/groups/{GROUP}/offsets/{TOPIC}/queues/0",
                                             json={"offset": offset}), 200) is not None


def _offset(member: Member) -> int | None:
    """The group's committed offset of queue 0, as `member` serves it."""
    answer = _answer(lambda: member.client.get(f"/v1/groups/{GROUP}/offsets"), 200)
    if answer is None:
        return None
    for offset in answer.json()["offsets"]:
        if offset["topic"] == TOPIC and offset["queue_id"] == 0:
            return int(offset["offset"])
    return None


def _leads(member: Member) -> bool:
    view = _answer(lambda: member.client.get("/admin/dledger"), 200)
    return view is not None and view.json()["role"] == "LEADER"


def _prepare(leader: Member, run: int) -> int:
    """A message at the end of queue 0 and the group's offset committed to it; the offset."""
    put = _produced(leader, f"before-{run}", 0)
    assert put is not None, "the leader refused the message before the kill"
    committed = put["queue_offset"]
    wait_for(lambda: _read(leader, committed), WAIT_S, "the message dispatched")
    assert _commit(leader, committed), "the leader refused the commit before the kill"
    return committed


def one_run(group: DLedgerGroup, leader: Member, run: int) -> dict[str, float]:
    committed = _prepare(leader, run)
    survivors = [member for member in group.members.values() if member is not leader]
    found: dict[str, float] = {}
    killed_at = time.monotonic()

    def produce() -> None:
        attempt = 0
        while time.monotonic() - killed_at < WAIT_S:
            for member in survivors:
                attempt += 1
                if _produced(member, f"after-{run}-{attempt}", 1) is not None:
                    found["produce"] = time.monotonic() - killed_at
                    return
            time.sleep(POLL_S)

    def consume() -> None:
        while time.monotonic() - killed_at < WAIT_S:
            for member in survivors:
                if not _leads(member) or _offset(member) != committed \
                        or not _read(member, committed):
                    continue
                found.setdefault("consume", time.monotonic() - killed_at)
                if _commit(member, committed + 1):
                    found["commit"] = time.monotonic() - killed_at
                    return
            time.sleep(POLL_S)

    group.kill(leader.node_id)
    threads = [threading.Thread(target=produce), threading.Thread(target=consume)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    missing = {"produce", "consume", "commit"} - set(found)
    if missing:
        raise RuntimeError(f"run {run}: no {sorted(missing)} within {WAIT_S} s of the kill")
    return found


def runs(root: Path, count: int) -> list[dict[str, float]]:
    group = DLedgerGroup(root, default_queue_count=2)
    try:
        group.start_all()
        results = []
        for run in range(count):
            leader = group.wait_leader(WAIT_S)
            results.append(one_run(group, leader, run))
            group.start(leader.node_id)
        return results
    finally:
        group.stop_all()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="twinlog-dledger-state-failover-"))
    try:
        results = runs(root, args.runs)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    baseline_ms = statistics.median(result["produce"] * 1000 for result in results)
    for name in ("produce", "consume", "commit"):
        timings = [result[name] * 1000 for result in results]
        p50_ms = statistics.median(timings)
        print(f"{name:8} p50 {p50_ms:7.0f} ms  max {max(timings):7.0f} ms  "
              f"(p50 - produce p50: {p50_ms - baseline_ms:+.0f} ms; {len(timings)} kills)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
