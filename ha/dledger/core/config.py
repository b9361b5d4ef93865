"""Settings of a DLedger node, all in ticks, counts or bytes; the host turns one tick every
`tick_ms` (the node itself never reads a clock).

Timing defaults (docs/dledger.md, "Failover timing"): a 50 ms tick, heartbeats every 3 ticks
(150 ms) and election timeouts drawn from [12, 24) ticks (0.6-1.2 s), so a follower misses at
least 4 heartbeats before it suspects its leader. In the simulation a healthy group never
starts a second election, and a client's first OK on the next leader comes about 1.0 s after
the leader dies at the median (1.75 s with every hop delayed 0-150 ms): within the 2 s target.
"""

from __future__ import annotations

from dataclasses import dataclass

MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class DLedgerConfig:
    # The host's tick; the node counts ticks only. Every *_ticks setting is a multiple of it.
    tick_ms: int = 50
    # A follower that heard no leader for a random number of ticks in
    # [election_timeout_ticks, 2 * election_timeout_ticks) starts a pre-vote.
    election_timeout_ticks: int = 12
    heartbeat_ticks: int = 3
    # A push (or probe) not acknowledged within this many ticks is sent again from the match.
    push_timeout_ticks: int = 10
    inflight_pushes_max: int = 8  # pipelined pushes per peer
    push_entries_max: int = 64  # entries per push (the batch)
    # Payload bytes per push (the frame bound the wire derives its limit from); a push always
    # carries at least one entry, so one entry larger than this still goes, alone.
    push_bytes_max: int = 1 * MIB
    # A peer more than far_behind_entries behind the leader's end (catching up, e.g. from the
    # base) gets at most far_behind_push_bytes_per_tick payload bytes per tick (at least one
    # entry), so it cannot take the budget of the caught-up peers that commits depend on
    # (DLedger's peerPushQuota, 20 MB/s: 1 MiB per 50 ms tick).
    far_behind_entries: int = 1024
    far_behind_push_bytes_per_tick: int = 1 * MIB
    pending_appends_max: int = 256  # client appends waiting for a quorum
    quorum_deadline_ticks: int = 50  # past it, WAIT_QUORUM_ACK_TIMEOUT (indeterminate)
    deferred_messages_max: int = 1024  # votes and acks waiting for a write; past it, dropped
    # Leadership transfer: how long the target may take to catch up before the transfer is
    # refused (NOT_CAUGHT_UP); client appends are refused meanwhile (LEADER_TRANSFERRING).
    transfer_catchup_ticks: int = 20

    def __post_init__(self) -> None:
        for name in ("tick_ms", "election_timeout_ticks", "heartbeat_ticks",
                     "push_timeout_ticks", "inflight_pushes_max", "push_entries_max",
                     "push_bytes_max", "far_behind_entries", "far_behind_push_bytes_per_tick",
                     "pending_appends_max", "quorum_deadline_ticks", "deferred_messages_max",
                     "transfer_catchup_ticks"):
            if getattr(self, name) < 1:
                raise ValueError(f"DLedgerConfig.{name} must be >= 1")
        if self.heartbeat_ticks >= self.election_timeout_ticks:
            raise ValueError("DLedgerConfig.heartbeat_ticks must be < election_timeout_ticks")
