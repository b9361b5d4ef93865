"""DLedger mode end to end: 3 real `twinlog serve` processes on loopback, ports bound by the
test and passed as descriptors (tests/support/dledger_group.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.dledger_group import ROOT, DLedgerGroup, Member, wait_for
from tests.support.fifo_groups import RECEIVE, first_fifo_receive, receive, wait_replica_holds
from tests.support.processes import pause, resume

pytestmark = pytest.mark.processes


@pytest.fixture(scope="module")
def group(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DLedgerGroup]:
    started = DLedgerGroup(tmp_path_factory.mktemp("dledger"))
    try:
        started.start_all()
        yield started
    finally:
        started.stop_all()


def _followers(group: DLedgerGroup, leader: Member) -> list[Member]:
    return [member for member in group.members.values() if member is not leader]


def _bodies(member: Member, topic: str, queue_count: int = 4) -> list[str]:
    bodies = []
    for queue_id in range(queue_count):
        response = member.client.get(f"/v1/topics/{topic}/queues/{queue_id}/messages",
                                     params={"offset": 0, "max_messages": 500,
                                             "body_encoding": "utf8"})
        if response.status_code == 404:  # a topic this member's metadata does not hold yet
            continue
        assert response.status_code == 200, response.text
        bodies += [message["body"] for message in response.json()["messages"]]
    return sorted(bodies)


def _hand_over(group: DLedgerGroup, leader: Member, target: Member) -> None:
    """Transfer leadership to `target` and wait until every member names it. A loaded host
    may make a transfer end NOT_CAUGHT_UP or TIMEOUT (409, still the leader): asked again,
    bounded."""
    for _ in range(5):
        handed = leader.client.post("/admin/dledger/transfer-leadership",
                                    json={"target_id": target.node_id}, timeout=30)
        if handed.status_code == 200:
            assert handed.json()["status"] == "OK"
            # Views are published once per host round: poll until all name the target.
            wait_for(lambda: group.leader() is target, what=f"{target.node_id} leads")
            return
        assert handed.status_code == 409, handed.text
        assert handed.json()["transfer_status"] in ("NOT_CAUGHT_UP", "TIMEOUT"), handed.text
    raise AssertionError(f"the transfer to {target.node_id} was refused 5 times")


def test_the_leader_takes_produces_and_answers_once_committed(group: DLedgerGroup) -> None:
    """A leader is elected; single (JSON and raw) and batch produces answer 201 PUT_OK; the
    messages are readable on the leader at once and on every follower after the commit."""
    leader = group.wait_leader()
    single = leader.client.post("/v1/topics/Orders/messages", json={"body": "one"})
    assert single.status_code == 201, single.text
    assert single.json()["status"] == "PUT_OK"
    raw = leader.client.post("/v1/topics/Orders/messages", content=b"two",
                             headers={"content-type": "application/octet-stream"})
    assert raw.status_code == 201, raw.text
    batch = leader.client.post("/v1/topics/Orders/messages:batch",
                               json={"messages": [{"body": f"b{n}"} for n in range(5)]})
    assert batch.status_code == 201, batch.text
    assert [result["status"] for result in batch.json()["results"]] == ["PUT_OK"] * 5
    expected = sorted(["one", "two", *[f"b{n}" for n in range(5)]])
    # A committed record reaches the consume queues by the dispatch thread, just after.
    wait_for(lambda: _bodies(leader, "Orders") == expected, what="the leader reads them")
    view = leader.dledger()
    for follower in _followers(group, leader):
        wait_for(lambda f=follower: f.dledger()["committed_index"] >= view["committed_index"],
                 what=f"{follower.node_id} committed")
        wait_for(lambda f=follower: _bodies(f, "Orders") == expected,
                 what=f"{follower.node_id} reads the committed messages")


def test_a_follower_answers_503_naming_the_leader(group: DLedgerGroup) -> None:
    """A follower refuses a produce (single and batch) and a metadata write with 503
    NOT_LEADER, naming the leader's id and HTTP address, with Retry-After."""
    leader = group.wait_leader()
    follower = _followers(group, leader)[0]
    answers = [
        follower.client.post("/v1/topics/Orders/messages", json={"body": "x"}),
        follower.client.post("/v1/topics/Orders/messages:batch",
                             json={"messages": [{"body": "x"}]}),
        follower.client.post("/v1/topics", json={"name": "NewTopic"}),
    ]
    for answer in answers:
        assert answer.status_code == 503, answer.text
        problem = answer.json()
        assert problem["error_code"] == "NOT_LEADER"
        assert (problem["leader_id"], problem["leader_http_address"]) == (
            leader.node_id, leader.url)
        assert answer.headers["retry-after"] == "1"
    assert answers[0].json()["put_status"] == "SERVICE_NOT_AVAILABLE"


def test_admin_dledger_shows_the_member_and_its_peers(group: DLedgerGroup) -> None:
    """GET /admin/dledger: self id, role, term, leader id and addresses, committed and end
    index, and on the leader per peer match index, lags, in-flight pushes, last contact."""
    leader = group.wait_leader()
    assert leader.client.post("/v1/topics/View/messages", json={"body": "v"}).status_code == 201
    follower = _followers(group, leader)[0]

    def caught_up() -> bool:
        peers = leader.dledger()["peers"]
        return all(peer["lag_entries"] == 0 and peer["lag_bytes"] == 0 for peer in peers)

    wait_for(caught_up, what="every peer at the leader's end")
    view = leader.dledger()
    assert view["self_id"] == leader.node_id and view["role"] == "LEADER"
    assert view["term"] >= 1 and view["leader_id"] == leader.node_id
    assert view["leader_http_address"] == leader.url
    assert view["leader_dledger_address"] == f"127.0.0.1:{leader.dledger_port}"
    assert view["committed_index"] == view["end_index"] >= 2  # the no-op and a message
    assert view["committed_offset"] == view["max_offset"] > 0
    assert (view["base_index"], view["min_offset"], view["retention_blocked_offset"]) == (
        0, 0, None)
    ready = leader.client.get("/readyz").json()
    assert (ready["ready"], ready["role"]) == (True, "LEADER")
    assert follower.client.get("/readyz").json()["role"] == "FOLLOWER"
    assert sorted(peer["peer_id"] for peer in view["peers"]) == sorted(
        member.node_id for member in _followers(group, leader))
    for peer in view["peers"]:
        assert peer["match_index"] == view["end_index"]
        assert peer["inflight_pushes"] >= 0 and peer["dispatcher_state"] is not None
        assert 0 <= peer["last_contact_ms_ago"] < 5000
    seen: dict[str, Any] = follower.dledger()
    assert (seen["role"], seen["leader_id"], seen["term"]) == ("FOLLOWER", leader.node_id,
                                                               view["term"])
    assert all(peer["match_index"] is None for peer in seen["peers"])


def test_reads_stop_at_the_committed_position(tmp_path: Path) -> None:
    """With both followers paused, a produce on the leader answers 202 COMMIT_INDETERMINATE
    after the quorum deadline; its record is in the leader's log past the committed offset,
    and no read shows it: not a queue read, a look-up by message id or key, or a snapshot."""
    group = DLedgerGroup(tmp_path, dledger_quorum_deadline_ms=500,
                         dledger_election_timeout_ms=3000, dledger_heartbeat_interval_ms=150)
    try:
        group.start_all()
        leader = group.wait_leader()
        assert leader.client.post("/v1/topics/Held/messages",
                                  json={"body": "committed"}).status_code == 201
        followers = _followers(group, leader)
        for follower in followers:
            assert follower.process is not None
            pause(follower.process.pid)
        try:
            answer = leader.client.post("/v1/topics/Held/messages",
                                        json={"body": "held", "keys": ["held-key"]})
            assert answer.status_code == 202, (answer.text, leader.dledger())
            assert answer.json()["status"] == "COMMIT_INDETERMINATE"
            # Nor by its id or its key: every read stops at the committed position.
            by_id = leader.client.get(f"/v1/messages/{answer.json()['msg_id']}")
            assert by_id.status_code == 404, by_id.text
            by_key = leader.client.get("/v1/topics/Held/messages",
                                       params={"key": "held-key"})
            assert by_key.status_code == 200 and by_key.json()["messages"] == [], by_key.text
            snapshot = leader.client.post("/admin/snapshots")
            assert snapshot.status_code == 201, snapshot.text
            assert snapshot.json()["range_to"] == leader.dledger()["committed_offset"]
            assert snapshot.json()["topics"] == {"Held": 1}
            view = leader.dledger()
            assert view["end_index"] > view["committed_index"]
            assert view["max_offset"] > view["committed_offset"]
            wait_for(lambda: _bodies(leader, "Held") == ["committed"],
                     what="the committed message read, the held one not")
            assert leader.dledger()["end_index"] > leader.dledger()["committed_index"]
        finally:
            for follower in followers:
                assert follower.process is not None
                resume(follower.process.pid)
    finally:
        group.stop_all()


def test_leadership_transfer_hands_over_or_says_why_not(group: DLedgerGroup) -> None:
    """POST /admin/dledger/transfer-leadership: to a caught-up follower 200 OK and it leads;
    to a stranger 409 NOT_MEMBER; asked of a follower 503 NOT_LEADER naming the leader."""
    leader = group.wait_leader()
    target = _followers(group, leader)[0]
    stranger = leader.client.post("/admin/dledger/transfer-leadership",
                                  json={"target_id": "n9"})
    assert stranger.status_code == 409, stranger.text
    assert (stranger.json()["error_code"], stranger.json()["transfer_status"]) == (
        "TRANSFER_REFUSED", "NOT_MEMBER")
    asked_of_follower = target.client.post("/admin/dledger/transfer-leadership",
                                           json={"target_id": leader.node_id})
    assert asked_of_follower.status_code == 503, asked_of_follower.text
    assert asked_of_follower.json()["leader_id"] == leader.node_id
    _hand_over(group, leader, target)
    assert target.client.post("/v1/topics/Moved/messages",
                              json={"body": "m"}).status_code == 201


def _metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not in /metrics")


def test_diff_ha_and_metrics_show_the_group(group: DLedgerGroup) -> None:
    """/admin/diff keeps its master fields on the leader (peers as slaves, epoch = term) and
    lists every peer; /admin/ha answers; /metrics has term, role, lag per peer, elections."""
    leader = group.wait_leader()
    assert leader.client.post("/v1/topics/Diff/messages", json={"body": "d"}).status_code == 201
    followers = _followers(group, leader)

    def caught_up() -> bool:
        master = leader.client.get("/admin/diff").json()["master"]
        return master["max_diff_bytes"] == 0 and master["in_sync_slave_count"] == 2

    wait_for(caught_up, what="both peers caught up in /admin/diff")
    diff = leader.client.get("/admin/diff").json()
    master = diff["master"]
    assert diff["role"] == "LEADER" and master["epoch"] == diff["dledger"]["term"]
    assert master["slaves_needed"] == 1
    assert sorted(slave["slave_id"] for slave in master["slaves"]) == sorted(
        follower.node_id for follower in followers)
    assert all(slave["ack_offset"] == master["master_max_offset"] for slave in master["slaves"])
    assert len(diff["dledger"]["peers"]) == 2
    seen = followers[0].client.get("/admin/diff").json()
    assert (seen["role"], seen["master"], seen["dledger"]["leader_id"]) == (
        "FOLLOWER", None, leader.node_id)
    ha = leader.client.get("/admin/ha")
    assert ha.status_code == 200 and ha.json()["dledger"]["role"] == "LEADER"
    text = leader.client.get("/metrics").text
    assert _metric(text, "twinlog_dledger_term") == diff["dledger"]["term"]
    assert _metric(text, 'twinlog_dledger_role{role="LEADER"}') == 1
    assert _metric(text, 'twinlog_dledger_role{role="FOLLOWER"}') == 0
    assert _metric(text, "twinlog_dledger_elections_total") >= 1
    for follower in followers:
        assert _metric(text, f'twinlog_dledger_peer_lag_entries{{peer="{follower.node_id}"}}') == 0
        assert _metric(text, f'twinlog_dledger_peer_lag_bytes{{peer="{follower.node_id}"}}') == 0
    assert _metric(text, "twinlog_store_put_bytes_total") > 0
    assert leader.client.get("/admin/store").json()["put_counts"]["PUT_OK"] >= 1
    follower_text = followers[0].client.get("/metrics").text
    assert _metric(follower_text, 'twinlog_dledger_role{role="FOLLOWER"}') == 1
    assert "twinlog_dledger_peer_lag_entries{" not in follower_text


def _ha_status(member: Member) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("TWINLOG_")}
    return subprocess.run([sys.executable, "-m", "app.cli.main", "ha", "status", "--url",
                           member.url], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=60)


def test_ha_status_prints_the_member_view(group: DLedgerGroup) -> None:
    """`twinlog ha status` in DLedger mode (it printed nothing and exited 0): on the leader
    its role, term and a row per peer with its match index, lag and in sync; on a follower
    its leader and the peers it knows of; exit 0 while the group is healthy."""
    leader = group.wait_leader()
    assert leader.client.post("/v1/topics/HaStatus/messages", json={"body": "s"}).status_code \
        == 201
    followers = _followers(group, leader)
    term = leader.dledger()["term"]

    lines: list[str] = []

    def leader_table() -> bool:
        done = _ha_status(leader)
        lines[:] = done.stdout.splitlines()
        rows = [line.split() for line in lines[2:]]
        return done.returncode == 0 and len(rows) == 2 and all(
            row[-1] == "yes" and row[6] == "0" for row in rows)

    wait_for(leader_table, timeout_s=30, what="both peers in sync in ha status")
    assert lines[0].startswith(f"LEADER {leader.node_id} of group default, term {term}, "
                               "in sync 2 of 1 needed, committed index "), lines
    assert lines[1].split() == ["PEER", "DLEDGER_ADDRESS", "HTTP_ADDRESS", "STATE",
                                "MATCH_INDEX", "LAG_ENTRIES", "LAG_BYTES", "CONTACT_MS_AGO",
                                "IN_SYNC"]
    assert sorted(line.split()[0] for line in lines[2:]) == sorted(
        follower.node_id for follower in followers)
    seen = _ha_status(followers[0])
    assert seen.returncode == 0, seen.stderr
    first, _, *rows = seen.stdout.splitlines()
    assert first.startswith(f"FOLLOWER {followers[0].node_id} of group default, term {term}, "
                            f"leader {leader.node_id} ({leader.url})"), first
    assert [row.split()[:2] for row in rows if "(leader)" in row] == [[leader.node_id,
                                                                       "(leader)"]]


def _has_topic(member: Member, topic: str) -> bool:
    return member.client.get(f"/v1/topics/{topic}").status_code == 200


def test_metadata_follows_the_leader(group: DLedgerGroup) -> None:
    """Topics, groups and consumer offsets written on the leader reach every follower (records
    of the log); after a hand-over the followers (the old leader among them) get the new
    leader's changes, and their metadata sync (what the log does not carry) follows it."""
    leader = group.wait_leader()
    created = leader.client.post("/v1/topics", json={"name": "Meta", "write_queue_count": 2,
                                                     "read_queue_count": 2})
    assert created.status_code == 201, created.text
    assert leader.client.post("/v1/topics/Meta/messages",
                              json={"body": "m", "queue_id": 1}).status_code == 201
    # An offset commit may not pass the queue's end, which the dispatch moves just after.
    wait_for(lambda: _bodies(leader, "Meta", queue_count=2) == ["m"], what="dispatched")
    committed = leader.client.put("/v1/groups/billing/offsets/Meta/queues/1",
                                  json={"offset": 1})
    assert committed.status_code == 200, committed.text
    backoff = {"policy": "exponential", "initial_ms": 1_500, "multiplier": 1.5,
               "max_ms": 90_000}
    patched = leader.client.patch("/v1/groups/billing", json={"backoff": backoff})
    assert patched.status_code == 200, patched.text
    followers = _followers(group, leader)

    def offsets_of(member: Member) -> list[Any]:
        answer = member.client.get("/v1/groups/billing/offsets")
        return answer.json()["offsets"] if answer.status_code == 200 else []

    for follower in followers:
        wait_for(lambda f=follower: _has_topic(f, "Meta"), what=f"{follower.node_id} topic")
        wait_for(lambda f=follower: [(o["topic"], o["queue_id"], o["offset"])
                                     for o in offsets_of(f)] == [("Meta", 1, 1)],
                 what=f"{follower.node_id} consumer offset")
        # The group's backoff comes with its group.put record (after the commit's), as the
        # master decides with it once elected.
        wait_for(lambda f=follower: f.client.get("/v1/groups/billing").json()["backoff"]
                 == backoff, what=f"{follower.node_id} backoff")
        sync = follower.dledger()["metadata_sync"]
        assert sync["master_http_address"] == leader.url
    assert leader.dledger()["metadata_sync"] is None
    target = followers[0]
    _hand_over(group, leader, target)
    assert target.client.post("/v1/topics", json={"name": "Meta2"}).status_code == 201
    assert target.client.patch("/v1/groups/billing", json={"backoff": None}).status_code == 200
    for member in _followers(group, target):
        wait_for(lambda m=member: _has_topic(m, "Meta2"), what=f"{member.node_id} Meta2")
        wait_for(lambda m=member: m.client.get("/v1/groups/billing").json()["backoff"] is None,
                 what=f"{member.node_id} backoff back to the broker's")
        assert member.dledger()["metadata_sync"]["master_http_address"] == target.url


def test_a_fifo_group_s_flag_and_states_reach_every_follower(group: DLedgerGroup) -> None:
    """A FIFO group delivers m0 alone; every follower holds the flag and the leader's queue
    states, FIFO. After a hand-over the new leader keeps the queue in order: nothing while m0
    is in flight, m1 alone once m0 is acked (with the handle the old leader gave)."""
    leader = group.wait_leader()
    first = first_fifo_receive(leader.client, "Ordered", "FifoTopic")
    followers = _followers(group, leader)
    for follower in followers:
        wait_replica_holds(leader.client, follower.client, "Ordered", fifo=True,
                           what=follower.node_id)
    target = followers[0]
    _hand_over(group, leader, target)
    # A new leader serves receives once its take-over point is dispatched (503 before).
    answers: list[Any] = []
    wait_for(lambda: answers.append(target.client.post(
        "/v1/groups/Ordered/topics/FifoTopic/messages:receive", json=RECEIVE)) or
        answers[-1].status_code == 200, what="receives on the new leader")
    assert answers[-1].json()["messages"] == []  # m0 in flight holds the queue
    acked = target.client.post("/v1/groups/Ordered/topics/FifoTopic/messages:ack",
                               json={"receipt_handles": [first["receipt_handle"]]})
    assert acked.status_code == 200, acked.text
    bodies = [message["body"] for message in receive(target.client, "Ordered", "FifoTopic")]
    assert bodies == ["m1"]


def test_an_idempotent_retry_on_the_next_leader_is_replayed(group: DLedgerGroup) -> None:
    """A produce answered by one leader, retried with the same Idempotency-Key on the next
    leader after a hand-over, is replayed there (the new leader refilled its window from the
    committed log), and the topic holds one copy."""
    leader = group.wait_leader()
    first = leader.client.post("/v1/topics/Once/messages", json={"body": "once"},
                               headers={"idempotency-key": "order-1"})
    assert first.status_code == 201, first.text
    target = _followers(group, leader)[0]
    wait_for(lambda: _bodies(target, "Once") == ["once"], what="the message on the target")
    _hand_over(group, leader, target)

    def retried() -> bool:
        answer = target.client.post("/v1/topics/Once/messages", json={"body": "once"},
                                    headers={"idempotency-key": "order-1"})
        assert answer.status_code in (201, 503), answer.text
        if answer.status_code == 503:  # not yet the leader in its own view
            return False
        assert answer.headers.get("idempotent-replayed") == "true", answer.text
        assert answer.json()["msg_id"] == first.json()["msg_id"]
        return True

    wait_for(retried, what="the retry answered by the new leader")
    wait_for(lambda: _bodies(target, "Once") == ["once"], what="one copy")
