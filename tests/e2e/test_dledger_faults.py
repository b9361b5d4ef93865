"""DLedger mode under faults, with 3 real `twinlog serve` processes on loopback
(tests/support/dledger_group.py): kill -9 of the leader under 16 producers, and a partition
through TCP proxies that isolates the leader. Every 201 PUT_OK answer is recorded (its message
id and commit-log offset) and must be on every member afterwards; 202 answers are
indeterminate and may go either way."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.brokers import log_bytes
from tests.support.dledger_group import DLedgerGroup, Member, ProxiedGroup, wait_for
from tests.support.processes import terminate_all

pytestmark = pytest.mark.processes

TOPIC = "Faults"
QUEUE_COUNT = 4
PRODUCERS = 16
CONVERGE_S = 30.0
TIMED_OUT = 0  # no answer within the client's timeout
PROBES = 3  # produces the isolation test sends to the isolated leader itself
PROBE_TIMEOUT_S = 4.0  # over the quorum deadline (2.5 s), as the producers' client


@dataclass
class Producers:
    """PRODUCERS threads writing numbered bodies to `url` (the test moves it to each new
    leader); every 201 is recorded with its message id and commit-log offset."""

    url: str
    acked: dict[str, tuple[str, int]] = field(default_factory=dict)
    # (url, monotonic time the request was sent, status code or TIMED_OUT) of every request
    answers: list[tuple[str, float, int]] = field(default_factory=list)
    stop_event: threading.Event = field(default_factory=threading.Event)
    threads: list[threading.Thread] = field(default_factory=list)

    def start(self) -> None:
        self.threads = [threading.Thread(target=self._run, args=(number,))
                        for number in range(PRODUCERS)]
        for thread in self.threads:
            thread.start()

    def stop(self) -> None:
        self.stop_event.set()
        for thread in self.threads:
            thread.join(15)
        assert not any(thread.is_alive() for thread in self.threads)

    def acked_count(self) -> int:
        return len(self.acked)

    def _run(self, number: int) -> None:
        sequence = 0
        # Bounded: a killed member's port still accepts into its backlog and never answers;
        # over the quorum deadline (2.5 s) so an isolated leader's 202 comes back.
        with httpx.Client(timeout=4.0) as client:
            while not self.stop_event.is_set():
                url, body = self.url, f"p{number:02d}-{sequence:06d}"
                sequence += 1
                sent_at = time.monotonic()
                try:
                    response = client.post(f"{url}/v1/topics/{TOPIC}/messages",
                                           json={"body": body})
                except httpx.TimeoutException:
                    self.answers.append((url, sent_at, TIMED_OUT))
                    continue
                except httpx.HTTPError:
                    time.sleep(0.05)
                    continue
                self.answers.append((url, sent_at, response.status_code))
                if response.status_code == 201:
                    result = response.json()
                    self.acked[body] = (result["msg_id"], result["commit_log_offset"])
                else:
                    time.sleep(0.02)  # 202 indeterminate, 503 not the leader, 429 full


def _stored(member: Member) -> dict[str, tuple[str, int]]:
    """Every readable message of the topic on `member`: body -> (msg id, commit-log offset)."""
    found: dict[str, tuple[str, int]] = {}
    for queue_id in range(QUEUE_COUNT):
        offset = 0
        while True:
            response = member.client.get(f"/v1/topics/{TOPIC}/queues/{queue_id}/messages",
                                         params={"offset": offset, "max_messages": 500,
                                                 "body_encoding": "utf8"})
            if response.status_code == 404:  # the topic has not reached this member yet
                return {}
            assert response.status_code == 200, response.text
            page: dict[str, Any] = response.json()
            for message in page["messages"]:
                found[message["body"]] = (message["msg_id"], message["commit_log_offset"])
            if page["next_offset"] >= page["max_offset"]:
                break
            offset = page["next_offset"]
    return found


def _missing(member: Member, acked: dict[str, tuple[str, int]]) -> dict[str, Any]:
    stored = _stored(member)
    return {body: (ids, stored.get(body)) for body, ids in acked.items()
            if stored.get(body) != ids}


def _wait_all_acked_on(members: list[Member], acked: dict[str, tuple[str, int]]) -> None:
    for member in members:
        _wait_acked_on(member, acked)


def _wait_acked_on(member: Member, acked: dict[str, tuple[str, int]]) -> None:
    missing: dict[str, Any] = {}

    def present() -> bool:
        missing.clear()
        missing.update(_missing(member, acked))
        return not missing

    try:
        wait_for(present, CONVERGE_S, f"every 201 readable on {member.node_id}")
    except AssertionError:
        sample = dict(list(missing.items())[:5])
        raise AssertionError(f"{len(missing)} of {len(acked)} acknowledged messages missing "
                             f"or different on {member.node_id}: {sample}") from None


def _converged(group: DLedgerGroup, leader: Member) -> bool:
    """Every member follows `leader` and holds its whole log, committed."""
    views = [member.dledger() for member in group.members.values()]
    ends = {(view["end_index"], view["committed_index"], view["committed_offset"])
            for view in views}
    return len(ends) == 1 and all(view["leader_id"] == leader.node_id for view in views) \
        and views[0]["end_index"] == views[0]["committed_index"]


def _assert_byte_identical(group: DLedgerGroup, leader: Member) -> None:
    """Converged members stopped cleanly hold the same commit-log bytes up to the committed
    end (bytes past it on a deposed leader were truncated away: not compared)."""
    wait_for(lambda: _converged(group, leader), CONVERGE_S, "the three logs equal and committed")
    committed_offset = leader.dledger()["committed_offset"]
    assert committed_offset
    # All at once, as teardown does: one after another, the last member waited seconds on
    # peers already gone (6 s of the kill test's 26 s on a loaded machine).
    terminate_all([(member.process, node_id, member.log)
                   for node_id, member in group.members.items()])
    logs = {node_id: log_bytes(member.data_dir, committed_offset)
            for node_id, member in group.members.items()}
    assert len(logs[leader.node_id]) == committed_offset
    assert len(set(logs.values())) == 1, {node_id: len(log) for node_id, log in logs.items()}


def test_kill_9_of_the_leader_under_16_producers_loses_no_put_ok(tmp_path: Path) -> None:
    """A leader killed with SIGKILL under 16 producers is replaced; every 201 (message id and
    offset) is readable on both survivors, and the restarted old leader converges to the
    same commit-log bytes up to the committed end."""
    group = DLedgerGroup(tmp_path, default_queue_count=QUEUE_COUNT)
    try:
        group.start_all()
        old = group.wait_leader()
        producers = Producers(old.url)
        producers.start()
        try:
            wait_for(lambda: producers.acked_count() >= 300, 60, "300 PUT_OK before the kill")
            group.kill(old.node_id)
            killed_at = producers.acked_count()
            leader = group.wait_new_leader(old)
            producers.url = leader.url
            wait_for(lambda: producers.acked_count() >= killed_at + 200, 60,
                     "200 more PUT_OK on the new leader")
        finally:
            producers.stop()
        survivors = [member for member in group.members.values() if member is not old]
        _wait_all_acked_on(survivors, producers.acked)
        group.start(old.node_id)
        _wait_all_acked_on([old], producers.acked)
        _assert_byte_identical(group, leader)
    finally:
        group.stop_all()


def test_an_isolated_leader_stops_acknowledging_and_follows_after_healing(
        tmp_path: Path) -> None:
    """A leader cut off from both peers by stalled proxies answers no 201 for what it takes
    after the cut (202 indeterminate, 503, or no answer in time); the other two elect a
    leader that takes the producers; after healing every 201 is on all three members, the
    old leader follows the new one, and the three commit logs are byte-identical up to the
    committed end."""
    group = ProxiedGroup(tmp_path, default_queue_count=QUEUE_COUNT)
    try:
        group.start_all()
        old = group.wait_leader()
        producers = Producers(old.url)
        producers.start()
        try:
            wait_for(lambda: producers.acked_count() >= 200, 60, "200 PUT_OK before the cut")
            group.isolate(old.node_id)
            cut_at = time.monotonic()
            # Sent to the old leader after the cut whatever the producers do (they may all be
            # waiting on requests sent before it until the new leader is known).
            producers.answers.extend(_probe(old.url, f"probe-{number}")
                                     for number in range(PROBES))
            leader = _new_leader_of_two(group, old)
            producers.url = leader.url
            before_new = producers.acked_count()
            wait_for(lambda: producers.acked_count() >= before_new + 200, 60,
                     "200 PUT_OK on the new leader")
        finally:
            producers.stop()
        # A request sent before the cut may have committed; one sent after it cannot reach a
        # quorum: its entry can only leave the old leader through a stalled proxy.
        late = [status for url, sent_at, status in producers.answers
                if url == old.url and sent_at > cut_at]
        assert late, "nothing was sent to the isolated leader after the cut"
        assert set(late) <= {202, 503, TIMED_OUT}, \
            f"the isolated leader answered {sorted(set(late))}"
        group.heal()
        _wait_all_acked_on(list(group.members.values()), producers.acked)
        wait_for(lambda: old.dledger()["leader_id"] == leader.node_id, CONVERGE_S,
                 "the old leader follows the new one")
        _assert_byte_identical(group, leader)
    finally:
        try:
            group.stop_all()
        finally:
            group.close_proxies()


def _probe(url: str, body: str) -> tuple[str, float, int]:
    """One produce to `url`: (url, when it was sent, its status or TIMED_OUT)."""
    sent_at = time.monotonic()
    with httpx.Client(timeout=PROBE_TIMEOUT_S) as client:
        try:
            response = client.post(f"{url}/v1/topics/{TOPIC}/messages", json={"body": body})
            status = response.status_code
        except httpx.TimeoutException:
            status = TIMED_OUT
    return url, sent_at, status


def _new_leader_of_two(group: DLedgerGroup, old: Member) -> Member:
    """The leader the two connected members agree on (the isolated one may still believe
    it leads: it is not asked)."""
    others = [member for member in group.members.values() if member is not old]
    found: list[Member] = []

    def elected() -> bool:
        views = [member.dledger() for member in others]
        leaders = {view["leader_id"] for view in views}
        roles = {view["self_id"]: view["role"] for view in views}
        if len(leaders) == 1 and (leader_id := leaders.pop()) in roles \
                and roles[leader_id] == "LEADER":
            found.append(group.members[leader_id])
            return True
        return False

    wait_for(elected, 20, "a leader elected by the two connected members")
    return found[-1]
