"""DLedger mode: a Raft-replicated log (openmessaging/dledger's design, without its known bugs).

`DLedgerNode` is the whole protocol as a pure state machine (ha/dledger/core/node.py); the host
(`DLedgerHost`) runs its actions and `PeerTransport` carries its messages; `DLedgerServer` is
one member with both. `ha.dledger.simulation.sim` drives the same node in a seeded
deterministic simulation.
"""

from ha.dledger.core.actions import (
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
from ha.dledger.core.config import DLedgerConfig
from ha.dledger.core.entry_log import EntryLog
from ha.dledger.core.member import HardState, MemberState, Role
from ha.dledger.core.messages import (
    Entry,
    Message,
    PushRequest,
    PushResponse,
    TimeoutNow,
    VoteRequest,
    VoteResponse,
)
from ha.dledger.core.node import DLedgerNode
from ha.dledger.core.peers import Peer, parse_peers
from ha.dledger.core.progress import DispatcherState, EntryDispatcher
from ha.dledger.host.host import AppendResult, DLedgerHost
from ha.dledger.host.host_config import HostConfig
from ha.dledger.host.host_status import HostStatus, PeerStatus
from ha.dledger.host.memory_storage import MemoryStorage
from ha.dledger.host.server import DLedgerServer
from ha.dledger.host.transport import PeerTransport
from ha.dledger.host.transport_config import TransportConfig

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
