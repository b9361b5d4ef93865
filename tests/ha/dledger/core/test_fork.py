"""A fork of equal term: two members that led the same term apart (one of them under another
peer list) hold different entries at one (index, term); entries match by payload CRC too."""

from __future__ import annotations

from ha.dledger.core.actions import Send, TruncateFrom
from ha.dledger.core.entry_log import EntryLog
from ha.dledger.core.member import Role
from ha.dledger.core.messages import Entry, PushRequest, payload_crc
from ha.dledger.core.node import DLedgerNode
from tests.support.dledger.harness import Group, entries, make_node

IDS = ["n0", "n1", "n2"]


def forked(*terms: int, first_index: int = 1) -> tuple[Entry, ...]:
    """Entries of those terms whose payloads are not `entries`' (a lone leader's own)."""
    return tuple(Entry(first_index + i, term, b"fork%d-t%d" % (first_index + i, term))
                 for i, term in enumerate(terms))


def test_a_follower_with_other_entries_of_the_leaders_term_is_cut_to_the_last_common_one(
) -> None:
    """n1 led term 2 alone (entries 3-6 its own), the group's n0 led term 2 too (entries 3-4)
    and then term 3: n1 ends with n0's log, truncated at entry 3, the first that differs,
    and its commit never covers one of its own term-2 entries."""
    common = entries(1, 1)
    leader = make_node("n0", IDS, log=EntryLog(entries=common + entries(2, 2, first_index=3)),
                       term=2)
    follower = make_node("n1", IDS, log=EntryLog(entries=common + forked(2, 2, 2, 2,
                                                                          first_index=3)),
                         term=2)
    other = make_node("n2", IDS, log=EntryLog(entries=leader.log.entries()), term=2)
    group = Group([leader, follower, other])
    group.elect("n0")
    group.tick_all(8)
    assert follower.log.entries() == leader.log.entries()
    assert [a.index for s, a in group.actions
            if s == "n1" and isinstance(a, TruncateFrom)] == [3]
    assert follower.commit_index == leader.commit_index == leader.log.last_index
    assert follower.diverged is None


def test_a_push_that_contradicts_the_committed_prefix_is_refused_and_reported() -> None:
    """A follower whose committed entry 2 differs from its leader's (same term): the push is
    not answered (its copy never counts toward the leader's quorum), nothing is truncated,
    and `diverged` names the entry; a push that matches again clears it."""
    follower = make_node("n1", IDS, log=EntryLog(entries=entries(1) + forked(1, first_index=2)),
                         term=1)
    follower.receive(PushRequest("n0", 1, 2, 1, (), 2,
                                 prev_crc=payload_crc(follower.log.entry(2).payload)))
    assert follower.commit_index == 2
    leaders_entry = entries(1, 1)[1]
    actions = follower.receive(PushRequest("n0", 1, 2, 1, (), 2,
                                           prev_crc=payload_crc(leaders_entry.payload)))
    assert not [a for a in actions if isinstance(a, Send)]
    assert follower.log.entry(2).payload == b"fork2-t1"
    assert follower.diverged is not None and "committed entry 2" in follower.diverged
    actions = follower.receive(PushRequest("n0", 1, 1, 1, (leaders_entry,), 2))
    assert not [a for a in actions if isinstance(a, Send)]
    assert follower.diverged is not None
    actions = follower.receive(PushRequest("n0", 1, 1, 1, (), 2))
    assert [a for a in actions if isinstance(a, Send)]
    assert follower.diverged is None


def _campaign(candidate: DLedgerNode, voter: DLedgerNode) -> Group:
    """The candidate times out and asks for pre-votes; the voter answers."""
    group = Group([candidate, voter])
    group.cut = {(node.member.self_id, "n0") for node in (candidate, voter)}  # n0 is down
    while candidate.role is Role.FOLLOWER:
        group.tick(candidate.member.self_id)
    group.deliver()
    return group


def test_a_grant_from_a_voter_whose_committed_entry_the_candidate_lacks_is_not_counted(
) -> None:
    """n1 led term 2 alone (entries 3-6 its own) and campaigns; n2 holds the group's term-2
    entries 3-4, committed. Raft's up-to-date check passes (same last term, n1 further on)
    and n2 grants, with its commit mark (entry 4, term 2, its CRC): n1's entry 4 is another,
    so n1 does not count the grant, never gets past the pre-vote, and reports the fork. A
    voter whose committed entries n1 holds is counted as before."""
    common = entries(1, 1)

    def candidate() -> DLedgerNode:
        return make_node("n1", IDS, log=EntryLog(entries=common + forked(2, 2, 2, 2,
                                                                          first_index=3)),
                         term=2)

    voter = make_node("n2", IDS, log=EntryLog(entries=common + entries(2, 2, first_index=3)),
                      term=2)
    voter.commit_index = 4
    forked_candidate = candidate()
    group = _campaign(forked_candidate, voter)
    grants = [a.message for s, a in group.actions if s == "n2" and isinstance(a, Send)]
    assert [(g.granted, g.commit_index) for g in grants] == [(True, 4)]  # type: ignore[union-attr]
    assert forked_candidate.role is Role.PRE_CANDIDATE and forked_candidate.term == 2
    assert forked_candidate.diverged is not None and "entry 4" in forked_candidate.diverged

    behind = make_node("n2", IDS, log=EntryLog(entries=common), term=2)
    behind.commit_index = 2
    counted = candidate()
    _campaign(counted, behind)
    assert counted.role is Role.LEADER or counted.role is Role.CANDIDATE
    assert counted.diverged is None
