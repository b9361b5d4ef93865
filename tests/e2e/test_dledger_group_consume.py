"""Group consumption in DLedger mode with 3 real `twinlog serve` members
(tests/support/dledger_group.py): consumers of one group under a producer, and a kill -9 of
the leader in the middle. At least once at the end: every message the producer was answered
201 for is acked; an ack answered 200 (committed) means the message is never delivered
again; a message in flight comes back no earlier than its invisible time, across the kill
too; followers answer 503 NOT_LEADER naming the leader."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.dledger_group import DLedgerGroup, wait_for

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
class Journal:
    """What the clients were answered, with when (this host's clock, as the brokers')."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    produced: set[str] = field(default_factory=set)  # answered 201
    # body -> [(answered at ms, delivery attempt, invisible until ms)]
    deliveries: dict[str, list[tuple[float, int, int]]] = field(
        default_factory=lambda: defaultdict(list))
    acked_at_ms: dict[str, float] = field(default_factory=dict)  # the first ack answered 200
    not_leader_answers: int = 0
    leader_url: str | None = None
    stop: threading.Event = field(default_factory=threading.Event)


def _post(group: DLedgerGroup, path: str, document: dict[str, Any], journal: Journal,
          clients: dict[str, httpx.Client]) -> httpx.Response | None:
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
        response = client.post(path, json=document)
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
        response = _post(group, "/v1/topics/Work/messages", {"body": body}, journal, clients)
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
                journal.deliveries[message["body"]].append(
                    (answered_ms, message["delivery_attempt"], message["invisible_until_ms"]))
                count += 1
                if message["delivery_attempt"] > 1 or count % holds_every:
                    to_ack.append(message)
        if not to_ack:
            continue
        answer = _post(group, PATH + ":ack", {
            "receipt_handles": [message["receipt_handle"] for message in to_ack]}, journal,
            clients)
        if answer is None or answer.status_code not in (200, 207):
            continue
        acked_ms = time.time() * 1000
        with journal.lock:
            for message, result in zip(to_ack, answer.json()["results"], strict=True):
                if result["status"] == 200:
                    journal.acked_at_ms.setdefault(message["body"], acked_ms)


def _check(journal: Journal) -> None:
    missing = sorted(journal.produced - set(journal.acked_at_ms))
    assert not missing, f"{len(missing)} produced messages never acked: {missing[:10]}"
    for body, deliveries in journal.deliveries.items():
        acked_ms = journal.acked_at_ms.get(body)
        late = [item for item in deliveries if acked_ms is not None and item[0] > acked_ms]
        assert not late, f"{body} delivered again after its ack was answered 200: {deliveries}"
        ordered = sorted(deliveries, key=lambda item: item[1])
        for before, after in zip(ordered, ordered[1:], strict=False):
            assert after[0] >= before[2] - 50, \
                f"{body} came back before its invisible time: {deliveries}"


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
        wait_for(lambda: len(journal.acked_at_ms) >= MESSAGE_COUNT // 3, 60,
                 "a third acked before the kill")
        with journal.lock:
            held = {body for body, deliveries in journal.deliveries.items()
                    if body not in journal.acked_at_ms}
        group.kill(leader.node_id)
        survivor = group.wait_new_leader(leader)
        deadline_s = time.monotonic() + RUN_S

        def finished() -> bool:
            with journal.lock:
                return len(journal.produced) == MESSAGE_COUNT and \
                    journal.produced <= set(journal.acked_at_ms)

        while not finished() and time.monotonic() < deadline_s:
            time.sleep(0.2)
        journal.stop.set()
        for thread in threads:
            thread.join(30)
        with journal.lock:
            _check(journal)
            assert held, "no message was in flight at the kill"
            back = [body for body in held if len(journal.deliveries[body]) > 1]
            assert back, "no message held at the kill was delivered again"
        [counts] = survivor.client.get("/v1/groups/crowd/lag").json()["consumption"]
        assert counts["acked"] >= MESSAGE_COUNT, counts
    finally:
        journal.stop.set()
        for thread in threads:
            thread.join(30)
        group.stop_all()

