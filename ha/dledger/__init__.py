"""DLedger mode: a Raft-replicated log (openmessaging/dledger's design, without its known bugs).

`DLedgerNode` is the whole protocol as a pure state machine (ha/dledger/node.py); the host
runs its actions. `ha.dledger.sim` drives the same node in a seeded deterministic simulation.
"""

from ha.dledger.actions import (
    Action,
    AdvanceCommit,
    AppendEntries,
    AppendStatus,
    CompleteAppend,
    CompleteTransfer,
    PersistTermVote,
    ResetLog,
    Send,
    TransferStatus,
    TruncateFrom,
)
from ha.dledger.config import DLedgerConfig
from ha.dledger.log import EntryLog
from ha.dledger.member import HardState, MemberState, Role
from ha.dledger.messages import (
    Entry,
    Message,
    PushRequest,
    PushResponse,
    TimeoutNow,
    VoteRequest,
    VoteResponse,
)
from ha.dledger.node import DLedgerNode
from ha.dledger.progress import DispatcherState, EntryDispatcher

__all__ = [
    "Action",
    "AdvanceCommit",
    "AppendEntries",
    "AppendStatus",
    "CompleteAppend",
    "CompleteTransfer",
    "DLedgerConfig",
    "DLedgerNode",
    "DispatcherState",
    "Entry",
    "EntryDispatcher",
    "EntryLog",
    "HardState",
    "MemberState",
    "Message",
    "PersistTermVote",
    "PushRequest",
    "PushResponse",
    "ResetLog",
    "Role",
    "Send",
    "TimeoutNow",
    "TransferStatus",
    "TruncateFrom",
    "VoteRequest",
    "VoteResponse",
]
