"""Health: `/healthz` (the process answers), `/readyz` (recovered and serving), `/metrics`."""

from __future__ import annotations

from dataclasses import asdict

from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse

from app.api.deps import GatewayDep, requires
from app.api.metrics import CONTENT_TYPE
from app.api.openapi import problem_responses
from app.api.schemas.ha import SlaveDiffView
from app.api.schemas.health import Health, Readiness
from app.settings import Scope
from ha import SlaveLinkView

router = APIRouter(tags=["health"])


@router.get("/healthz", operation_id="healthz")
async def healthz() -> Health:
    """The process is up (no token needed)."""
    return Health(status="ok")


@router.get("/readyz", operation_id="readyz", response_model=Readiness,
            responses={503: {"model": Readiness, "description": "Not ready"}})
async def readyz(gateway: GatewayDep) -> Response:
    """Ready once the store has recovered and the broker runs (no token needed). A slave also
    reports its HA link; a slave whose link is down is still ready to serve reads. A store
    that can no longer write (an msync/fsync failed) is not ready, nor a DLedger member whose
    committed log forked from its leader's, nor one whose metadata tables are being rebuilt
    after a cut of its log; `detail` says why."""
    broker = gateway.broker
    if broker is None:
        readiness = Readiness(ready=False, role=gateway.settings.broker_role.value,
                              state="CREATED", detail="the broker has not started")
        return JSONResponse(readiness.model_dump(mode="json"), status_code=503)
    link = None
    if broker.replication is not None and broker.is_slave and broker.is_running:
        view = broker.replication.diff()
        assert isinstance(view, SlaveLinkView)
        link = SlaveDiffView(**asdict(view), metadata_sync=broker.slave_sync.status()
                             if broker.slave_sync is not None else None)
    fault = broker.store.health.fault
    detail = fault.describe() if fault is not None else None
    dispatch = broker.store.dispatch
    dispatch_stuck = dispatch.failing and broker.is_running
    if detail is None and dispatch_stuck:
        detail = (f"dispatch fails at commit-log offset {dispatch.dispatched_offset}: "
                  f"{dispatch.last_error}")
    foreign = broker.slave_sync.foreign_master if broker.slave_sync is not None else None
    if detail is None and foreign is not None:
        detail = foreign  # a slave pointed at another broker group's master
    diverged = broker.dledger.status().diverged if broker.dledger is not None else None
    if detail is None and diverged is not None:
        detail = diverged  # a DLedger member whose committed log forked from its leader's
    rebuilding = broker.store.system_feed.rebuilding
    if detail is None and rebuilding:
        detail = ("the metadata tables are being rebuilt from the log after a cut: they lack "
                  "what the replay has not reached yet")
    readiness = Readiness(ready=broker.is_running and fault is None and foreign is None
                          and not dispatch_stuck and diverged is None and not rebuilding,
                          role=broker.role_name, state=broker.state.value, ha_link=link,
                          detail=detail)
    return JSONResponse(readiness.model_dump(mode="json"),
                        status_code=200 if readiness.ready else 503)


@router.get("/metrics", operation_id="metrics", dependencies=[requires(Scope.MONITOR)],
            response_class=Response,
            responses={200: {"content": {CONTENT_TYPE: {"schema": {"type": "string"}}},
                             "description": "Prometheus text format"},
                       **problem_responses(401, 403)})
def metrics(gateway: GatewayDep) -> Response:
    """Prometheus metrics: puts by status, put latency, bytes in, commit-log offsets, per-slave
    diff bytes, HA connections, dispatch behind bytes."""
    return Response(gateway.metrics.render(), media_type=CONTENT_TYPE)
