"""How a DLedger append ends, as the broker's PutMessageStatus (RocketMQ's DLedgerCommitLog
maps its codes the same way, reference section 4; app/api/errors.py turns each into HTTP).

| AppendStatus | PutMessageStatus | the client may assume |
| --- | --- | --- |
| OK | PUT_OK | committed on a quorum: durable |
| WAIT_QUORUM_ACK_TIMEOUT | COMMIT_INDETERMINATE | may still commit, or be lost |
| LEADERSHIP_LOST | COMMIT_INDETERMINATE | may still commit, or be lost |
| LEADER_PENDING_FULL | OS_PAGE_CACHE_BUSY | not written: retry later |
| NOT_LEADER | SERVICE_NOT_AVAILABLE | not written: write to the leader |
| LEADER_TRANSFERRING | SERVICE_NOT_AVAILABLE | not written: retry on the new leader |
| DISK_ERROR | SERVICE_NOT_AVAILABLE | not written: the leader's disk refused it |

RocketMQ answers a quorum timeout IN_SYNC_REPLICAS_NOT_ENOUGH (5.x), which reads as a
refusal; twinlog keeps the indeterminate outcomes apart so that a client never takes an
entry that may still commit for one that was never written.
"""

from __future__ import annotations

from ha.dledger.core.actions import AppendStatus
from store.status import PutMessageStatus

PUT_STATUS_OF_APPEND: dict[AppendStatus, PutMessageStatus] = {
    AppendStatus.OK: PutMessageStatus.PUT_OK,
    AppendStatus.WAIT_QUORUM_ACK_TIMEOUT: PutMessageStatus.COMMIT_INDETERMINATE,
    AppendStatus.LEADERSHIP_LOST: PutMessageStatus.COMMIT_INDETERMINATE,
    AppendStatus.LEADER_PENDING_FULL: PutMessageStatus.OS_PAGE_CACHE_BUSY,
    AppendStatus.NOT_LEADER: PutMessageStatus.SERVICE_NOT_AVAILABLE,
    AppendStatus.LEADER_TRANSFERRING: PutMessageStatus.SERVICE_NOT_AVAILABLE,
    AppendStatus.DISK_ERROR: PutMessageStatus.SERVICE_NOT_AVAILABLE,
}

_DETAILS: dict[AppendStatus, str] = {
    AppendStatus.OK: "",
    AppendStatus.WAIT_QUORUM_ACK_TIMEOUT: "appended on the leader, but no quorum confirmed it "
                                          "by dledger_quorum_deadline_ms: it may still commit "
                                          "or be lost",
    AppendStatus.LEADERSHIP_LOST: "appended, but the leader stepped down before a quorum "
                                  "confirmed it: it may still commit or be lost",
    AppendStatus.LEADER_PENDING_FULL: "dledger_pending_appends_max produces already wait for "
                                      "a quorum; retry later",
    AppendStatus.NOT_LEADER: "this member is not the DLedger leader (any more); nothing "
                             "was written",
    AppendStatus.LEADER_TRANSFERRING: "leadership is being transferred; nothing was written, "
                                      "retry on the new leader",
    AppendStatus.DISK_ERROR: "the leader's disk refused the entry; nothing was written",
}


def put_status_of(status: AppendStatus) -> tuple[PutMessageStatus, str]:
    """The put status and a detail saying what the client may assume."""
    return PUT_STATUS_OF_APPEND[status], _DETAILS[status]
