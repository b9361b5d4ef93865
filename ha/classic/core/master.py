"""The master's view of its slaves: the decisions of the seed's HAService (slots, identity,
epochs, what is replicated) and of its GroupTransferService (what a SYNC_MASTER put waits for).

`MasterCore` holds the master's connections, each with its `SlaveLink`
(ha/classic/core/link.py), and is told what happened to them: a connection opened, finished
its handshake, was acknowledged, closed. It answers what the caller must do (the connection to
drop, the stale links to close, the refusal to send) and keeps `replicated_offset`: the offset
that `in_sync_replicas - 1` distinct slaves have acknowledged, counted per slave id so that one
slave never counts twice. The caller (ha/service.py, or the simulation) serializes the calls.

A SYNC_MASTER put asks `put_deadline_ms`: None means SLAVE_NOT_AVAILABLE at once (fewer
eligible slaves than needed, or the needed ones too far behind); otherwise the put waits until
`replicated_offset` reaches its end (PUT_OK) or the deadline passes (FLUSH_SLAVE_TIMEOUT), which
the store's `OffsetWaits` applies: every ack completes every wait at or below it at once.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from ha.classic.core.epochs import Decision, Epoch, decide
from ha.classic.core.link import LinkState, SlaveLink
from ha.config import HAConfig

REJECTED_MAX = 32  # refused slaves kept for /admin/ha, the newest first dropped last


class HoldsLink(Protocol):
    """A connection as the core sees it: whatever carries the bytes, with its link."""

    @property
    def link(self) -> SlaveLink: ...


C = TypeVar("C", bound=HoldsLink)


@dataclass(frozen=True, slots=True)
class AckStep:
    """What an ack decides: waits ending at or below `unreplicable_end_offset` (when > 0)
    answer FLUSH_SLAVE_TIMEOUT, then those at or below `replicated_offset` PUT_OK."""

    replicated_offset: int
    unreplicable_end_offset: int


@dataclass(frozen=True, slots=True)
class RejectedSlave:
    address: str
    state: str
    reason: str
    request_offset: int


class MasterCore(Generic[C]):
    def __init__(self, config: HAConfig, epochs: Sequence[Epoch]) -> None:
        self.config = config
        self.epochs = list(epochs)
        self.connections: list[C] = []
        self.replicated_offset = -1
        self.rejected: deque[RejectedSlave] = deque(maxlen=REJECTED_MAX)
        self.refused_connection_count = 0
        self.handshake_evicted_count = 0
        self.ack_beyond_max_count = 0
        self.protocol_error_count = 0
        self._slaves_needed = config.slaves_needed
        self._fall_behind_bytes_max = config.ha_slave_fall_behind_bytes_max
        self._slave_timeout_ms = config.slave_timeout_ms

    # -- connections -----------------------------------------------------------------------

    def opened(self, connection: C) -> C | None:
        """A new connection starts its handshake holding no slot. When `ha_handshakes_max`
        are in the handshake already, the oldest of them is returned: the caller drops it, so
        sockets that connect and say nothing cannot lock a slave out."""
        waiting = [c for c in self.connections if c.link.state is LinkState.HANDSHAKE]
        self.connections.append(connection)
        if len(waiting) < self.config.ha_handshakes_max:
            return None
        self.handshake_evicted_count += 1
        return waiting[0]

    def handshake_done(self, connection: C) -> tuple[str, list[C]]:
        """A slot for a slave that proved itself, or a reason to refuse it; and the stale
        links of the same slave id (a reconnect after a cut, a half-open socket) that the
        caller closes, so the slave counts once."""
        slave_id = connection.link.slave_id
        stale = [c for c in self.connections
                 if c is not connection and c.link.slave_id == slave_id]
        slotted = [c for c in self.connections if c is not connection and c not in stale
                   and c.link.state is not LinkState.HANDSHAKE]
        if len(slotted) >= self.config.ha_connections_max:
            self.refused_connection_count += 1
            return f"no slot: {len(slotted)} slaves connected already", []
        connection.link.slotted()
        return "", stale

    def agree(self, slave_history: Sequence[Epoch], slave_max_offset: int,
              master_max_offset: int, master_min_offset: int) -> Decision:
        """Where the slave's log agrees with ours: it cuts back to there before it is
        streamed, or it is refused (needs_reset, diverged)."""
        return decide(self.epochs, master_max_offset, master_min_offset, slave_history,
                      slave_max_offset)

    def acked(self, connection: C) -> AckStep:
        """A report on `connection` counted as an ack (the first one starts the stream): the
        new replicated offset, which completes every wait at or below it.

        An empty slave is streamed from the master's min offset: it never holds what
        retention removed below that, yet its acks are above it. So when it starts, the
        waits that end at or below its start are answered FLUSH_SLAVE_TIMEOUT first (they
        are stored; their replication cannot be promised any more)."""
        link = connection.link
        unreplicable_end_offset, link.missing_below_offset = link.missing_below_offset, 0
        self.replicated_offset = self._replicated_now()
        return AckStep(self.replicated_offset, unreplicable_end_offset)

    def closed(self, connection: C) -> RejectedSlave | None:
        """A connection closed: it stops counting at once. Returns the rejection to record
        when the slave was refused by name (needs_reset, ahead_of_master, diverged)."""
        if connection in self.connections:
            self.connections.remove(connection)
        self.replicated_offset = self._replicated_now()
        link = connection.link
        if link.ack_beyond_max:
            self.ack_beyond_max_count += 1
        if link.close_reason.startswith("protocol error"):
            self.protocol_error_count += 1
        if not link.is_refused:
            return None
        rejected = RejectedSlave(link.address, link.state.value, link.close_reason,
                                 link.request_offset)
        self.rejected.append(rejected)
        return rejected

    def _replicated_now(self) -> int:
        ack_by_slave: dict[str, int] = {}
        for connection in self.connections:
            link = connection.link
            if link.is_open and link.state is LinkState.TRANSFERRING:
                ack_by_slave[link.slave_id] = max(link.ack_offset,
                                                  ack_by_slave.get(link.slave_id, -1))
        if len(ack_by_slave) < self._slaves_needed:
            return -1
        return sorted(ack_by_slave.values(), reverse=True)[self._slaves_needed - 1]

    # -- puts ------------------------------------------------------------------------------

    def is_slave_ok(self, end_offset: int) -> bool:
        """Enough distinct slaves acknowledged, and `end_offset` less than
        `ha_slave_fall_behind_bytes_max` past what they acknowledged."""
        replicated = self.replicated_offset
        return replicated >= 0 and end_offset - replicated < self._fall_behind_bytes_max

    def put_deadline_ms(self, end_offset: int, now_ms: int) -> int | None:
        """When a SYNC_MASTER put ending at `end_offset` stops waiting for its slaves
        (FLUSH_SLAVE_TIMEOUT); None when it does not wait at all: SLAVE_NOT_AVAILABLE."""
        if not self.is_slave_ok(end_offset):
            return None
        return now_ms + self._slave_timeout_ms

    # -- views -----------------------------------------------------------------------------

    @property
    def slot_count(self) -> int:
        """Slaves holding a slot (past the handshake)."""
        return sum(1 for c in self.connections if c.link.state is not LinkState.HANDSHAKE)

    def retention_hold(self, master_max_offset: int) -> int | None:
        """What retention must keep: the lowest ack of the slaves in sync (connected,
        transferring, less than `ha_slave_fall_behind_bytes_max` behind). A file they still
        read is not removed under them (it would refuse them as needs_reset one file behind);
        a slave further behind holds nothing, so the hold never passes that many bytes.
        None: no slave in sync, nothing held."""
        acks = [c.link.ack_offset for c in self.connections
                if c.link.is_eligible(master_max_offset, self._fall_behind_bytes_max)]
        return min(acks) if acks else None

    def in_sync_count(self, master_max_offset: int) -> int:
        return sum(1 for c in self.connections
                   if c.link.is_eligible(master_max_offset, self._fall_behind_bytes_max))
