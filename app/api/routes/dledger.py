"""DLedger admin: `GET /admin/dledger` and `POST /admin/dledger/transfer-leadership`.

The view reads the snapshot the host publishes every round (ha/dledger/host/host_status.py), so it
never waits on a busy member. A broker in classic mode answers 404 on both.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from fastapi import APIRouter

from app.api.deps import BrokerDep, GatewayDep, requires
from app.api.dledger_views import dledger_view
from app.api.errors import ApiError
from app.api.gateway import not_leader
from app.api.openapi import problem_responses
from app.api.schemas.dledger import (
    DLedgerView,
    TransferLeadershipRequest,
    TransferLeadershipView,
)
from app.broker.broker import Broker
from app.settings import Scope
from ha.dledger.core.actions import TransferStatus

if TYPE_CHECKING:
    from ha.dledger.commit_log import DLedgerCommitLog  # loaded by a broker in DLedger mode only

router = APIRouter(prefix="/admin/dledger", tags=["admin"],
                   responses=problem_responses(401, 403, 404, 503))

# Refusals that leave this member the leader: a conflict with the group's state.
_REFUSED = frozenset({TransferStatus.NOT_MEMBER, TransferStatus.TARGET_IS_SELF,
                      TransferStatus.IN_PROGRESS, TransferStatus.NOT_CAUGHT_UP,
                      TransferStatus.TIMEOUT})
# The host answers within the catch-up time plus an election timeout; past this, a bug.
_TRANSFER_MARGIN_S = 5.0


def member_of(broker: Broker) -> DLedgerCommitLog:
    if broker.dledger is None:
        raise ApiError("NOT_FOUND", "this broker runs classic replication, not DLedger mode "
                                    "(replication_mode)")
    return broker.dledger


@router.get("", dependencies=[requires(Scope.MONITOR)], operation_id="admin-dledger")
def admin_dledger(broker: BrokerDep) -> DLedgerView:
    """This member: role, term, leader (id and addresses), committed and end index; per peer
    (on the leader) match index, lag in entries and bytes, pushes in flight, last contact."""
    return dledger_view(broker, member_of(broker))


@router.post("/transfer-leadership", dependencies=[requires(Scope.ADMIN)],
             operation_id="admin-dledger-transfer-leadership",
             responses=problem_responses(409))
async def admin_dledger_transfer_leadership(request: TransferLeadershipRequest,
                                            gateway: GatewayDep) -> TransferLeadershipView:
    """Hand leadership to `target_id` once it is caught up. 200 OK when the target took
    over; 409 TRANSFER_REFUSED (`transfer_status`: NOT_MEMBER, TARGET_IS_SELF, IN_PROGRESS,
    NOT_CAUGHT_UP, TIMEOUT) when this member stays the leader; 503 NOT_LEADER naming the
    leader when this member does not lead (or lost its quorum meanwhile)."""
    broker = gateway.running_broker()
    member = member_of(broker)
    host = member.server.host.config
    wait_s = (host.transfer_catchup_ms + 2 * host.election_timeout_ms) / 1000
    future = member.transfer_leadership(request.target_id)
    try:
        status = await asyncio.wait_for(asyncio.wrap_future(future),
                                        wait_s + _TRANSFER_MARGIN_S)
    except TimeoutError:
        raise ApiError("INTERNAL_ERROR", "the DLedger member did not answer the transfer in "
                                         "time; see its log") from None
    if status in _REFUSED:
        raise ApiError("TRANSFER_REFUSED", f"transfer to {request.target_id!r} refused: "
                                           f"{status.value}", transfer_status=status.value)
    if status is not TransferStatus.OK:
        error = not_leader(broker)
        error.extra["transfer_status"] = status.value
        raise error
    return TransferLeadershipView(status=status.value, target_id=request.target_id,
                                  leader_id=member.status().leader_id)
