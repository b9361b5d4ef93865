"""The slave's view of its master: the decisions of the seed's HAClient.

`SlaveCore` is driven by the slave's HA client (ha/client.py, or the simulation) through one
connection's life: the epoch exchange's answer (`agreement`: refused by name, or the offset to
cut back to before anything is applied), the link up (`linked`), bytes read (`received`), each
frame (`frame`, then `applied` with the store's answer), a report sent (`reported`), and the
time checks (`report_due`: heartbeats follow writes; `silent_too_long`: housekeeping follows
reads, RocketMQ #1082), then `disconnected`. Time is an argument; the store and the socket
stay with the caller.

What it promises: a slave cuts its log back to the agreed offset before it applies a byte of
the master's (so it never reports past that offset, and a slave whose bytes differ from its
master's never shows a diff of 0); it applies a frame only at its own end; and a report is
what the slave holds as its flush type promises (`report_offset`).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

from ha.classic.core.epochs import Agreement, Decision, Epoch
from ha.config import HAConfig
from store.status import AppendRawStatus

# The slave's own store refused the bytes: it reconnects (the master resends from the offset
# it reports) every ha_reconnect_interval_ms and applies again once the store can write.
STORE_REFUSALS = frozenset({AppendRawStatus.CREATE_MAPPED_FILE_FAILED,
                            AppendRawStatus.STORE_NOT_WRITABLE})


class ApplyOutcome(enum.Enum):
    APPLIED = enum.auto()
    STORE_REFUSED = enum.auto()  # a full disk, a write fault: reconnect and retry later
    MISMATCH = enum.auto()  # not at the slave's end: a protocol error, reconnect


@dataclass(frozen=True, slots=True)
class AgreementStep:
    """What the slave does with the master's answer to its epochs: `refusal` names why the
    master will not stream to it (it stops, its log untouched); otherwise it cuts its log back
    to `cut_to_offset` when that is not None, durably, and only then keeps `history`."""

    refusal: str | None
    cut_to_offset: int | None
    history: Sequence[Epoch]


class SlaveCore:
    def __init__(self, config: HAConfig, sync_flush: bool = False) -> None:
        # SYNC_FLUSH promises that what the slave acknowledges is on its disk.
        self._sync_flush = sync_flush
        self._heartbeat_interval_ms = config.ha_send_heartbeat_interval_ms
        self._housekeeping_interval_ms = config.ha_housekeeping_interval_ms
        self.connected = False
        self.agreed_offset = -1  # this connection's agreement (-1: none yet)
        self.master_offset_seen = 0
        self.last_read_ms: int | None = None
        self.last_write_ms: int | None = None
        self.applied_bytes_total = 0
        self.truncated_bytes_total = 0
        self.master_epoch = 0
        self.refusal: str | None = None  # why the master last refused to stream to us
        self.apply_error: str | None = None  # why the store does not take the bytes now

    def agreement(self, decision: Decision, master_history: Sequence[Epoch],
                  local_max_offset: int, local_min_offset: int) -> AgreementStep:
        """The master's decision on our epochs and its history, given what the log holds:
        [local_min_offset, local_max_offset)."""
        if decision.agreement is not Agreement.AGREED:
            self.refusal = decision.agreement.name.lower()
            return AgreementStep(self.refusal, None, ())
        self.refusal = None
        agreed = decision.agreed_offset
        assert agreed >= 0, decision
        self.agreed_offset = agreed
        self.master_epoch = master_history[-1].number if master_history else 0
        if agreed >= local_max_offset:
            return AgreementStep(None, None, master_history)
        # Below the first byte held (retention, or an empty slave that started at its
        # master's min offset) the cut empties the log: only what it held is lost.
        self.truncated_bytes_total += local_max_offset - max(agreed, local_min_offset)
        return AgreementStep(None, agreed, master_history)

    def linked(self, now_ms: int) -> None:
        """The handshake and the epoch exchange are done: the stream starts."""
        assert self.agreed_offset >= 0
        self.connected = True
        self.last_read_ms = now_ms

    def disconnected(self) -> None:
        self.connected = False
        self.agreed_offset = -1

    def received(self, now_ms: int) -> None:
        """Bytes came from the master (frames or part of one)."""
        self.last_read_ms = now_ms

    def frame(self, offset: int, size_bytes: int) -> bool:
        """A whole frame from the master: True when it carries bytes to apply at `offset`
        (False for a heartbeat)."""
        self.master_offset_seen = max(self.master_offset_seen, offset + size_bytes)
        return size_bytes > 0

    def applied(self, status: AppendRawStatus, size_bytes: int) -> ApplyOutcome:
        """The store's answer to a frame's bytes."""
        if status is AppendRawStatus.OK:
            self.applied_bytes_total += size_bytes
            self.apply_error = None
            return ApplyOutcome.APPLIED
        if status in STORE_REFUSALS:
            return ApplyOutcome.STORE_REFUSED
        return ApplyOutcome.MISMATCH

    def store_refused(self, reason: str) -> None:
        self.apply_error = reason

    @property
    def flushes_before_reporting(self) -> bool:
        """Whether the caller flushes what it applied before it reports (SYNC_FLUSH)."""
        return self._sync_flush

    def report_offset(self, local_max_offset: int, flushed_offset: int) -> int:
        """What a report says the slave holds: its max offset, or under SYNC_FLUSH what of it
        is flushed, since a SYNC_MASTER counts the report as the message being held there."""
        assert self.agreed_offset >= 0, "a report before the epochs were agreed"
        return min(local_max_offset, flushed_offset) if self._sync_flush else local_max_offset

    def reported(self, now_ms: int) -> None:
        self.last_write_ms = now_ms

    def report_due(self, now_ms: int) -> bool:
        """Nothing was written to the master for a heartbeat interval."""
        last_write_ms = self.last_write_ms
        return last_write_ms is None or now_ms - last_write_ms >= self._heartbeat_interval_ms

    def silent_too_long(self, now_ms: int) -> bool:
        """Nothing was read from the master for the housekeeping interval."""
        assert self.last_read_ms is not None
        return now_ms - self.last_read_ms > self._housekeeping_interval_ms

    def diff_bytes(self, local_max_offset: int) -> int:
        return max(0, self.master_offset_seen - local_max_offset)
