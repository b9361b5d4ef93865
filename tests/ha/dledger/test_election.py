"""Election: pre-vote, persisted votes, the up-to-date check, check-quorum step-down."""

from __future__ import annotations

import pytest

from ha.dledger.actions import AppendStatus, PersistTermVote, Send
from ha.dledger.log import EntryLog
from ha.dledger.member import Role
from ha.dledger.messages import PushRequest, PushResponse, VoteRequest, VoteResponse
from tests.ha.dledger.harness import Group, entries, make_node

IDS = ["n0", "n1", "n2"]


def group_of(count: int = 3) -> Group:
    ids = [f"n{i}" for i in range(count)]
    return Group([make_node(node_id, ids, seed=i) for i, node_id in enumerate(ids)])


def test_a_timed_out_follower_becomes_the_only_leader_and_commits_its_noop() -> None:
    """One timeout gives one leader at term 1 whose no-op commits on every member."""
    group = group_of()
    group.elect("n0")
    group.tick_all(3)
    roles = {i: n.role for i, n in group.nodes.items()}
    assert roles == {"n0": Role.LEADER, "n1": Role.FOLLOWER, "n2": Role.FOLLOWER}
    assert all(n.term == 1 and n.commit_index == 1 for n in group.nodes.values())
    assert group.nodes["n1"].log.entry(1).payload == b""


def test_a_vote_leaves_only_after_the_term_and_vote_are_durable() -> None:
    """The grant is held back until the host reports the PersistTermVote write durable."""
    voter = make_node("n1", IDS)
    actions = voter.receive(VoteRequest("n0", 1, 0, 0, pre_vote=False))
    assert [type(a) for a in actions] == [PersistTermVote, PersistTermVote]
    assert actions[-1] == PersistTermVote(2, 1, "n0")
    sent = voter.persisted(2)
    assert sent == [Send("n0", VoteResponse("n1", 1, True, False))]


def test_a_candidate_asks_for_votes_only_after_its_own_vote_is_durable() -> None:
    """Vote requests wait for the candidate's term + self-vote write, as answers do."""
    candidate = make_node("n0", IDS)
    candidate.receive(VoteResponse("n1", 1, True, True))  # ignored: not a pre-candidate yet
    actions = []
    while candidate.role is Role.FOLLOWER:
        actions = candidate.tick()
    assert all(isinstance(a.message, VoteRequest) and a.message.pre_vote
               for a in actions if isinstance(a, Send))
    actions = candidate.receive(VoteResponse("n1", 1, True, True))
    assert candidate.role is Role.CANDIDATE
    assert [type(a) for a in actions] == [PersistTermVote]
    sent = candidate.persisted(actions[0].write_id)  # type: ignore[union-attr]
    assert {a.target_id for a in sent if isinstance(a, Send)} == {"n1", "n2"}


def test_prevote_keeps_a_partitioned_node_from_inflating_terms() -> None:
    """An isolated follower times out again and again at the same term, and on return it
    neither raises anyone's term nor deposes the leader."""
    group = group_of()
    group.elect("n0")
    group.isolate("n2")
    for _ in range(20):
        group.tick("n2", 25)
        group.tick_all(1)
    assert group.nodes["n2"].term == 1
    group.cut.clear()
    group.tick_all(30)
    assert [n.term for n in group.nodes.values()] == [1, 1, 1]
    assert group.nodes["n0"].role is Role.LEADER
    assert group.nodes["n2"].member.leader_id == "n0"


def test_a_follower_in_its_leader_lease_ignores_higher_term_vote_requests() -> None:
    """Check-quorum lease: a node that just heard its leader does not answer a vote request."""
    group = group_of()
    group.elect("n0")
    follower = group.nodes["n1"]
    last = follower.log.last_index
    for pre_vote in (True, False):
        assert follower.receive(VoteRequest("n2", 5, last, 1, pre_vote)) == []
    assert follower.term == 1


def test_a_stale_log_gets_no_vote() -> None:
    """The up-to-date check: a higher last term wins, then a longer log at the same term."""
    voter = make_node("n1", IDS, log=EntryLog(entries=entries(1, 2, 2)), term=2)
    for last_index, last_term in ((5, 1), (2, 2)):
        answer = voter.receive(VoteRequest("n0", 3, last_index, last_term, pre_vote=True))
        assert answer == [Send("n0", VoteResponse("n1", 2, False, True))]
    granted = voter.receive(VoteRequest("n0", 3, 1, 3, pre_vote=True))
    assert granted == [Send("n0", VoteResponse("n1", 3, True, True))]
    assert voter.term == 2  # a pre-vote never moves the voter's term


def test_a_leader_without_a_quorum_steps_down_and_answers_its_pending_appends() -> None:
    """Check quorum: cut off, the leader steps down within an election timeout and completes
    every waiting append with LEADERSHIP_LOST (DLedger leaked them: #247, #309)."""
    group = group_of()
    group.elect("n0")
    group.tick_all(3)
    group.isolate("n0")
    group.append("n0", 1, b"a")
    group.append("n0", 2, b"b")
    leader = group.nodes["n0"]
    ticks = 0
    while leader.role is Role.LEADER:
        group.tick("n0")
        ticks += 1
    assert ticks <= 2 * leader.config.election_timeout_ticks
    assert [(c.request_id, c.status) for c in group.completed] == [
        (1, AppendStatus.LEADERSHIP_LOST), (2, AppendStatus.LEADERSHIP_LOST)]
    assert leader.pending_count == 0


def test_a_leader_steps_down_on_a_higher_term_in_a_push_reply() -> None:
    """A reply carrying a higher term deposes the leader at once (DLedger #247/#325)."""
    group = group_of()
    group.elect("n0")
    leader = group.nodes["n0"]
    actions = leader.receive(PushResponse("n1", 7, False, 1, 0, 0, 0, 1))
    assert leader.role is Role.FOLLOWER and leader.term == 7
    assert any(isinstance(a, PersistTermVote) and a.term == 7 for a in actions)


def test_a_deposed_leader_learns_the_new_term_from_its_stale_push() -> None:
    """A follower answers a lower-term push with its own term so the old leader steps down."""
    follower = make_node("n1", IDS, term=5)
    answer = follower.receive(PushRequest("n0", 3, 0, 0, (), 0))
    assert len(answer) == 1 and isinstance(answer[0], Send)
    assert isinstance(answer[0].message, PushResponse)
    assert answer[0].message.term == 5 and not answer[0].message.success


@pytest.mark.parametrize("deposing", ["push_reply", "push_request", "vote_request"])
def test_a_leader_deposed_by_a_higher_term_answers_every_pending_append_once(
        deposing: str) -> None:
    """Whatever message carries the higher term (a push reply, a new leader's push, a transfer
    election's vote request), every append waiting on the old leader completes with
    LEADERSHIP_LOST and none is left pending (DLedger #309 leaked them)."""
    group = group_of()
    group.elect("n0")
    group.tick_all(3)
    group.cut = {("n0", "n1"), ("n0", "n2")}
    for request_id in (1, 2, 3):
        group.append("n0", request_id, b"p%d" % request_id)
    leader = group.nodes["n0"]
    assert leader.pending_count == 3 and not group.completed
    message = {"push_reply": PushResponse("n1", 9, False, 1, 0, 0, 0, 1),
               "push_request": PushRequest("n1", 9, 0, 0, (), 0),
               "vote_request": VoteRequest("n1", 9, 99, 8, False, transfer=True)}[deposing]
    group.run("n0", leader.receive(message))
    assert leader.role is Role.FOLLOWER and leader.term == 9
    assert [(c.request_id, c.status) for c in group.completed] == [
        (1, AppendStatus.LEADERSHIP_LOST), (2, AppendStatus.LEADERSHIP_LOST),
        (3, AppendStatus.LEADERSHIP_LOST)]
    assert leader.pending_count == 0
