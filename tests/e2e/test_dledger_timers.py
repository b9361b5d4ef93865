"""Delayed messages in DLedger mode (3 real `twinlog serve` members,
tests/support/dledger_group.py): the leader delivers them; across a kill -9 of the leader
while they come due, every member ends with each due message in its topic exactly once, none
before its due time, none lost."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.support.dledger_group import DLedgerGroup, Member, wait_for

pytestmark = pytest.mark.processes

# Elections only when the test kills a member (see tests/e2e/test_dledger_state.py).
QUIET = {"dledger_election_timeout_ms": 1500, "default_queue_count": 1}
MESSAGE_COUNT = 60


def _produce_delayed(leader: Member, topic: str, count: int) -> dict[str, int]:
    """`count` delayed messages due over about 4 s (timer lanes and level 1): body -> due."""
    due: dict[str, int] = {}
    for number in range(count):
        delay: dict[str, int] = ({"delay_level": 1} if number % 5 == 0
                                 else {"delay_ms": 400 + 60 * number})
        response = leader.client.post(f"/v1/topics/{topic}/messages",
                                      json={"body": f"m-{number}", "keys": [f"k-{number}"],
                                            **delay})
        assert response.status_code == 201, response.text
        due[f"m-{number}"] = response.json()["deliver_at_ms"]
    return due


def _delivered(member: Member, topic: str) -> list[dict[str, Any]]:
    response = member.client.get(f"/v1/topics/{topic}/queues/0/messages",
                                 params={"offset": 0, "max_messages": 500,
                                         "body_encoding": "utf8"})
    if response.status_code == 404:
        return []
    assert response.status_code == 200, response.text
    messages: list[dict[str, Any]] = response.json()["messages"]
    return messages


def _check_exactly_once_never_early(member: Member, messages: list[dict[str, Any]],
                                    due: dict[str, int]) -> None:
    counts = Counter(message["body"] for message in messages)
    twice = sorted(body for body, count in counts.items() if count > 1)
    assert twice == [], f"{member.node_id} delivered twice: {twice}"
    assert set(counts) == set(due), f"{member.node_id} lost {sorted(set(due) - set(counts))}"
    for message in messages:
        body = message["body"]
        assert message["properties"]["TWINLOG_DUE_MS"] == str(due[body])
        assert message["store_timestamp_ms"] >= due[body], f"{body} delivered early"
        assert message["keys"] == [f"k-{body[2:]}"]


def test_delayed_messages_across_a_dledger_leader_kill_9(tmp_path: Path) -> None:
    """60 delayed messages; once the leader has delivered a third of them, kill -9 it: the new
    leader delivers the rest from its committed log, each once (what the old leader delivered
    and the group committed is not delivered again), none early; the killed member, started
    again, holds the same queue, and so does every other member."""
    group = DLedgerGroup(tmp_path, **QUIET)
    try:
        group.start_all()
        leader = group.wait_leader()
        due = _produce_delayed(leader, "Later", MESSAGE_COUNT)
        wait_for(lambda: len(_delivered(leader, "Later")) >= MESSAGE_COUNT // 3, 30,
                 "a third delivered by the first leader")
        group.kill(leader.node_id)
        survivor = group.wait_new_leader(leader)
        wait_for(lambda: len(_delivered(survivor, "Later")) >= MESSAGE_COUNT, 30,
                 f"every message delivered by {survivor.node_id}")
        _check_exactly_once_never_early(survivor, _delivered(survivor, "Later"), due)
        timers = survivor.client.get("/admin/timers").json()
        assert timers["scheduler_active"], timers
        assert timers["delivered_total"] == MESSAGE_COUNT and timers["pending_total"] == 0
        group.start(leader.node_id)
        final = _delivered(survivor, "Later")
        for member in group.members.values():
            wait_for(lambda m=member: _delivered(m, "Later") == final, 30,
                     f"{member.node_id}'s queue equal to the leader's")
            _check_exactly_once_never_early(member, _delivered(member, "Later"), due)
            view = member.client.get("/admin/timers").json()
            assert view["delivered_total"] == MESSAGE_COUNT, (member.node_id, view)
            assert view["scheduler_active"] is (member is survivor), (member.node_id, view)
    finally:
        group.stop_all()


def test_a_dledger_leader_cancels_a_delayed_message(tmp_path: Path) -> None:
    """A cancel on the leader is a committed marker: the message is never delivered on any
    member, and the one produced next to it is."""
    group = DLedgerGroup(tmp_path, **QUIET)
    try:
        group.start_all()
        leader = group.wait_leader()
        kept, cancelled = (leader.client.post("/v1/topics/C/messages",
                                              json={"body": body, "delay_ms": 1500}).json()
                           for body in ("kept", "cancelled"))
        answer = leader.client.delete(f"/v1/messages/{cancelled['msg_id']}")
        assert answer.status_code == 200, answer.text
        for member in group.members.values():
            wait_for(lambda m=member: [x["body"] for x in _delivered(m, "C")] == ["kept"], 20,
                     f"{member.node_id} delivered the kept message")
            view = member.client.get("/admin/timers").json()
            assert view["dropped_totals"].get("cancelled") == 1 and view["pending_total"] == 0, view
        assert kept["deliver_at_ms"] <= _delivered(leader, "C")[0]["store_timestamp_ms"]
    finally:
        group.stop_all()
