"""DLedger mode keeps the broker's state, not only its bytes (3 real `twinlog serve` members,
tests/support/dledger_group.py): a topic delete is a record every member applies; the
idempotency window forgets what a truncation removed; a member refuses to start with another
peer list than its group's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.dledger_group import DLedgerGroup, Member, wait_for

pytestmark = pytest.mark.processes


def _produce(member: Member, topic: str, body: str, **fields: Any) -> dict[str, Any]:
    response = member.client.post(f"/v1/topics/{topic}/messages", json={"body": body, **fields})
    assert response.status_code == 201, response.text
    document: dict[str, Any] = response.json()
    return document


def _queue(member: Member, topic: str, queue_id: int = 0) -> list[tuple[int, str]]:
    response = member.client.get(f"/v1/topics/{topic}/queues/{queue_id}/messages",
                                 params={"offset": 0, "max_messages": 100,
                                         "body_encoding": "utf8"})
    if response.status_code == 404:
        return []
    assert response.status_code == 200, response.text
    return [(m["queue_offset"], m["body"]) for m in response.json()["messages"]]


def _by_key(member: Member, topic: str, key: str) -> list[str]:
    response = member.client.get(f"/v1/topics/{topic}/messages",
                                 params={"key": key, "body_encoding": "utf8"})
    if response.status_code == 404:
        return []
    assert response.status_code == 200, response.text
    return sorted(m["body"] for m in response.json()["messages"])


def _new_leader(group: DLedgerGroup, old: Member) -> Member:
    found: list[Member] = []

    def elected() -> bool:
        leader = group.leader()
        if leader is not None and leader is not old:
            found.append(leader)
        return bool(found)

    wait_for(elected, 20, "a new leader among the others")
    return found[-1]


def test_a_topic_delete_applies_on_every_member_and_survives_a_leader_kill(
        tmp_path: Path) -> None:
    """4 keyed messages to D, DELETE, 2 more answered at queue offsets 0 and 1: every member's
    queue holds the 2 new ones only and its key index no deleted message; kill -9 the
    leader: the new leader serves the same, and its next produce gets queue offset 2."""
    group = DLedgerGroup(tmp_path, default_queue_count=1)
    try:
        group.start_all()
        leader = group.wait_leader()
        for number in range(4):
            _produce(leader, "D", f"old-{number}", keys=["k"])
        deleted = leader.client.delete("/v1/topics/D")
        assert deleted.status_code == 204, deleted.text
        assert [_produce(leader, "D", f"new-{number}", keys=["k"])["queue_offset"]
                for number in range(2)] == [0, 1]
        expected = [(0, "new-0"), (1, "new-1")]
        for member in group.members.values():
            wait_for(lambda m=member: _queue(m, "D") == expected, 15,
                     f"{member.node_id}'s queue holds the new incarnation only "
                     f"(it holds {_queue(member, 'D')})")
            assert _by_key(member, "D", "k") == ["new-0", "new-1"], member.node_id
        group.kill(leader.node_id)
        survivor = _new_leader(group, leader)
        assert _queue(survivor, "D") == expected
        assert _by_key(survivor, "D", "k") == ["new-0", "new-1"]
        assert _produce(survivor, "D", "after")["queue_offset"] == 2
        group.start(leader.node_id)
        final = [*expected, (2, "after")]
        for member in group.members.values():
            wait_for(lambda m=member: _queue(m, "D") == final, 30,
                     f"{member.node_id}'s queue equal to the others'")
    finally:
        group.stop_all()
