"""One slave's link as the master sees it: the decisions of the seed's HAConnection.

A `SlaveLink` is driven by the connection that owns it (ha/connection.py, or the simulation):
the handshake named the slave (`identified`), the service gave it a slot (`slotted`), the
epochs were compared (`agreed`), a report arrived (`report`), a batch is about to go out and
went out (`sending`, `sent`), a heartbeat is due (`heartbeat_due`), the link closed (`close`).
Each returns what the caller must do; nothing here reads a clock or touches a socket: the time
is an argument.

The rules that make an acknowledgement true live here:
- a first report above the offset agreed in the epoch exchange is a slave that did not cut
  back (ahead_of_master): refused, it never acks;
- an ack above the master's max offset, or above what this link was sent, is a fake: the link
  closes, so only bytes the slave was given can ever be acknowledged;
- acks never move backwards.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from ha.classic.core.epochs import Agreement, Decision


class LinkState(enum.Enum):
    HANDSHAKE = "handshake"
    WAITING_REPORT = "waiting_report"
    TRANSFERRING = "transferring"
    NEEDS_RESET = "needs_reset"  # the slave wants an offset the master no longer holds
    AHEAD_OF_MASTER = "ahead_of_master"  # the slave reports more than it agreed to keep
    DIVERGED = "diverged"  # no epoch in common: the slave's bytes are not this master's
    CLOSED = "closed"


REFUSED_STATES = (LinkState.NEEDS_RESET, LinkState.AHEAD_OF_MASTER, LinkState.DIVERGED)


@dataclass(frozen=True, slots=True)
class ReportOutcome:
    """What one report did: `close_reason` is "" when the link goes on; `acked` says the
    report counts as an acknowledgement (the service recomputes what is replicated);
    `started` says it was the first one and the writer may start streaming."""

    close_reason: str = ""
    acked: bool = False
    started: bool = False


_ACKED = ReportOutcome(acked=True)
_STARTED = ReportOutcome(acked=True, started=True)


class SlaveLink:
    def __init__(self, address: str, connected_ms: int) -> None:
        self.address = address
        self.state = LinkState.HANDSHAKE
        self.slave_id = ""  # hex, known once the handshake is done
        self.agreed_offset = -1  # where the slave's log agrees with ours (epoch exchange)
        self.request_offset = -1  # the slave's first report (or its max when refused early)
        self.ack_offset = -1
        self.transfer_from_offset = -1  # the next byte to send
        # One past the last byte handed to the socket; an ack above it was never sent here.
        self.sent_end_offset = -1
        self.bytes_sent_total = 0
        self.last_ack_ms: int | None = None
        self.last_write_ms = connected_ms
        self.connected_ms = connected_ms
        self.close_reason = ""
        self.ack_beyond_max = False
        self.is_open = True
        # An empty slave streamed from the master's min offset never gets what retention
        # removed below it: waits that end there cannot count it (MasterCore.acked).
        self.missing_below_offset = 0

    # -- the handshake and the epochs ------------------------------------------------------

    def identified(self, slave_id: str) -> None:
        """The handshake proved the slave: it is named by its stable id from now on."""
        assert self.state is LinkState.HANDSHAKE and slave_id
        self.slave_id = slave_id

    def slotted(self) -> None:
        """The link holds one of the master's slots; it waits for the epoch exchange."""
        if self.state is LinkState.HANDSHAKE:
            self.state = LinkState.WAITING_REPORT

    def agreed(self, decision: Decision, slave_max_offset: int) -> str:
        """The epoch exchange's outcome, sent to the slave; a reason to close when the slave
        cannot be streamed at all (needs_reset, diverged), "" otherwise."""
        self.agreed_offset = decision.agreed_offset
        if decision.agreement is Agreement.AGREED:
            return ""
        self.request_offset = slave_max_offset
        if decision.agreement is Agreement.NEEDS_RESET:
            self.state = LinkState.NEEDS_RESET
            return (f"slave at {slave_max_offset} agrees with the master only up to "
                    f"{decision.agreed_offset}, which the master no longer holds; "
                    "it needs a reset")
        self.state = LinkState.DIVERGED
        return (f"slave at {slave_max_offset} shares no epoch with the master: its log is not "
                "this master's history (a foreign or reset master); it needs a reset")

    # -- reports ---------------------------------------------------------------------------

    def report(self, offset: int, master_max_offset: int, master_min_offset: int,
               now_ms: int) -> ReportOutcome:
        """A report from the slave: its first says where to stream from, every other one is
        an acknowledgement of what it holds."""
        if self.request_offset < 0:
            return self._first_report(offset, master_max_offset, master_min_offset, now_ms)
        if offset > master_max_offset:
            self.ack_beyond_max = True
            return self._refuse(f"ack {offset} is beyond the master's max offset "
                                f"{master_max_offset}")
        if offset > self.sent_end_offset:
            self.ack_beyond_max = True
            return self._refuse(f"ack {offset} is beyond what this connection was sent "
                                f"({self.sent_end_offset})")
        if offset >= self.ack_offset:
            self.ack_offset = offset
        self.last_ack_ms = now_ms
        return _ACKED

    def _first_report(self, offset: int, master_max_offset: int, master_min_offset: int,
                      now_ms: int) -> ReportOutcome:
        """Where the stream starts: an empty slave gets the whole retained history."""
        self.request_offset = offset
        if offset > self.agreed_offset:
            self.state = LinkState.AHEAD_OF_MASTER
            return self._refuse(f"slave at {offset} is ahead of the offset {self.agreed_offset} "
                                "where its log agrees with the master's (it did not cut back)")
        if offset == 0:
            start = master_min_offset
            self.missing_below_offset = start
        elif offset < master_min_offset:
            self.state = LinkState.NEEDS_RESET
            return self._refuse(f"slave at {offset} wants data the master no longer holds "
                                f"(min offset {master_min_offset}); it needs a reset")
        else:
            start = offset
        assert start <= max(master_max_offset, master_min_offset), (start, master_max_offset)
        self.ack_offset = offset
        self.last_ack_ms = now_ms
        self.transfer_from_offset = start
        self.sent_end_offset = start
        self.state = LinkState.TRANSFERRING
        return _STARTED

    @staticmethod
    def _refuse(reason: str) -> ReportOutcome:
        return ReportOutcome(close_reason=reason)

    # -- sending ---------------------------------------------------------------------------

    def bytes_to_send(self, master_max_offset: int) -> int:
        """How many bytes the master holds past what this link sent (0 before the first
        report, or when caught up)."""
        if self.state is not LinkState.TRANSFERRING:
            return 0
        return max(0, master_max_offset - self.transfer_from_offset)

    def sending(self, start_offset: int, size_bytes: int) -> None:
        """A batch [start, start + size) is handed to the socket now: from this moment an ack
        up to its end is one the slave may send. Called before the bytes go out, so an ack
        can never beat it."""
        assert start_offset == self.transfer_from_offset and size_bytes > 0
        self.sent_end_offset = start_offset + size_bytes

    def sent(self, start_offset: int, size_bytes: int, now_ms: int) -> None:
        """The batch went out whole: the next one starts after it."""
        assert self.sent_end_offset == start_offset + size_bytes
        self.transfer_from_offset = start_offset + size_bytes
        self.bytes_sent_total += size_bytes
        self.last_write_ms = now_ms

    def heartbeat_due(self, now_ms: int, interval_ms: int) -> bool:
        """Nothing was written for a heartbeat interval (heartbeats follow writes)."""
        return now_ms - self.last_write_ms >= interval_ms

    def heartbeat_sent(self, now_ms: int) -> None:
        self.last_write_ms = now_ms

    def source_gone(self, start_offset: int) -> str:
        """Retention removed the bytes this link was about to send: it needs a reset."""
        self.state = LinkState.NEEDS_RESET
        return f"offset {start_offset} is no longer held by the master"

    # -- closing and views -----------------------------------------------------------------

    def close(self, reason: str, state: LinkState = LinkState.CLOSED) -> bool:
        """Close once (False when it was closed already). A refused link keeps the state that
        names its refusal."""
        if not self.is_open:
            return False
        self.is_open = False
        self.close_reason = reason
        if state is not LinkState.CLOSED or self.state not in REFUSED_STATES:
            self.state = state
        return True

    @property
    def is_refused(self) -> bool:
        return self.state in REFUSED_STATES

    def is_eligible(self, master_max_offset: int, fall_behind_bytes_max: int) -> bool:
        """Connected, transferring and less than the allowed bytes behind the master."""
        return (
            self.is_open
            and self.state is LinkState.TRANSFERRING
            and self.ack_offset >= 0
            and master_max_offset - self.ack_offset < fall_behind_bytes_max
        )

    def diff_bytes(self, master_max_offset: int) -> int:
        """How far the slave's ack is behind the master (all of it before the first ack)."""
        acked = self.ack_offset if self.ack_offset >= 0 else 0
        return max(0, master_max_offset - acked)
