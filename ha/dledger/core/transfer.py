"""Leadership transfer (Raft thesis 3.10; DLedger's LeadershipTransfer; etcd's MsgTimeoutNow).

The leader stops taking client appends (LEADER_TRANSFERRING: not written, retry on the new
leader), waits up to `transfer_catchup_ticks` for the target's match to reach its end, then
sends it TimeoutNow: the target starts a real election at once, and its vote requests pass the
voters' leader lease. The transfer ends OK when the leader sees a higher term (it steps down),
TIMEOUT after an election timeout without one (the leader takes appends again), or refused.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class LeadershipTransfer:
    target_id: str
    deadline_tick: int  # catch-up deadline, then the deadline for the new term
    timeout_now_sent: bool = False
