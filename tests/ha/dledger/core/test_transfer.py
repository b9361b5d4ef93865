"""Leadership transfer: refusals, the catch-up wait, TimeoutNow past the leader lease, the
freeze on client appends, the timeout, and pending appends of the leader that hands over."""

from __future__ import annotations

from ha.dledger.core.actions import AppendStatus, CompleteAppend, CompleteTransfer, TransferStatus
from ha.dledger.core.member import Role
from ha.dledger.core.messages import PushResponse, TimeoutNow, VoteRequest
from tests.support.dledger.harness import Group, make_node

IDS = ["n0", "n1", "n2"]
FIVE = ["n0", "n1", "n2", "n3", "n4"]


def elected_group(ids: list[str] = IDS) -> Group:
    group = Group([make_node(node_id, ids, seed=i) for i, node_id in enumerate(ids)])
    group.elect("n0")
    group.tick_all(3)
    return group


def transfer(group: Group, target_id: str, source_id: str = "n0") -> list[TransferStatus]:
    """Ask `source_id` to transfer; the statuses answered so far."""
    group.run(source_id, group.nodes[source_id].transfer_leadership(target_id))
    return transfer_results(group)


def transfer_results(group: Group) -> list[TransferStatus]:
    return [a.status for _, a in group.actions if isinstance(a, CompleteTransfer)]


def test_a_transfer_is_refused_at_once_for_a_non_member_self_a_follower_or_a_second_one() -> None:
    """Unknown target, the leader itself, a follower asked, and a transfer while one runs are
    each refused with their own status, and the leader keeps leading."""
    group = elected_group()
    group.cut = {("n0", "n1")}  # n1 cannot catch up, so the first transfer stays open
    group.append("n0", 1, b"lag")
    assert transfer(group, "n9") == [TransferStatus.NOT_MEMBER]
    assert transfer(group, "n0")[-1] is TransferStatus.TARGET_IS_SELF
    assert transfer(group, "n0", source_id="n2")[-1] is TransferStatus.NOT_LEADER
    assert len(transfer(group, "n1")) == 3  # accepted: no answer yet
    assert transfer(group, "n2")[-1] is TransferStatus.IN_PROGRESS
    assert group.nodes["n0"].role is Role.LEADER


def test_a_caught_up_target_takes_over_at_once_past_the_lease() -> None:
    """TimeoutNow makes n1 a candidate without pre-vote; its vote requests pass the lease of
    the old leader and of n2 (both heard a leader just now), so n1 leads the next term."""
    group = elected_group()
    old_term = group.nodes["n0"].term
    assert transfer(group, "n1") == []
    assert [s.message for s in group.sends("n0", TimeoutNow)] == [TimeoutNow("n0", old_term)]
    group.deliver()
    assert group.nodes["n1"].role is Role.LEADER and group.nodes["n1"].term == old_term + 1
    assert group.nodes["n0"].role is Role.FOLLOWER
    assert transfer_results(group) == [TransferStatus.OK]
    requests = [s.message for s in group.sends("n1", VoteRequest)]
    assert requests and all(isinstance(r, VoteRequest) and r.transfer and not r.pre_vote
                            for r in requests)


def test_client_appends_are_refused_while_transferring_and_nothing_is_written() -> None:
    """During the catch-up wait an append answers LEADER_TRANSFERRING (not written, retry on
    the new leader) and the leader's log does not grow."""
    group = elected_group()
    group.cut = {("n0", "n1")}
    group.append("n0", 1, b"before")
    leader = group.nodes["n0"]
    transfer(group, "n1")
    end_index = leader.log.last_index
    group.append("n0", 2, b"during")
    assert group.completed[-1] == CompleteAppend(2, AppendStatus.LEADER_TRANSFERRING, 0, 0)
    assert leader.log.last_index == end_index


def test_a_target_that_does_not_catch_up_in_time_is_refused_and_appends_resume() -> None:
    """With the target unreachable, the transfer answers NOT_CAUGHT_UP after
    transfer_catchup_ticks and the leader takes appends again."""
    group = elected_group()
    group.cut = {("n0", "n1"), ("n1", "n0")}
    group.append("n0", 1, b"lag")
    transfer(group, "n1")
    leader = group.nodes["n0"]
    group.tick_all(leader.config.transfer_catchup_ticks - 1)
    assert transfer_results(group) == []
    group.tick_all(1)
    assert transfer_results(group) == [TransferStatus.NOT_CAUGHT_UP]
    assert not group.sends("n0", TimeoutNow)
    group.append("n0", 2, b"after")
    group.deliver()
    assert group.completed[-1].request_id == 2 and group.completed[-1].status is AppendStatus.OK


def test_a_lagging_target_is_caught_up_first_then_takes_over() -> None:
    """A target missing entries gets them during the wait, then TimeoutNow, and leads with
    every entry of the old leader."""
    group = elected_group()
    group.cut = {("n0", "n1")}
    for request_id in range(1, 6):
        group.append("n0", request_id, b"m%d" % request_id)
    group.deliver()
    transfer(group, "n1")
    group.cut = set()
    group.tick_all(group.nodes["n0"].config.transfer_catchup_ticks - 1)
    assert transfer_results(group) == [TransferStatus.OK]
    old, new = group.nodes["n0"], group.nodes["n1"]
    assert new.role is Role.LEADER
    assert new.log.entries()[:old.log.last_index] == old.log.entries()


def test_a_lost_timeout_now_times_out_after_an_election_timeout_and_the_leader_resumes() -> None:
    """If TimeoutNow never arrives, the leader answers TIMEOUT one election timeout later and
    keeps leading and committing."""
    group = elected_group()
    group.cut = {("n0", "n1")}
    transfer(group, "n1")  # n1 already holds the whole log: TimeoutNow leaves at once, lost
    assert len(group.sends("n0", TimeoutNow)) == 1
    group.cut = set()
    leader = group.nodes["n0"]
    group.tick_all(leader.config.election_timeout_ticks - 1)
    assert transfer_results(group) == []
    group.tick_all(1)
    assert transfer_results(group) == [TransferStatus.TIMEOUT]
    assert leader.role is Role.LEADER
    group.append("n0", 1, b"after")
    group.deliver()
    assert group.completed[-1].status is AppendStatus.OK


def test_a_stale_timeout_now_starts_no_election() -> None:
    """TimeoutNow from an older term (a deposed leader's, delivered late) is ignored."""
    follower = make_node("n1", IDS, term=4)
    assert follower.receive(TimeoutNow("n0", 3)) == []
    assert follower.role is Role.FOLLOWER and follower.term == 4


def test_the_leader_that_hands_over_answers_every_pending_append_once() -> None:
    """Appends waiting for a quorum when the leader hands over complete LEADERSHIP_LOST
    (indeterminate: the new leader holds them), and none is left pending."""
    group = elected_group(FIVE)
    group.cut = {("n0", peer) for peer in ("n2", "n3", "n4")}  # only n1 gets pushes
    for request_id in (1, 2, 3):
        group.append("n0", request_id, b"p%d" % request_id)
    group.deliver()
    leader = group.nodes["n0"]
    assert leader.pending_count == 3
    transfer(group, "n1")
    group.deliver()
    assert transfer_results(group) == [TransferStatus.OK]
    assert [(c.request_id, c.status) for c in group.completed] == [
        (1, AppendStatus.LEADERSHIP_LOST), (2, AppendStatus.LEADERSHIP_LOST),
        (3, AppendStatus.LEADERSHIP_LOST)]
    assert leader.pending_count == 0
    group.tick_all(5)
    new = group.nodes["n1"]
    assert [new.log.entry(i).payload for i in (2, 3, 4)] == [b"p1", b"p2", b"p3"]
    assert new.commit_index >= 4


def test_a_leader_deposed_while_its_target_catches_up_answers_leadership_lost() -> None:
    """A transfer still waiting for its target to catch up (no TimeoutNow sent) ends
    LEADERSHIP_LOST, not OK, when a higher term deposes the leader."""
    group = elected_group()
    group.cut = {("n0", "n1")}
    group.append("n0", 1, b"lag")
    assert transfer(group, "n1") == []
    leader = group.nodes["n0"]
    group.run("n0", leader.receive(PushResponse("n2", 9, False, 1, 0, 0, 0, 1)))
    assert transfer_results(group) == [TransferStatus.LEADERSHIP_LOST]


def test_a_leader_that_loses_its_quorum_after_timeout_now_answers_leadership_lost() -> None:
    """TimeoutNow went out (and was lost), then the leader steps down at its own term for want
    of a quorum: no new term came, so the transfer ends LEADERSHIP_LOST, not OK."""
    group = elected_group()
    leader = group.nodes["n0"]
    timeout_ticks = leader.config.election_timeout_ticks
    group.isolate("n0")
    group.tick("n0", timeout_ticks - 3)  # the first check still counts the acks before the cut
    assert leader.role is Role.LEADER
    group.tick("n0", timeout_ticks // 2)
    assert transfer(group, "n1") == [] and len(group.sends("n0", TimeoutNow)) == 1
    while leader.role is Role.LEADER:
        group.tick("n0")
    assert leader.term == 1
    assert transfer_results(group) == [TransferStatus.LEADERSHIP_LOST]
