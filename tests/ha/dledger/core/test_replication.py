"""Replication: the commit rule (no Figure 8), truncation, fast back-up, catch-up from the
leader's base, the bounded pipeline and pending appends."""

from __future__ import annotations

import pytest

from ha.dledger.core.actions import (
    AppendEntries,
    AppendStatus,
    CompleteAppend,
    PersistTermVote,
    ResetLog,
    Send,
    TruncateFrom,
)
from ha.dledger.core.entry_log import EntryLog
from ha.dledger.core.member import HardState, Role
from ha.dledger.core.messages import Entry, PushRequest, PushResponse
from ha.dledger.core.node import DLedgerNode
from ha.dledger.core.storage import LogWriteError
from tests.support.dledger.harness import (
    WRITE_TYPES,
    Group,
    entries,
    find_match,
    leader_with_log,
    make_node,
    unit_config,
)

IDS = ["n0", "n1", "n2"]
FIVE = ["n0", "n1", "n2", "n3", "n4"]


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


@pytest.mark.parametrize("base_index", [1, 10])
def test_an_empty_follower_catches_up_from_the_leaders_first_retained_entry(
        base_index: int) -> None:
    """The leader's log starts after a base (retention, down to a base of 1); an empty
    follower resets to that base and receives every retained entry, even while the group is
    idle (DLedger #61)."""
    retained = EntryLog(base_index=base_index, base_term=1,
                        entries=entries(1, 1, 1, first_index=base_index + 1))
    leader = make_node("n0", IDS, log=retained, term=1)
    copy = EntryLog(base_index=base_index, base_term=1, entries=retained.entries())
    group = Group([leader, make_node("n1", IDS, term=1), make_node("n2", IDS, log=copy, term=1)])
    group.elect("n0")
    group.tick_all(10)
    follower = group.nodes["n1"]
    assert (follower.log.base_index, follower.log.entries()) == (base_index,
                                                                 leader.log.entries())
    assert follower.commit_index == leader.commit_index == base_index + 4
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
    assert group.completed == [CompleteAppend(3, AppendStatus.LEADER_PENDING_FULL, 0, 0)]
    group.tick("n0", 3)
    assert len(group.completed) == 1  # still waiting one tick before the deadline
    group.tick("n0")
    assert [c.status for c in group.completed[1:]] == [AppendStatus.WAIT_QUORUM_ACK_TIMEOUT] * 2


def test_an_append_to_a_follower_is_refused_and_one_to_the_leader_commits() -> None:
    """A follower answers NOT_LEADER; the leader answers OK once a quorum holds the entry."""
    group = Group([make_node(i, IDS, seed=n) for n, i in enumerate(IDS)])
    group.elect("n0")
    group.append("n1", 1, b"no")
    group.append("n0", 2, b"yes")
    group.deliver()
    assert group.completed[0] == CompleteAppend(1, AppendStatus.NOT_LEADER, 0, 0)  # no entry
    assert (group.completed[1].request_id, group.completed[1].status) == (2, AppendStatus.OK)
    assert group.nodes["n0"].log.entry(group.completed[1].index).payload == b"yes"


def test_a_single_node_group_commits_on_its_own_write() -> None:
    """With one member the quorum is the leader's own durable write."""
    node = DLedgerNode("n0", ["n0"], unit_config(), __import__("random").Random(1),
                       HardState(), EntryLog())
    group = Group([node])
    group.elect("n0")
    group.append("n0", 1, b"solo")
    assert group.completed[0].status is AppendStatus.OK and node.commit_index == 2


def test_a_leader_hearing_no_peer_steps_down_at_exactly_one_election_timeout() -> None:
    """Check quorum: a leader none of whose peers answers leads for election_timeout_ticks - 1
    ticks and is a follower (of the same term) at the election_timeout_ticks-th."""
    leader = leader_with_log((), term=0, ids=IDS)
    timeout_ticks = leader.config.election_timeout_ticks
    for _ in range(timeout_ticks - 1):
        leader.tick()
    assert leader.role is Role.LEADER
    leader.tick()
    assert leader.role is Role.FOLLOWER and leader.term == 1


def test_one_active_peer_of_two_keeps_the_leader_until_it_falls_silent() -> None:
    """One acking peer of two is a quorum: the leader keeps leading over three election
    timeouts; once that peer falls silent the next check, one timeout later, deposes it."""
    leader = leader_with_log((), term=0, ids=IDS)
    timeout_ticks = leader.config.election_timeout_ticks
    for _ in range(3 * timeout_ticks):
        ack(leader, "n1", leader.log.last_index)
        leader.tick()
    assert leader.role is Role.LEADER
    for _ in range(timeout_ticks - 1):
        leader.tick()
    assert leader.role is Role.LEADER
    leader.tick()
    assert leader.role is Role.FOLLOWER


def test_a_caught_up_follower_gets_a_heartbeat_every_heartbeat_ticks() -> None:
    """Once both followers hold the leader's log, each gets one empty push every
    heartbeat_ticks ticks (here 2), counted from the election, and nothing in between."""
    leader = leader_with_log((), term=0, ids=IDS)
    for peer_id in ("n1", "n2"):
        ack(leader, peer_id, 1)
    sent_at = []
    for tick in range(1, 8):
        pushes = [a.message for a in leader.tick()
                  if isinstance(a, Send) and a.target_id == "n1"]
        if pushes:
            sent_at.append(tick)
            assert pushes == [PushRequest("n0", 1, 1, 1, (), 1, prev_crc=0)]  # carries the commit
            for peer_id in ("n1", "n2"):
                ack(leader, peer_id, 1)
    assert sent_at == [2, 4, 6]


def test_an_ack_beyond_the_leaders_log_is_dropped_and_never_counts_later() -> None:
    """A reply claiming more than the leader holds is dropped: it commits nothing now, and
    when the leader's log grows to that index the claim still does not count as a copy."""
    leader = leader_with_log((), term=0, ids=IDS)
    ack(leader, "n1", 5)
    assert leader.commit_index == 0
    writes = []
    for request_id in range(1, 5):
        writes += [a for a in leader.client_append(request_id, b"x")
                   if isinstance(a, WRITE_TYPES)]
    actions = leader.persisted(writes[-1].write_id)
    assert leader.log.last_index == 5 and leader.commit_index == 0
    assert not any(isinstance(a, CompleteAppend) for a in actions)


def test_replies_waiting_for_a_write_are_bounded_and_leave_once_it_is_durable() -> None:
    """With deferred_messages_max 2, three pushes whose writes are not durable yet hold two
    acks and drop the third (the leader asks again); the write of the third releases both."""
    follower = make_node("n1", IDS, term=1, config=unit_config(deferred_messages_max=2))
    writes = []
    for index in (1, 2, 3):
        actions = follower.receive(PushRequest("n0", 1, index - 1, 1 if index > 1 else 0,
                                               entries(1, first_index=index), 0))
        assert not any(isinstance(a, Send) for a in actions)
        writes += [a for a in actions if isinstance(a, WRITE_TYPES)]
    sent = follower.persisted(writes[-1].write_id)
    assert [a.message.match_index for a in sent  # type: ignore[union-attr]
            if isinstance(a, Send)] == [1, 2]


def test_a_deposed_leader_ignores_late_push_replies() -> None:
    """Replies to the pushes of a leader that stepped down change nothing and send nothing."""
    group = Group([make_node(i, IDS, seed=n) for n, i in enumerate(IDS)])
    group.elect("n0")
    leader = group.nodes["n0"]
    group.run("n0", leader.receive(PushResponse("n2", 7, False, 1, 0, 0, 0, 1)))
    commit_index = leader.commit_index
    assert leader.receive(PushResponse("n1", 7, True, 1, 2, 0, 0, 2)) == []
    assert leader.role is Role.FOLLOWER and leader.commit_index == commit_index


def test_a_fresh_follower_ignores_a_stray_push_reply() -> None:
    """A push reply reaching a node that never led (a late message from an earlier life) is
    dropped: no action, no change."""
    follower = make_node("n1", IDS, term=1)
    assert follower.receive(PushResponse("n2", 1, True, 0, 0, 0, 0, 0)) == []
    assert follower.role is Role.FOLLOWER and follower.commit_index == 0


def test_a_follower_is_probed_once_until_the_push_timeout() -> None:
    """A peer whose match is unknown gets one probe at a time: with its replies lost, nothing
    more goes to it (no heartbeat either) until push_timeout_ticks, then one probe again."""
    leader = leader_with_log((), term=0, ids=IDS)
    ack(leader, "n2", 1)  # n2 answers; n1 stays silent
    probes_at = []
    for tick in range(1, leader.config.push_timeout_ticks + 1):
        if any(isinstance(a, Send) and a.target_id == "n1" for a in leader.tick()):
            probes_at.append(tick)
        ack(leader, "n2", 1)
    assert probes_at == [leader.config.push_timeout_ticks]


def test_retention_compacts_only_what_is_committed_and_durable() -> None:
    """Retention may remove entries up to the commit index and the durable end, whichever is
    lower: to 2 while entry 3 is committed but not yet durable on this node, to 3 once it is,
    and never past the commit index."""
    follower = make_node("n1", IDS, term=1)
    actions = follower.receive(PushRequest("n0", 1, 0, 0, entries(1, 1, 1), 0))
    follower.persisted(max(a.write_id for a in actions if isinstance(a, WRITE_TYPES)))
    actions = follower.receive(PushRequest("n0", 1, 3, 1, entries(1, first_index=4), 3))
    assert (follower.commit_index, follower.durable_index) == (3, 3)
    follower.receive(PushRequest("n0", 1, 4, 1, (), 4))
    assert (follower.commit_index, follower.durable_index) == (4, 3)
    with pytest.raises(AssertionError):
        follower.compact(4)
    follower.compact(2)
    assert follower.log.base_index == 2
    follower.persisted(max(a.write_id for a in actions if isinstance(a, WRITE_TYPES)))
    follower.compact(4)
    assert follower.log.base_index == 4 and follower.log.last_index == 4
    with pytest.raises(AssertionError):
        follower.compact(5)


def test_a_truncation_takes_the_removed_entries_out_of_the_durable_end() -> None:
    """Entries 2-3 of term 1 replaced by a term-2 leader's entry 2: the durable end drops to 1
    at once and reaches the new entry only when its write is durable."""
    follower = make_node("n1", IDS, term=1)
    actions = follower.receive(PushRequest("n0", 1, 0, 0, entries(1, 1, 1), 1))
    follower.persisted(max(a.write_id for a in actions if isinstance(a, WRITE_TYPES)))
    assert follower.durable_index == 3
    actions = follower.receive(PushRequest("n2", 2, 1, 1, entries(2, first_index=2), 1))
    assert [type(a) for a in actions] == [PersistTermVote, TruncateFrom, AppendEntries]
    assert follower.durable_index == 1
    follower.persisted(actions[-1].write_id)  # type: ignore[union-attr]
    assert follower.durable_index == 2


def test_a_restarted_follower_counts_its_log_as_durable_until_a_leader_cuts_it() -> None:
    """A node restarted over a log on disk starts with that log durable; a new leader's first
    push, which raises its term and conflicts at entry 3, cuts the durable end to 2 at once."""
    follower = make_node("n1", IDS, log=EntryLog(entries=entries(1, 1, 2)), term=2)
    assert follower.durable_index == 3
    follower.receive(PushRequest("n0", 3, 2, 1, entries(3, first_index=3), 2))
    assert follower.durable_index == 2 and follower.commit_index == 2


def test_the_second_probe_lands_on_the_last_index_where_the_logs_can_match() -> None:
    """Fast back-up: the follower's hint (its last index of a term <= the probe's) is mapped
    through the leader's log to the last index both can share, and the next probe goes
    exactly there: probes at 5, then 2, then the push that replaces the follower's suffix."""
    leader = make_node("n0", IDS, log=EntryLog(entries=entries(1, 1, 3, 3, 3)), term=3)
    follower = make_node("n1", IDS, log=EntryLog(entries=entries(1, 1, 2, 2, 2, 2)), term=2)
    other = make_node("n2", IDS, log=EntryLog(entries=entries(1, 1, 3, 3, 3)), term=3)
    group = Group([leader, follower, other])
    group.elect("n0")
    pushes = [s.message for s in group.sends("n0", PushRequest) if s.target_id == "n1"]
    assert [(p.prev_index, bool(p.entries)) for p in pushes[:3]] == [  # type: ignore[union-attr]
        (5, False), (2, False), (2, True)]
    assert follower.log.entries() == leader.log.entries()


def test_a_leader_ignores_a_push_reply_of_an_earlier_term() -> None:
    """A success reply from the leader's term 1 (the follower's entry 4 then was another
    leader's) is not a copy of the term-3 leader's entry 4: dropped, it commits nothing."""
    leader = leader_with_log((1, 1, 1), term=2, ids=IDS)
    assert leader.log.last_index == 4 and leader.term == 3
    assert leader.receive(PushResponse("n1", 1, True, 3, 4, 0, 0, 4)) == []
    assert leader.commit_index == 0 and leader.dispatchers["n1"].match_index == 0


def test_once_a_lagging_follower_is_found_the_leader_fills_its_push_window() -> None:
    """With its match found at 1, a follower 10 entries behind gets inflight_pushes_max (3)
    pushes of push_entries_max (2) entries at once, not one push per reply."""
    config = unit_config(inflight_pushes_max=3, push_entries_max=2)
    leader = leader_with_log((1,) * 10, term=1, ids=IDS, config=config)
    actions = find_match(leader, "n1", 1)
    pushes = [a.message for a in actions if isinstance(a, Send) and a.target_id == "n1"]
    assert [(p.prev_index, [e.index for e in p.entries])  # type: ignore[union-attr]
            for p in pushes] == [(1, [2, 3]), (3, [4, 5]), (5, [6, 7])]


def test_a_push_overlapping_the_followers_end_appends_only_the_entries_it_lacks() -> None:
    """A follower holding entries 1-2 that gets a push of 1-3 (a resend after a timeout)
    writes entry 3 alone, and acknowledges 3 only once that write is durable."""
    follower = make_node("n1", IDS, log=EntryLog(entries=entries(1, 1)), term=1)
    actions = follower.receive(PushRequest("n0", 1, 0, 0, entries(1, 1, 1), 0))
    writes = [a for a in actions if isinstance(a, AppendEntries)]
    assert [[e.index for e in w.entries] for w in writes] == [[3]]
    assert follower.log.entries() == entries(1, 1, 1)
    sent = follower.persisted(writes[0].write_id)
    replies = [a.message for a in sent if isinstance(a, Send)]
    assert [r.match_index for r in replies] == [3]  # type: ignore[union-attr]


def test_a_peer_whose_match_retention_removed_is_probed_again_from_the_leaders_base() -> None:
    """n1 matched up to 9, then the leader's retention removed entries up to 10: when n1's
    pushes time out, the leader probes it again from its base (prev 10, from_base), the one
    point it can still prove, not from index 10, whose previous entry is gone."""
    leader = leader_with_log((1,) * 12, term=1, ids=IDS)
    find_match(leader, "n1", 9)
    ack(leader, "n2", 13)
    assert leader.commit_index == 13
    leader.compact(10)
    probes = []
    for _ in range(leader.config.push_timeout_ticks):
        probes += [a.message for a in leader.tick() if isinstance(a, Send) and a.target_id == "n1"]
    assert [(p.prev_index, p.prev_term, p.entries, p.from_base)  # type: ignore[union-attr]
            for p in probes] == [(10, 1, (), True)]


def test_appends_without_push_wait_for_one_dispatch_that_sends_them_together() -> None:
    """client_append(push=False) sends nothing; dispatch() then pushes all of them in one
    request a peer, and a follower's dispatch() sends nothing."""
    group = Group([make_node(i, IDS, seed=n) for n, i in enumerate(IDS)])
    group.elect("n0")
    group.tick_all(3)
    leader = group.nodes["n0"]
    before = len(group.sends("n0", PushRequest))
    for request_id in range(1, 6):
        group.run("n0", leader.client_append(request_id, b"p%d" % request_id, push=False))
    assert len(group.sends("n0", PushRequest)) == before
    group.run("n1", group.nodes["n1"].dispatch())
    assert group.sends("n1", PushRequest) == []
    group.run("n0", leader.dispatch())
    sends = group.sends("n0", PushRequest)[before:]
    assert sorted(send.target_id for send in sends) == ["n1", "n2"]
    pushes = [send.message for send in sends if isinstance(send.message, PushRequest)]
    assert [[entry.payload for entry in push.entries] for push in pushes] == \
        [[b"p%d" % i for i in range(1, 6)]] * 2
    group.deliver()
    assert [(c.request_id, c.status) for c in group.completed] == \
        [(i, AppendStatus.OK) for i in range(1, 6)]


def test_appends_taken_together_are_one_write_and_refused_past_the_pending_bound() -> None:
    """client_append_many appends the requests it has room for with one AppendEntries, in
    order, and refuses the rest at once (LEADER_PENDING_FULL, nothing appended); every taken
    one commits OK."""
    config = unit_config(pending_appends_max=3)
    group = Group([make_node(i, IDS, config=config, seed=n) for n, i in enumerate(IDS)])
    group.elect("n0")
    group.tick_all(3)
    leader = group.nodes["n0"]
    last_before = leader.log.last_index
    actions = leader.client_append_many([(i, b"p%d" % i) for i in range(1, 6)], push=False)
    writes = [a for a in actions if isinstance(a, AppendEntries)]
    assert len(writes) == 1
    assert [(e.index, e.payload) for e in writes[0].entries] == \
        [(last_before + i, b"p%d" % i) for i in (1, 2, 3)]
    assert [a for a in actions if isinstance(a, CompleteAppend)] == \
        [CompleteAppend(i, AppendStatus.LEADER_PENDING_FULL, 0, 0) for i in (4, 5)]
    assert leader.log.last_index == last_before + 3
    group.run("n0", actions)
    group.run("n0", leader.dispatch())
    group.deliver()
    assert [(c.request_id, c.status) for c in group.completed] == \
        [(4, AppendStatus.LEADER_PENDING_FULL), (5, AppendStatus.LEADER_PENDING_FULL)] + \
        [(i, AppendStatus.OK) for i in (1, 2, 3)]


def test_appends_taken_together_by_a_follower_are_all_refused_not_leader() -> None:
    group = Group([make_node(i, IDS, seed=n) for n, i in enumerate(IDS)])
    group.elect("n0")
    follower = group.nodes["n1"]
    last_before = follower.log.last_index
    assert follower.client_append_many([(1, b"a"), (2, b"b")]) == \
        [CompleteAppend(i, AppendStatus.NOT_LEADER, 0, 0) for i in (1, 2)]
    assert follower.log.last_index == last_before


class _RefusingLog(EntryLog):
    """Takes `room` more entries, then refuses as a full disk would (nothing of the refused
    entry kept, the ones before it in the same append_many stay)."""

    def __init__(self, room: int) -> None:
        super().__init__()
        self.room = room

    def append(self, entry: Entry) -> None:
        if entry.payload and self.room == 0:
            raise LogWriteError(28, "No space left on device")
        self.room -= bool(entry.payload)
        super().append(entry)


@pytest.mark.parametrize("room", [0, 2])
def test_appends_from_one_the_disk_refuses_on_answer_disk_error(room: int) -> None:
    """The entries the disk took await their quorum (one write); from the refused one on,
    DISK_ERROR at once with nothing appended; the leader goes on with the next append."""
    log = _RefusingLog(room)
    group = Group([make_node("n0", IDS, log=log, seed=0)] +
                  [make_node(i, IDS, seed=n) for n, i in enumerate(IDS[1:], 1)])
    group.elect("n0")
    group.tick_all(3)
    leader = group.nodes["n0"]
    last_before = leader.log.last_index
    actions = leader.client_append_many([(i, b"p%d" % i) for i in range(1, 5)])
    writes = [a for a in actions if isinstance(a, AppendEntries)]
    assert [len(w.entries) for w in writes] == ([room] if room else [])
    assert [a for a in actions if isinstance(a, CompleteAppend)] == \
        [CompleteAppend(i, AppendStatus.DISK_ERROR, 0, 0) for i in range(room + 1, 5)]
    assert leader.log.last_index == last_before + room
    group.run("n0", actions)
    log.room = 1
    group.append("n0", 9, b"after")
    group.deliver()
    assert sorted((c.request_id, c.status) for c in group.completed
                  if c.status is AppendStatus.OK) == \
        [(i, AppendStatus.OK) for i in [*range(1, room + 1), 9]]
    assert leader.log.entry(leader.log.last_index).payload == b"after"


def test_appends_taken_together_are_pushed_at_once_by_default() -> None:
    """Without push=False the run goes out to every caught-up peer in the same actions."""
    group = Group([make_node(i, IDS, seed=n) for n, i in enumerate(IDS)])
    group.elect("n0")
    group.tick_all(3)
    group.deliver()
    leader = group.nodes["n0"]
    actions = leader.client_append_many([(1, b"a"), (2, b"b")])
    pushes = {a.target_id: a.message for a in actions
              if isinstance(a, Send) and isinstance(a.message, PushRequest)}
    assert sorted(pushes) == ["n1", "n2"]
    assert all([e.payload for e in push.entries] == [b"a", b"b"] for push in pushes.values())
