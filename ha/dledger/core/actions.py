"""What the node asks of its host: the only way it touches disks, peers and clients.

The host executes actions in order. Writes (term+vote, append, truncate, reset) go to one
ordered durable queue; when one is durable the host calls `DLedgerNode.persisted(write_id)`.
Messages that rest on durable state (votes, acks) are only emitted after that call.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from ha.dledger.core.messages import Entry, Message
from store.identity_enum import IdentityEnum


class AppendStatus(IdentityEnum):
    """How a client append ended. Only OK promises durability on a quorum; the two
    indeterminate ones (the entry may still commit, or be lost) are kept apart from refusals."""

    OK = "OK"  # committed on a quorum in the leader's term
    NOT_LEADER = "NOT_LEADER"  # refused, nothing appended
    LEADER_PENDING_FULL = "LEADER_PENDING_FULL"  # refused, nothing appended
    # refused, nothing appended: leadership is being handed over, retry on the new leader
    LEADER_TRANSFERRING = "LEADER_TRANSFERRING"
    # refused, nothing appended: the leader's disk refused the entry (the host's answer)
    DISK_ERROR = "DISK_ERROR"
    WAIT_QUORUM_ACK_TIMEOUT = "WAIT_QUORUM_ACK_TIMEOUT"  # indeterminate
    LEADERSHIP_LOST = "LEADERSHIP_LOST"  # indeterminate (DLedger's TERM_CHANGED 501)

    @property
    def indeterminate(self) -> bool:
        return self in (AppendStatus.WAIT_QUORUM_ACK_TIMEOUT, AppendStatus.LEADERSHIP_LOST)


class TransferStatus(enum.Enum):
    """How a leadership transfer request ended (the admin endpoint's answer)."""

    OK = "OK"  # the target got TimeoutNow and a new term started: this node is a follower
    NOT_LEADER = "NOT_LEADER"  # refused: only the leader transfers
    NOT_MEMBER = "NOT_MEMBER"  # refused: the target is not in the group
    TARGET_IS_SELF = "TARGET_IS_SELF"  # refused: the leader already leads
    IN_PROGRESS = "IN_PROGRESS"  # refused: another transfer is running
    # refused: the target's match stayed below the leader's end for transfer_catchup_ticks
    NOT_CAUGHT_UP = "NOT_CAUGHT_UP"
    # TimeoutNow went out but no new term came within an election timeout: still the leader
    TIMEOUT = "TIMEOUT"
    # the leader stepped down for another reason (lost its quorum) before handing over
    LEADERSHIP_LOST = "LEADERSHIP_LOST"


@dataclass(frozen=True, slots=True)
class Send:
    target_id: str
    message: Message


@dataclass(frozen=True, slots=True)
class PersistTermVote:
    write_id: int
    term: int
    voted_for: str | None


@dataclass(frozen=True, slots=True)
class AppendEntries:
    """Write `entries` starting at `entries[0].index`, which is the log's end + 1."""

    write_id: int
    entries: tuple[Entry, ...]


@dataclass(frozen=True, slots=True)
class TruncateFrom:
    """Drop every entry at `index` and after."""

    write_id: int
    index: int


@dataclass(frozen=True, slots=True)
class ResetLog:
    """Drop the whole log; it restarts after (base_index, base_term), the leader's first
    retained entry minus one."""

    write_id: int
    base_index: int
    base_term: int


@dataclass(frozen=True, slots=True)
class AdvanceCommit:
    commit_index: int


@dataclass(slots=True)
class CompleteAppend:  # never changed; one per client append, so not frozen (messages.Entry)
    request_id: int
    status: AppendStatus
    index: int
    term: int


@dataclass(frozen=True, slots=True)
class CompleteTransfer:
    """The answer to `transfer_leadership(target_id)`, given once per request."""

    target_id: str
    status: TransferStatus


Write = PersistTermVote | AppendEntries | TruncateFrom | ResetLog
Action = Send | Write | AdvanceCommit | CompleteAppend | CompleteTransfer
