"""DLedger mode: a Raft-replicated log (openmessaging/dledger's design, without its known bugs).

`DLedgerNode` is the whole protocol as a pure state machine (ha/dledger/node.py); the host
(`DLedgerHost`) runs its actions and `PeerTransport` carries its messages; `DLedgerServer` is
one member with both. `ha.dledger.sim` drives the same node in a seeded deterministic simulation.
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
from ha.dledger.host import AppendResult, DLedgerHost
from ha.dledger.host_config import HostConfig
from ha.dledger.host_status import HostStatus, PeerStatus
from ha.dledger.log import EntryLog
from ha.dledger.member import HardState, MemberState, Role
from ha.dledger.memory_storage import MemoryStorage
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
from ha.dledger.peers import Peer, parse_peers
from ha.dledger.progress import DispatcherState, EntryDispatcher
from ha.dledger.server import DLedgerServer
from ha.dledger.transport import PeerTransport, TransportConfig

__all__ = [
    "Action",
    "AdvanceCommit",
    "AppendEntries",
    "AppendResult",
    "AppendStatus",
    "CompleteAppend",
    "CompleteTransfer",
    "DLedgerConfig",
    "DLedgerHost",
    "DLedgerNode",
    "DLedgerServer",
    "DispatcherState",
    "Entry",
    "EntryDispatcher",
    "EntryLog",
    "HardState",
    "HostConfig",
    "HostStatus",
    "MemberState",
    "MemoryStorage",
    "Message",
    "Peer",
    "PeerStatus",
    "PeerTransport",
    "PersistTermVote",
    "PushRequest",
    "PushResponse",
    "ResetLog",
    "Role",
    "Send",
    "TimeoutNow",
    "TransferStatus",
    "TransportConfig",
    "TruncateFrom",
    "VoteRequest",
    "VoteResponse",
    "parse_peers",
]
