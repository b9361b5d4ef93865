"""Election: pre-vote, persisted votes, the up-to-date check, check-quorum step-down."""

from __future__ import annotations

import pytest

from ha.dledger.core.actions import AppendStatus, PersistTermVote, Send
from ha.dledger.core.entry_log import EntryLog
from ha.dledger.core.member import Role
from ha.dledger.core.messages import (
    PushRequest,
    PushResponse,
    TimeoutNow,
    VoteRequest,
    VoteResponse,
)
from ha.dledger.core.node import DLedgerNode
from tests.support.dledger.harness import WRITE_TYPES, Group, entries, make_node, unit_config

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


FIVE = ["n0", "n1", "n2", "n3", "n4"]


def ticks_to_pre_vote(node: DLedgerNode) -> int:
    ticks = 0
    while node.role is Role.FOLLOWER:
        node.tick()
        ticks += 1
    return ticks


def test_a_follower_times_out_after_a_draw_from_one_to_two_election_timeouts() -> None:
    """A follower that hears no leader starts its pre-vote after a number of ticks drawn from
    [election_timeout_ticks, 2 * election_timeout_ticks): over 200 seeds every value of that
    range occurs, and none outside it."""
    timeout_ticks = unit_config().election_timeout_ticks
    seen = {ticks_to_pre_vote(make_node("n1", IDS, seed=seed)) for seed in range(200)}
    assert seen == set(range(timeout_ticks, 2 * timeout_ticks))


def test_each_push_from_the_leader_restarts_the_election_timer() -> None:
    """A follower counts its election timeout from the leader's latest push, not its first:
    after a second push it waits at least election_timeout_ticks more, whatever its draw."""
    timeout_ticks = unit_config().election_timeout_ticks
    for seed in range(20):
        follower = make_node("n1", IDS, seed=seed)
        follower.receive(PushRequest("n0", 1, 0, 0, (), 0))
        for _ in range(timeout_ticks - 1):
            follower.tick()
        follower.receive(PushRequest("n0", 1, 0, 0, (), 0))
        assert ticks_to_pre_vote(follower) >= timeout_ticks


def follower_of_n0(seed: int = 3) -> DLedgerNode:
    """n1 at term 1, told by a push that n0 leads; it never voted in term 1."""
    follower = make_node("n1", IDS, seed=seed)
    actions = follower.receive(PushRequest("n0", 1, 0, 0, (), 0))
    follower.persisted(max(a.write_id for a in actions if isinstance(a, WRITE_TYPES)))
    assert (follower.term, follower.member.leader_id, follower.member.voted_for) == (1, "n0", None)
    return follower


def test_the_lease_ends_exactly_one_election_timeout_after_the_leaders_push() -> None:
    """A higher-term pre-vote request is ignored until election_timeout_ticks after the last
    push, and answered from that tick on."""
    timeout_ticks = unit_config().election_timeout_ticks
    follower = follower_of_n0()
    request = VoteRequest("n2", 2, 0, 0, pre_vote=True)
    for _ in range(timeout_ticks - 1):
        assert follower.tick() == []
    assert follower.receive(request) == []
    assert follower.tick() == [] and follower.role is Role.FOLLOWER  # drew more than the lease
    assert follower.receive(request) == [Send("n2", VoteResponse("n1", 2, True, True))]


def test_a_follower_with_a_leader_denies_a_same_term_candidate_and_keeps_its_leader() -> None:
    """A vote request at the follower's own term from another candidate is answered with a
    denial (not ignored: the lease covers only higher terms) and the leader stays known."""
    follower = follower_of_n0()
    answer = follower.receive(VoteRequest("n2", 1, 5, 1, pre_vote=False))
    assert answer == [Send("n2", VoteResponse("n1", 1, False, False))]
    assert follower.member.leader_id == "n0" and follower.member.voted_for is None


def test_a_vote_at_the_voters_own_term_is_granted_once_per_term() -> None:
    """A voter at term 2 that has not voted grants a term-2 candidate, grants that candidate's
    retransmitted request again, and denies a second candidate of the same term."""
    voter = make_node("n1", IDS, term=2)
    first = voter.receive(VoteRequest("n0", 2, 0, 0, pre_vote=False))
    assert first == [PersistTermVote(1, 2, "n0")]
    assert voter.persisted(1) == [Send("n0", VoteResponse("n1", 2, True, False))]
    again = voter.receive(VoteRequest("n0", 2, 0, 0, pre_vote=False))
    assert again[-1] == PersistTermVote(2, 2, "n0")
    assert voter.persisted(2) == [Send("n0", VoteResponse("n1", 2, True, False))]
    other = voter.receive(VoteRequest("n2", 2, 0, 0, pre_vote=False))
    assert other == [Send("n2", VoteResponse("n1", 2, False, False))]


def test_a_lower_term_vote_request_is_denied_at_once_with_the_voters_term() -> None:
    """A candidate behind the voter's term gets a denial carrying the voter's term, with no
    write and no change of vote."""
    voter = make_node("n1", IDS, term=4, voted_for="n2")
    for pre_vote in (True, False):
        answer = voter.receive(VoteRequest("n0", 3, 9, 3, pre_vote))
        assert answer == [Send("n0", VoteResponse("n1", 4, False, pre_vote))]
    assert (voter.term, voter.member.voted_for) == (4, "n2")


def test_a_pre_vote_at_the_voters_own_term_is_denied_when_it_voted_for_another() -> None:
    """A pre-vote grant is for a term above the voter's: one at its own term, where it already
    voted for someone else, is denied."""
    voter = make_node("n1", IDS, term=2, voted_for="n2")
    answer = voter.receive(VoteRequest("n0", 2, 9, 2, pre_vote=True))
    assert answer == [Send("n0", VoteResponse("n1", 2, False, True))]


def pre_candidate(ids: list[str]) -> DLedgerNode:
    node = make_node("n0", ids)
    ticks_to_pre_vote(node)
    assert node.role is Role.PRE_CANDIDATE and node.term == 0
    return node


@pytest.mark.parametrize("ids", [IDS, FIVE], ids=["three", "five"])
def test_a_majority_of_grants_and_no_fewer_makes_a_candidate_then_a_leader(
        ids: list[str]) -> None:
    """Of 3 members one other grant is a majority, of 5 two others are (a grant repeated by
    the same peer counts once): the pre-vote turns into an election, then a leadership, at
    exactly the grant that completes the majority."""
    node = pre_candidate(ids)
    needed = len(ids) // 2  # grants besides the node's own
    for voter in ids[1:needed]:
        node.receive(VoteResponse(voter, 1, True, True))
        node.receive(VoteResponse(voter, 1, True, True))
        assert node.role is Role.PRE_CANDIDATE
    actions = node.receive(VoteResponse(ids[needed], 1, True, True))
    assert node.role is Role.CANDIDATE and node.term == 1
    node.persisted(max(a.write_id for a in actions if isinstance(a, PersistTermVote)))
    for voter in ids[1:needed]:
        node.receive(VoteResponse(voter, 1, True, False))
        node.receive(VoteResponse(voter, 1, True, False))
        assert node.role is Role.CANDIDATE
    node.receive(VoteResponse(ids[needed], 1, True, False))
    assert node.role is Role.LEADER and node.member.leader_id == "n0"


def test_a_pre_candidate_denied_by_a_higher_term_adopts_it_and_follows() -> None:
    """A pre-vote denial carrying a term above the pre-candidate's makes it a follower of
    that term (the term is written), so it stops asking with a stale term."""
    node = pre_candidate(IDS)
    actions = node.receive(VoteResponse("n1", 5, False, True))
    assert node.role is Role.FOLLOWER and node.term == 5
    assert actions == [PersistTermVote(1, 5, None)]


def test_a_candidate_ignores_a_late_pre_vote_grant() -> None:
    """Once a candidate, a pre-vote grant arriving late (for the next term) neither counts as
    a vote nor starts another election."""
    node = pre_candidate(IDS)
    actions = node.receive(VoteResponse("n1", 1, True, True))
    node.persisted(actions[0].write_id)  # type: ignore[union-attr]
    assert node.receive(VoteResponse("n2", 2, True, True)) == []
    assert node.role is Role.CANDIDATE and node.term == 1


def test_a_leader_in_its_lease_ignores_higher_term_pre_votes() -> None:
    """The lease holds on the leader too: a freshly elected leader does not answer a higher-term
    pre-vote request, and reports itself as the leader."""
    group = group_of()
    group.elect("n0")
    leader = group.nodes["n0"]
    assert leader.receive(VoteRequest("n2", 5, 99, 5, pre_vote=True)) == []
    assert leader.role is Role.LEADER and leader.member.leader_id == "n0"


def test_a_pre_candidate_knows_no_leader_and_answers_a_higher_pre_vote() -> None:
    """A pre-candidate has given up its leader: it reports none, and it is outside any lease,
    so another node's pre-vote for the next term gets an answer."""
    node = pre_candidate(IDS)
    assert node.member.leader_id is None
    answer = node.receive(VoteRequest("n1", 1, 0, 0, pre_vote=True))
    assert answer == [Send("n1", VoteResponse("n0", 1, True, True))]


def test_a_candidate_has_voted_for_itself_and_denies_a_rival_of_its_term() -> None:
    """The candidate's term and its vote for itself are written together, so a rival asking in
    the same term is denied (one vote per term, the candidate's own)."""
    node = pre_candidate(IDS)
    actions = node.receive(VoteResponse("n1", 1, True, True))
    assert actions == [PersistTermVote(1, 1, "n0")]
    node.persisted(1)
    answer = node.receive(VoteRequest("n2", 1, 0, 0, pre_vote=False))
    assert answer == [Send("n2", VoteResponse("n0", 1, False, False))]
    assert node.member.voted_for == "n0"


def test_a_voter_keeps_its_vote_when_its_candidates_push_arrives_in_the_same_term() -> None:
    """The winner's first push at the term the voter voted in changes nothing durable: no
    write, the vote stays, and the winner becomes the known leader."""
    voter = make_node("n1", IDS)
    voter.receive(VoteRequest("n0", 1, 0, 0, pre_vote=False))
    voter.persisted(2)
    actions = voter.receive(PushRequest("n0", 1, 0, 0, (), 0))
    assert not any(isinstance(a, PersistTermVote) for a in actions)
    assert (voter.member.voted_for, voter.member.leader_id) == ("n0", "n0")


def test_a_follower_that_learned_the_term_from_a_vote_learns_its_leader_from_a_push() -> None:
    """A follower that moved to a new term on another candidate's vote request knows no leader;
    the first push of that term's leader makes it the known leader."""
    follower = make_node("n1", IDS, log=EntryLog(entries=entries(1, 1)), term=1)
    follower.receive(VoteRequest("n2", 2, 0, 0, pre_vote=False))  # stale log: denied
    follower.persisted(1)
    assert (follower.term, follower.member.leader_id) == (2, None)
    follower.receive(PushRequest("n0", 2, 2, 1, (), 0))
    assert follower.member.leader_id == "n0"


def test_a_node_that_leads_ignores_timeout_now() -> None:
    """TimeoutNow asks a follower to take over; a node that still leads (it missed its
    deposition) ignores it, whatever its term, and keeps leading."""
    group = group_of()
    group.elect("n0")
    leader = group.nodes["n0"]
    for term in (1, 2):
        assert leader.receive(TimeoutNow("n1", term)) == []
    assert leader.role is Role.LEADER and leader.term == 1


@pytest.mark.parametrize("member_ids", [["n1", "n2", "n3"], ["n0", "n1", "n1"]],
                         ids=["without-itself", "duplicate"])
def test_a_member_list_without_the_node_or_with_a_duplicate_is_refused(
        member_ids: list[str]) -> None:
    """The quorum is counted from the member list, so a list that leaves the node out or names
    a member twice (one peer counted as two) builds no node."""
    with pytest.raises(AssertionError):
        make_node("n0", member_ids)


def test_only_a_transfer_election_passes_the_lease_of_members_that_hear_the_leader() -> None:
    """A node cut off from its leader asks with a pre-vote, then (granted by hand) a real vote,
    neither flagged as a transfer: a member that still hears the leader ignores both."""
    group = group_of()
    group.elect("n0")
    group.isolate("n2")
    node = group.nodes["n2"]
    while node.role is Role.FOLLOWER:
        group.tick("n2")
    pre_vote = group.sends("n2", VoteRequest)[-1].message
    assert isinstance(pre_vote, VoteRequest) and pre_vote.pre_vote and not pre_vote.transfer
    group.run("n2", node.receive(VoteResponse("n0", node.term + 1, True, True)))
    assert node.role is Role.CANDIDATE
    vote = group.sends("n2", VoteRequest)[-1].message
    assert isinstance(vote, VoteRequest) and not vote.pre_vote and not vote.transfer
    member = group.nodes["n1"]
    assert member.receive(pre_vote) == [] and member.receive(vote) == []
    assert member.term == 1 and member.member.leader_id == "n0"



def test_a_follower_whose_leader_returns_at_a_higher_term_adopts_the_term() -> None:
    """n0 led term 1, then won term 2 without n1 (n1 missed the election): n0's first push of
    term 2 makes n1 write term 2 and answer in it, still following n0."""
    follower = make_node("n1", IDS, term=1)
    follower.receive(PushRequest("n0", 1, 0, 0, (), 0))
    assert (follower.term, follower.member.leader_id) == (1, "n0")
    actions = follower.receive(PushRequest("n0", 2, 0, 0, (), 0))
    assert actions[0] == PersistTermVote(1, 2, None)
    sent = follower.persisted(1)
    assert [a.message.term for a in sent if isinstance(a, Send)] == [2]  # type: ignore[union-attr]
    assert (follower.term, follower.member.leader_id, follower.role) == (2, "n0", Role.FOLLOWER)
