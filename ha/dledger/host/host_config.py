"""Settings of a DLedger host: times in ms, mapped onto the node's ticks, and the host's bounds."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ha.dledger.core.config import DLedgerConfig
from store.errors import ConfigError

# The node's defaults are the one source of the timing (docs/dledger.md, "Failover timing");
# here they are written in ms, the unit of every other setting.
_NODE = DLedgerConfig()


@dataclass(frozen=True, slots=True)
class HostConfig:
    tick_ms: int = _NODE.tick_ms
    # A follower that heard no leader for a random time in [E, 2E) starts a pre-vote.
    election_timeout_ms: int = _NODE.election_timeout_ticks * _NODE.tick_ms
    heartbeat_interval_ms: int = _NODE.heartbeat_ticks * _NODE.tick_ms
    push_timeout_ms: int = _NODE.push_timeout_ticks * _NODE.tick_ms
    # Past it an append is answered WAIT_QUORUM_ACK_TIMEOUT (indeterminate).
    quorum_deadline_ms: int = _NODE.quorum_deadline_ticks * _NODE.tick_ms
    # How long a transfer target may take to catch up before NOT_CAUGHT_UP.
    transfer_catchup_ms: int = _NODE.transfer_catchup_ticks * _NODE.tick_ms
    # Client appends not yet answered (in the inbox or waiting for a quorum); past it
    # LEADER_PENDING_FULL at once. The node's own bound is set to the same number.
    pending_appends_max: int = _NODE.pending_appends_max
    inbox_max: int = 8192  # peer messages and appends waiting for the host thread
    # Events handled before one group commit (one storage.sync()); bounds a round's latency.
    round_events_max: int = 512
    # True (Raft's rule, and SYNC_FLUSH): a member syncs its log writes before anything that
    # rests on them leaves (a push answer, a vote, its own count toward a commit). False
    # (ASYNC_FLUSH, as DLedger itself runs): they rest on the page cache, which a killed
    # process keeps, and the log is synced every `sync_interval_ms`; only a machine crash of
    # a majority within that window can lose an acknowledged entry (docs/dledger.md).
    sync_before_ack: bool = True
    sync_interval_ms: int = 500
    # A leader holds retention for the peers less than this far behind (their match), no
    # more: a peer down or far behind is reset from the base when it returns.
    retention_hold_behind_bytes_max: int = 256 * 1024 * 1024

    def __post_init__(self) -> None:
        checks = [
            (1 <= self.tick_ms <= 10_000, "tick_ms", "must be in [1, 10000]"),
            (self.election_timeout_ms >= self.tick_ms, "election_timeout_ms", "must be >= tick_ms"),
            (self.tick_ms <= self.heartbeat_interval_ms < self.election_timeout_ms,
             "heartbeat_interval_ms", "must be in [tick_ms, election_timeout_ms)"),
            (self.push_timeout_ms >= self.tick_ms, "push_timeout_ms", "must be >= tick_ms"),
            (self.quorum_deadline_ms >= self.tick_ms, "quorum_deadline_ms", "must be >= tick_ms"),
            (self.transfer_catchup_ms >= self.tick_ms, "transfer_catchup_ms",
             "must be >= tick_ms"),
            (self.pending_appends_max >= 1, "pending_appends_max", "must be >= 1"),
            (self.inbox_max >= 1, "inbox_max", "must be >= 1"),
            (self.round_events_max >= 1, "round_events_max", "must be >= 1"),
            (self.sync_interval_ms >= 1, "sync_interval_ms", "must be >= 1"),
        ]
        for ok, name, rule in checks:
            if not ok:
                raise ConfigError(f"dledger {name}: {rule} (got {getattr(self, name)!r})")

    def ticks(self, duration_ms: int) -> int:
        """Whole ticks covering `duration_ms` (rounded up, so a deadline is never shortened)."""
        return -(-duration_ms // self.tick_ms)

    def node_config(self, base: DLedgerConfig | None = None) -> DLedgerConfig:
        """`base` (counts and bounds) with every time of this config turned into ticks."""
        return dataclasses.replace(
            base or DLedgerConfig(),
            tick_ms=self.tick_ms,
            election_timeout_ticks=self.ticks(self.election_timeout_ms),
            heartbeat_ticks=self.ticks(self.heartbeat_interval_ms),
            push_timeout_ticks=self.ticks(self.push_timeout_ms),
            quorum_deadline_ticks=self.ticks(self.quorum_deadline_ms),
            transfer_catchup_ticks=self.ticks(self.transfer_catchup_ms),
            pending_appends_max=self.pending_appends_max,
        )
