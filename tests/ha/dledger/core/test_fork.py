"""A fork of equal term: two members that led the same term apart (one of them under another
peer list) hold different entries at one (index, term); entries match by payload CRC too."""

from __future__ import annotations

from ha.dledger.core.actions import Send, TruncateFrom
from ha.dledger.core.entry_log import EntryLog
from ha.dledger.core.messages import Entry, PushRequest, payload_crc
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
