"""Replication: the commit rule (no Figure 8), truncation, fast back-up, catch-up from the
leader's base, the bounded pipeline and pending appends."""

from __future__ import annotations

from ha.dledger.actions import AppendStatus, ResetLog, Send, TruncateFrom
from ha.dledger.log import EntryLog
from ha.dledger.member import HardState, Role
from ha.dledger.messages import PushRequest, PushResponse, VoteResponse
from ha.dledger.node import DLedgerNode
from tests.ha.dledger.harness import WRITE_TYPES, Group, entries, make_node, unit_config

IDS = ["n0", "n1", "n2"]
FIVE = ["n0", "n1", "n2", "n3", "n4"]


def leader_with_log(terms: tuple[int, ...], term: int, ids: list[str]) -> DLedgerNode:
    """n0 elected by hand at `term + 1` over a log with the given entry terms."""
    node = make_node("n0", ids, log=EntryLog(entries=entries(*terms)), term=term)
    while node.role is Role.FOLLOWER:
        node.tick()
    actions = []
    for pre_vote in (True, False):
        for voter in ids[1:]:
            actions += node.receive(VoteResponse(voter, term + 1, True, pre_vote))
    node.persisted(max(a.write_id for a in actions if isinstance(a, WRITE_TYPES)))
    assert node.role is Role.LEADER and node.term == term + 1
    return node


def ack(node: DLedgerNode, peer_id: str, match_index: int) -> list[object]:
    return list(node.receive(PushResponse(peer_id, node.term, True, 0, match_index, 0, 0,
                                          match_index)))


def test_figure8_an_earlier_term_entry_never_commits_by_counting_copies() -> None:
    """Entry 2 of term 2 on a majority does not commit under a term-4 leader until the term-4
    no-op is on a majority too (Raft 5.4.2; DLedger #4 committed it)."""
    leader = leader_with_log((1, 2), term=3, ids=FIVE)
    assert leader.log.last_index == 3 and leader.log.term_at(3) == 4  # the no-op
    ack(leader, "n1", 2)
    ack(leader, "n2", 2)
    assert leader.commit_index == 0
    ack(leader, "n1", 3)
    assert leader.commit_index == 0
    ack(leader, "n2", 3)
    assert leader.commit_index == 3


def test_a_follower_truncates_its_divergent_suffix_at_the_first_conflict() -> None:
    """A follower holding uncommitted term-2 entries ends with the leader's log, truncated
    exactly at the first conflicting index."""
    leader = make_node("n0", IDS, log=EntryLog(entries=entries(1, 1, 3)), term=3)
    follower = make_node("n1", IDS, log=EntryLog(entries=entries(1, 1, 2, 2, 2)), term=2)
    other = make_node("n2", IDS, log=EntryLog(entries=entries(1, 1, 3)), term=3)
    group = Group([leader, follower, other])
    group.elect("n0")
    group.tick_all(5)
    assert follower.log.entries() == leader.log.entries()
    truncations = [a for s, a in group.actions if s == "n1" and isinstance(a, TruncateFrom)]
    assert [t.index for t in truncations] == [3]


def test_fast_backup_finds_the_match_in_one_probe_per_term() -> None:
    """A follower 40 entries ahead in a stale term costs the leader a few probes, not 40."""
    leader = make_node("n0", IDS, log=EntryLog(entries=entries(1, 1, 3)), term=3)
    follower = make_node("n1", IDS, log=EntryLog(entries=entries(1, 1, *[2] * 40)), term=2)
    other = make_node("n2", IDS, log=EntryLog(entries=entries(1, 1, 3)), term=3)
    group = Group([leader, follower, other])
    group.elect("n0")
    group.tick_all(5)
    assert follower.log.entries() == leader.log.entries()
    probes = [s for s in group.sends("n0", PushRequest)
              if s.target_id == "n1" and not s.message.entries]  # type: ignore[union-attr]
    assert len(probes) <= 6, len(probes)


def test_a_duplicated_or_stale_push_never_truncates() -> None:
    """A late copy of an old push over entries the follower already holds is acknowledged and
    removes nothing (hashicorp/raft#113), and it is never a stuck REPEATED_PUSH."""
    follower = make_node("n1", IDS, log=EntryLog(entries=entries(1, 1, 1, 1)), term=1)
    old_push = PushRequest("n0", 1, 1, 1, entries(1, 1, first_index=2), 0)
    for _ in range(2):
        actions = follower.receive(old_push)
        assert not any(isinstance(a, TruncateFrom) for a in actions)
        reply = [a for a in actions if isinstance(a, Send)][0].message
        assert isinstance(reply, PushResponse) and reply.success and reply.match_index == 3
    assert follower.log.last_index == 4


def test_a_follower_never_commits_past_the_prefix_a_push_proved() -> None:
    """With a stale suffix beyond the push, the follower's commit stops at the push's end."""
    follower = make_node("n1", IDS, log=EntryLog(entries=entries(1, 1, 2, 2)), term=3)
    follower.receive(PushRequest("n0", 3, 1, 1, (), 9))
    assert follower.commit_index == 1


def test_an_empty_follower_catches_up_from_the_leaders_first_retained_entry() -> None:
    """The leader's log starts after a base of 10 (retention); an empty follower resets to
    that base and receives every retained entry, even while the group is idle (DLedger #61)."""
    retained = EntryLog(base_index=10, base_term=1, entries=entries(1, 1, 1, first_index=11))
    leader = make_node("n0", IDS, log=retained, term=1)
    copy = EntryLog(base_index=10, base_term=1, entries=retained.entries())
    group = Group([leader, make_node("n1", IDS, term=1), make_node("n2", IDS, log=copy, term=1)])
    group.elect("n0")
    group.tick_all(10)
    follower = group.nodes["n1"]
    assert (follower.log.base_index, follower.log.entries()) == (10, leader.log.entries())
    assert follower.commit_index == leader.commit_index == 14
    assert any(isinstance(a, ResetLog) for s, a in group.actions if s == "n1")


def test_a_wiped_follower_is_found_and_refilled_by_heartbeats_alone() -> None:
    """A follower that lost its whole log (a new disk) is caught up with no new appends."""
    group = Group([make_node(i, IDS, seed=n) for n, i in enumerate(IDS)])
    group.elect("n0")
    for request_id in range(1, 6):
        group.append("n0", request_id, b"m%d" % request_id)
    group.tick_all(3)
    group.nodes["n2"] = make_node("n2", IDS, term=1)
    group.tick_all(20)
    assert group.nodes["n2"].log.entries() == group.nodes["n0"].log.entries()


def test_pushes_in_flight_per_peer_stay_within_the_window() -> None:
    """With followers silent, 100 appends put at most inflight_pushes_max pushes on each link."""
    config = unit_config(inflight_pushes_max=3, push_entries_max=2)
    group = Group([make_node(i, IDS, config=config, seed=n) for n, i in enumerate(IDS)])
    group.elect("n0")
    group.tick_all(3)
    group.cut = {("n1", "n0"), ("n2", "n0")}
    before = len(group.sends("n0", PushRequest))
    for request_id in range(100):
        group.append("n0", request_id, b"x")
    pushes = group.sends("n0", PushRequest)[before:]
    assert len(pushes) == 2 * 3


def test_pending_appends_are_bounded_and_time_out_indeterminate() -> None:
    """Past pending_appends_max an append is refused at once; a waiting one gets
    WAIT_QUORUM_ACK_TIMEOUT at its deadline (it may still commit later)."""
    config = unit_config(pending_appends_max=2, quorum_deadline_ticks=4)
    group = Group([make_node(i, IDS, config=config, seed=n) for n, i in enumerate(IDS)])
    group.elect("n0")
    group.tick_all(3)
    group.cut = {("n0", "n1"), ("n0", "n2")}
    for request_id in (1, 2, 3):
        group.append("n0", request_id, b"p")
    assert [(c.request_id, c.status) for c in group.completed] == [
        (3, AppendStatus.LEADER_PENDING_FULL)]
    group.tick("n0", 4)
    assert [c.status for c in group.completed[1:]] == [AppendStatus.WAIT_QUORUM_ACK_TIMEOUT] * 2


def test_an_append_to_a_follower_is_refused_and_one_to_the_leader_commits() -> None:
    """A follower answers NOT_LEADER; the leader answers OK once a quorum holds the entry."""
    group = Group([make_node(i, IDS, seed=n) for n, i in enumerate(IDS)])
    group.elect("n0")
    group.append("n1", 1, b"no")
    group.append("n0", 2, b"yes")
    group.deliver()
    assert [(c.request_id, c.status) for c in group.completed] == [
        (1, AppendStatus.NOT_LEADER), (2, AppendStatus.OK)]
    assert group.nodes["n0"].log.entry(group.completed[1].index).payload == b"yes"


def test_a_single_node_group_commits_on_its_own_write() -> None:
    """With one member the quorum is the leader's own durable write."""
    node = DLedgerNode("n0", ["n0"], unit_config(), __import__("random").Random(1),
                       HardState(), EntryLog())
    group = Group([node])
    group.elect("n0")
    group.append("n0", 1, b"solo")
    assert group.completed[0].status is AppendStatus.OK and node.commit_index == 2
