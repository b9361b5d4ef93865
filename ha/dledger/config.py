"""Settings of a DLedger node, all in ticks or counts (the host decides how long a tick is)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class DLedgerConfig:
    # A follower that heard no leader for a random number of ticks in
    # [election_timeout_ticks, 2 * election_timeout_ticks) starts a pre-vote.
    election_timeout_ticks: int = 10
    heartbeat_ticks: int = 2
    # A push (or probe) not acknowledged within this many ticks is sent again from the match.
    push_timeout_ticks: int = 6
    inflight_pushes_max: int = 8  # pipelined pushes per peer
    push_entries_max: int = 16  # entries per push (the batch)
    pending_appends_max: int = 256  # client appends waiting for a quorum
    quorum_deadline_ticks: int = 40  # past it, WAIT_QUORUM_ACK_TIMEOUT (indeterminate)
    deferred_messages_max: int = 1024  # votes and acks waiting for a write; past it, dropped

    def __post_init__(self) -> None:
        for name in ("election_timeout_ticks", "heartbeat_ticks", "push_timeout_ticks",
                     "inflight_pushes_max", "push_entries_max", "pending_appends_max",
                     "quorum_deadline_ticks", "deferred_messages_max"):
            if getattr(self, name) < 1:
                raise ValueError(f"DLedgerConfig.{name} must be >= 1")
        if self.heartbeat_ticks >= self.election_timeout_ticks:
            raise ValueError("DLedgerConfig.heartbeat_ticks must be < election_timeout_ticks")
