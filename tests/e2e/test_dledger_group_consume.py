"""Group consumption in DLedger mode with 3 real `twinlog serve` members
(tests/support/dledger_group.py): consumers of one group under a producer, and a kill -9 of
the leader in the middle. At least once at the end (tests/support/consumption_journal.py:
deliveries told apart by the stored message, not by body): every message the producer was
answered 201 for is acked, or its ack's answer was lost and the group holds nothing more;
an ack answered 200 (committed) means the message is never delivered again; a message
received with a 200 comes back no earlier than its invisible time, across the kill too;
followers answer 503 NOT_LEADER naming the leader."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support import consumption_journal
from tests.support.dledger_group import DLedgerGroup, Member, wait_for

pytestmark = [pytest.mark.processes, pytest.mark.slow]

# Elections only when the test kills a member (see tests/e2e/test_dledger_state.py).
SETTINGS = {"dledger_election_timeout_ms": 1500, "pop_invisible_ms_min": 100,
            "pop_expiry_interval_ms": 20}
MESSAGE_COUNT = 300
CONSUMER_COUNT = 3
INVISIBLE_MS = 1500
PATH = "/v1/groups/crowd/topics/Work/messages"
RUN_S = 120


@dataclass
class Journal(consumption_journal.Journal):
    """What the clients were answered, and where they send."""

    not_leader_answers: int = 0
    leader_url: str | None = None
    stop: threading.Event = field(default_factory=threading.Event)


def _post(group: DLedgerGroup, path: str, document: dict[str, Any], journal: Journal,
          clients: dict[str, httpx.Client],
          headers: dict[str, str] | None = None) -> httpx.Response | None:
    """POST to the member that leads (the last one known, looked up again after a refusal);
    None when none answers (an election)."""
    url = journal.leader_url
    if url is None:
        leader = group.leader()
        if leader is None:
            time.sleep(0.1)
            return None
        url = journal.leader_url = leader.url
    try:
        client = clients.get(url)
        if client is None:
            client = clients[url] = httpx.Client(base_url=url, timeout=10.0)
        response = client.post(path, json=document, headers=headers)
    except httpx.HTTPError:
        journal.leader_url = None
        time.sleep(0.1)
        return None
    if response.status_code == 503 and response.json().get("error_code") == "NOT_LEADER":
        journal.leader_url = None
        with journal.lock:
            journal.not_leader_answers += 1
        return None
    return response


def _with_clients(work: Any, *args: Any) -> None:
    """Run `work(*args, clients)` on this thread, closing its clients after."""
    clients: dict[str, httpx.Client] = {}
    try:
        work(*args, clients)
    finally:
        for client in clients.values():
            client.close()


def _produce(group: DLedgerGroup, journal: Journal, clients: dict[str, httpx.Client]) -> None:
    number = 0
    while number < MESSAGE_COUNT and not journal.stop.is_set():
        body = f"w{number:04d}"
        # A resend after a lost answer or a 202 is answered from the leader's idempotency
        # window; a new leader may still store it twice (docs/http-api.md).
        response = _post(group, "/v1/topics/Work/messages", {"body": body}, journal, clients,
                         headers={"Idempotency-Key": body})
        if response is None or response.status_code != 201:
            continue  # not stored, or not known to be: it may be delivered, need not be
        with journal.lock:
            journal.produced.add(body)
        number += 1
        time.sleep(0.005)


def _consume(group: DLedgerGroup, journal: Journal, holds_every: int,
             clients: dict[str, httpx.Client]) -> None:
    """Receive and ack; hold (never ack) every `holds_every`-th first delivery, so some
    messages are in flight across the kill and come back at their invisible time."""
    count = 0
    while not journal.stop.is_set():
        response = _post(group, PATH + ":receive", {
            "max_messages": 8, "invisible_ms": INVISIBLE_MS, "wait_ms": 500,
            "body_encoding": "utf8"}, journal, clients)
        if response is None or response.status_code not in (200, 202):
            continue
        answered_ms = time.time() * 1000
        messages = response.json()["messages"]
        to_ack = []
        with journal.lock:
            for message in messages:
                delivery = journal.delivered(message, response.status_code, answered_ms)
                count += 1
                if message["delivery_attempt"] > 1 or count % holds_every:
                    to_ack.append((message, delivery))
        if not to_ack:
            continue
        answer = _post(group, PATH + ":ack", {
            "receipt_handles": [message["receipt_handle"] for message, _ in to_ack]},
            journal, clients)
        if answer is None or answer.status_code not in (200, 207):
            with journal.lock:  # it may have been acked: the group's counts tell at the end
                journal.unanswered_acks.update(message["body"] for message, _ in to_ack)
            continue
        acked_ms = time.time() * 1000
        with journal.lock:
            for (message, delivery), result in zip(to_ack, answer.json()["results"],
                                                   strict=True):
                if result["status"] == 200:
                    journal.acked(message, delivery, acked_ms)


def _group_counts(member: Member) -> dict[str, Any] | None:
    """The group's consumption counts of Work on `member`, None when it does not answer."""
    try:
        response = member.client.get("/v1/groups/crowd/lag")
    except httpx.HTTPError:
        return None
    if response.status_code != 200:
        return None
    [counts] = response.json()["consumption"]
    return dict(counts)


def test_consumers_under_a_producer_across_a_dledger_leader_kill_9(tmp_path: Path) -> None:
    group = DLedgerGroup(tmp_path, **SETTINGS)
    journal = Journal()
    threads: list[threading.Thread] = []
    try:
        group.start_all()
        leader = group.wait_leader()
        response = leader.client.post("/v1/topics", json={
            "name": "Work", "read_queue_count": 4, "write_queue_count": 4})
        assert response.status_code == 201, response.text
        response = leader.client.post("/v1/groups", json={"name": "crowd"})
        assert response.status_code == 201, response.text
        follower = next(member for member in group.members.values() if member is not leader)
        refused = follower.client.post(PATH + ":receive", json={"invisible_ms": 1000})
        assert refused.status_code == 503, refused.text
        assert refused.json()["error_code"] == "NOT_LEADER"
        assert refused.json()["leader_http_address"].rstrip("/") == leader.url
        threads = [threading.Thread(target=_with_clients, args=(_produce, group, journal))]
        threads += [threading.Thread(target=_with_clients,
                                    args=(_consume, group, journal, 5 + number))
                    for number in range(CONSUMER_COUNT)]
        for thread in threads:
            thread.start()
        wait_for(lambda: len(journal.acked_bodies) >= MESSAGE_COUNT // 3, 60,
                 "a third acked before the kill")
        with journal.lock:
            held = {origin for origin in journal.deliveries if origin not in journal.acks}
        group.kill(leader.node_id)
        survivor = group.wait_new_leader(leader)
        deadline_s = time.monotonic() + RUN_S

        def finished() -> bool:
            """Every body produced and acked (or its ack's answer lost), and the group
            holds no message ready or in flight (none whose ack was lost comes back)."""
            with journal.lock:
                if len(journal.produced) < MESSAGE_COUNT or journal.unacked_bodies():
                    return False
            counts = _group_counts(survivor)
            return counts is not None and counts["ready"] == counts["in_flight"] == 0

        done = False
        while not done and time.monotonic() < deadline_s:
            time.sleep(0.2)
            done = finished()
        journal.stop.set()
        for thread in threads:
            thread.join(30)
        with journal.lock:
            consumption_journal.check(journal)
            assert done, f"not all consumed within {RUN_S} s: {_group_counts(survivor)}"
            assert held, "no message was in flight at the kill"
            back = [origin for origin in held if len(journal.deliveries[origin]) > 1]
            assert back, "no message held at the kill was delivered again"
        counts = _group_counts(survivor)
        assert counts is not None and counts["acked"] >= MESSAGE_COUNT, counts
    finally:
        journal.stop.set()
        for thread in threads:
            thread.join(30)
        group.stop_all()

