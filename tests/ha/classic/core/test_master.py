"""The master's view of its slaves, as a pure state machine: slots, identity, what is
replicated and what a SYNC_MASTER put waits for, seen event by event without a socket."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ha.classic.core.epochs import Agreement, Decision, Epoch
from ha.classic.core.link import LinkState, SlaveLink
from ha.classic.core.master import AckStep, MasterCore, RejectedSlave
from ha.config import HAConfig

MASTER_MAX = 100_000
EPOCHS = [Epoch(1, 0, b"m" * 16)]


@dataclass(eq=False)
class Conn:
    """A connection as the core sees it: only its link."""

    link: SlaveLink = field(default_factory=lambda: SlaveLink("slave", 0))


def master(**overrides: Any) -> MasterCore[Conn]:
    return MasterCore(HAConfig(**{"slave_timeout_ms": 3000, **overrides}), EPOCHS)


def connect(core: MasterCore[Conn], slave_id: str) -> Conn:
    """A connection through its handshake, given a slot, not yet reporting."""
    conn = Conn(SlaveLink(f"addr-{slave_id}", 0))
    assert core.opened(conn) is None
    conn.link.identified(slave_id)
    refusal, stale = core.handshake_done(conn)
    assert refusal == "" and stale == []
    conn.link.agreed(Decision(Agreement.AGREED, 0), 0)
    return conn


def stream(core: MasterCore[Conn], slave_id: str) -> Conn:
    """A connected slave that reported 0 (an ack at 0)."""
    conn = connect(core, slave_id)
    assert conn.link.report(0, MASTER_MAX, 0, 0).started
    core.acked(conn)
    return conn


def ack(core: MasterCore[Conn], conn: Conn, offset: int) -> int:
    if conn.link.sent_end_offset < offset:
        conn.link.sending(conn.link.transfer_from_offset,
                          offset - conn.link.transfer_from_offset)
        conn.link.sent(conn.link.transfer_from_offset,
                       offset - conn.link.transfer_from_offset, 0)
    assert conn.link.report(offset, MASTER_MAX, 0, 0).acked
    return core.acked(conn).replicated_offset


def test_nothing_is_replicated_without_slaves() -> None:
    """No slave: -1, no put may wait (SLAVE_NOT_AVAILABLE), even for an empty log."""
    core = master()
    assert core.replicated_offset == -1 and core.acked(Conn()).replicated_offset == -1
    assert not core.is_slave_ok(0) and core.put_deadline_ms(0, 5) is None


def test_one_slave_needed_is_the_most_advanced_one() -> None:
    """in_sync_replicas 2: the replicated offset is the highest ack among slaves."""
    core = master(in_sync_replicas=2)
    ahead, behind = stream(core, "a"), stream(core, "b")
    ack(core, behind, 90)
    assert ack(core, ahead, 100) == 100 and core.replicated_offset == 100
    assert ack(core, behind, 95) == 100


def test_two_slaves_needed_is_the_lower_of_the_two_highest() -> None:
    """in_sync_replicas 3: the second-highest ack of distinct slaves."""
    core = master(in_sync_replicas=3)
    first = stream(core, "a")
    assert core.replicated_offset == -1
    second, third = stream(core, "b"), stream(core, "c")
    ack(core, first, 100)
    ack(core, second, 50)
    assert ack(core, third, 70) == 70


def test_one_slave_on_two_links_counts_once() -> None:
    """Two open links of one slave id (a half-open old one not yet closed) count as one
    slave, with the higher ack of the two."""
    core = master(in_sync_replicas=3)
    old = stream(core, "a")
    ack(core, old, 100)
    new = Conn(SlaveLink("addr-a2", 0))
    core.opened(new)
    new.link.identified("a")
    refusal, stale = core.handshake_done(new)
    assert refusal == "" and stale == [old]  # the caller closes the stale link
    new.link.agreed(Decision(Agreement.AGREED, 100), 100)
    new.link.report(100, MASTER_MAX, 0, 0)
    assert core.acked(new).replicated_offset == -1  # still only one slave
    other = stream(core, "b")
    assert ack(core, other, 80) == 80
    assert ack(core, new, 100) == 80


def test_a_link_closed_but_not_yet_reported_closed_does_not_count() -> None:
    """Between a link's close and the core hearing of it (the caller's next step), another
    ack does not count the closed link."""
    core = master(in_sync_replicas=2)
    gone, other = stream(core, "a"), connect(core, "b")
    ack(core, gone, 300)
    gone.link.close("socket error")
    assert core.acked(other).replicated_offset == -1


def test_a_closed_link_stops_counting_and_its_ack_is_gone() -> None:
    """Closing the only slave's link takes the replicated offset back to -1 at once."""
    core = master()
    conn = stream(core, "a")
    ack(core, conn, 300)
    conn.link.close("slave closed the connection")
    assert core.closed(conn) is None
    assert core.replicated_offset == -1 and core.connections == []
    assert core.closed(conn) is None  # a second report of the close changes nothing


def test_only_transferring_links_count() -> None:
    """A slotted link still waiting for its first report is not counted."""
    core = master()
    waiting = connect(core, "a")
    assert core.acked(waiting).replicated_offset == -1


def test_handshakes_are_bounded_oldest_dropped() -> None:
    """Past ha_handshakes_max connections in the handshake, the oldest is returned to drop,
    and counted each time; a slotted one is not in the handshake any more."""
    core = master(ha_handshakes_max=2)
    first, second, third = Conn(), Conn(), Conn()
    assert core.opened(first) is None and core.opened(second) is None
    assert core.opened(third) is first and core.handshake_evicted_count == 1
    first.link.close("dropped")
    core.closed(first)
    assert core.opened(Conn()) is second and core.handshake_evicted_count == 2
    core2 = master(ha_handshakes_max=1)
    slotted = connect(core2, "a")
    assert slotted.link.state is LinkState.WAITING_REPORT
    assert core2.opened(Conn()) is None


def test_slots_are_bounded_and_a_refusal_is_counted() -> None:
    """Past ha_connections_max slotted slaves a new one is refused with a reason, counted,
    stays in the handshake (no slot), and holds none."""
    core = master(ha_connections_max=2, in_sync_replicas=2)
    connect(core, "a")
    connect(core, "b")
    third = Conn(SlaveLink("addr-c", 0))
    core.opened(third)
    third.link.identified("c")
    refusal, stale = core.handshake_done(third)
    assert refusal == "no slot: 2 slaves connected already" and stale == []
    assert third.link.state is LinkState.HANDSHAKE
    assert core.refused_connection_count == 1 and core.slot_count == 2
    fourth = Conn(SlaveLink("addr-d", 0))
    core.opened(fourth)
    fourth.link.identified("d")
    assert core.handshake_done(fourth)[0] and core.refused_connection_count == 2


def test_a_reconnecting_slave_takes_its_own_slot_when_all_are_taken() -> None:
    """With every slot taken, the same slave id reconnecting is not refused: its stale link
    does not count toward the slots."""
    core = master(ha_connections_max=1)
    old = connect(core, "a")
    new = Conn(SlaveLink("addr-a2", 0))
    core.opened(new)
    new.link.identified("a")
    assert core.handshake_done(new) == ("", [old])
    assert core.refused_connection_count == 0


def test_closes_are_counted_and_refusals_kept_bounded() -> None:
    """A fake ack and a protocol error are counted; a refused slave is recorded with its
    state, reason and offset, the newest kept up to the bound."""
    core = master()
    for count in (1, 2):  # each one counts
        liar = stream(core, f"liar{count}")
        liar.link.report(MASTER_MAX + 1, MASTER_MAX, 0, 0)
        liar.link.close("ack beyond")
        assert core.closed(liar) is None and core.ack_beyond_max_count == count
        broken = Conn()
        core.opened(broken)
        broken.link.close("protocol error: bad tag")
        core.closed(broken)
        assert core.protocol_error_count == count
    plain = stream(core, "plain")
    plain.link.close("slave closed the connection")
    core.closed(plain)
    assert (core.ack_beyond_max_count, core.protocol_error_count) == (2, 2)
    for offset in range(40):
        ahead = connect(core, f"s{offset}")
        ahead.link.report(offset + 1, MASTER_MAX, 0, 0)
        ahead.link.close("ahead")
        assert core.closed(ahead) == RejectedSlave(f"addr-s{offset}", "ahead_of_master",
                                                   "ahead", offset + 1)
    assert [r.request_offset for r in core.rejected] == list(range(9, 41))


def test_a_put_waits_only_within_the_fall_behind_bound() -> None:
    """A put waits (with its deadline) while its end is less than the bound past the
    replicated offset, an empty master's slave at 0 included; beyond it, or with no slave,
    SLAVE_NOT_AVAILABLE."""
    core = master(ha_slave_fall_behind_bytes_max=1000, slave_timeout_ms=3000)
    assert core.put_deadline_ms(0, 10) is None
    conn = stream(core, "a")
    assert core.replicated_offset == 0 and core.is_slave_ok(0)
    assert core.put_deadline_ms(999, 10) == 3010
    assert core.put_deadline_ms(1000, 10) is None
    ack(core, conn, 500)
    assert core.is_slave_ok(1499) and not core.is_slave_ok(1500)


def test_agreement_is_decided_on_the_masters_epochs() -> None:
    """The core answers a slave's epochs from its own history: an empty slave agrees at 0, a
    foreign one diverges."""
    core = master()
    assert core.agree([], 0, 500, 0) == Decision(Agreement.AGREED, 0)
    assert core.agree([Epoch(1, 0, b"f" * 16)], 10, 500, 0).agreement is Agreement.DIVERGED
    assert core.agree(EPOCHS, 300, 500, 0) == Decision(Agreement.AGREED, 300)


def test_in_sync_count() -> None:
    """The in-sync count is the eligible links."""
    core = master(ha_slave_fall_behind_bytes_max=100)
    a, _ = stream(core, "a"), stream(core, "b")
    ack(core, a, 60)
    assert core.in_sync_count(100) == 1 and core.in_sync_count(99) == 2


def test_an_empty_slave_streamed_from_a_retained_min_offset_cannot_complete_older_waits(
        ) -> None:
    """An empty slave that starts at the master's min offset (retention removed what came
    before) never holds a message below it: its first ack says so once (waits ending there
    answer FLUSH_SLAVE_TIMEOUT), and a slave streamed from its own offset says nothing."""
    core = master()
    empty = connect(core, "a")
    assert empty.link.report(0, MASTER_MAX, 4096, 0).started
    assert core.acked(empty) == AckStep(0, 4096)
    assert core.acked(empty) == AckStep(0, 0)  # said once
    at_zero = connect(core, "b")
    at_zero.link.report(0, MASTER_MAX, 0, 0)
    assert core.acked(at_zero).unreplicable_end_offset == 0


def test_retention_holds_the_lowest_ack_of_the_slaves_in_sync() -> None:
    """No slave: nothing held. Slaves in sync hold their lowest ack; a slave further behind
    than ha_slave_fall_behind_bytes_max holds nothing, nor does a closed one."""
    core = master(in_sync_replicas=2, ha_slave_fall_behind_bytes_max=1000)
    assert core.retention_hold(MASTER_MAX) is None
    near, far = stream(core, "near"), stream(core, "far")
    ack(core, near, MASTER_MAX - 999)
    ack(core, far, MASTER_MAX - 1000)
    assert core.retention_hold(MASTER_MAX) == MASTER_MAX - 999
    ack(core, far, MASTER_MAX - 10)
    assert core.retention_hold(MASTER_MAX) == MASTER_MAX - 999
    near.link.close("gone")
    core.closed(near)
    assert core.retention_hold(MASTER_MAX) == MASTER_MAX - 10
