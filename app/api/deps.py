"""Dependencies as `Annotated` aliases: the gateway, the broker, and bearer-token scopes."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, Path, Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from app.api.gateway import Gateway
from app.api.schemas.fields import GROUP_PATTERN, QUEUE_ID_MAX, TOPIC_PATTERN
from app.broker.broker import Broker
from app.settings import Scope

bearer_scheme = HTTPBearer(
    auto_error=False, scheme_name="bearer",
    description="A token from the broker's auth_tokens setting; scopes: produce, consume, "
                "admin, monitor (read-only: GET /admin/* and /metrics; admin includes it). Not "
                "needed when the broker runs open (twinlog dev).")


def get_gateway(request: Request) -> Gateway:
    gateway: Gateway = request.app.state.gateway
    return gateway


GatewayDep = Annotated[Gateway, Depends(get_gateway)]


def get_broker(gateway: GatewayDep) -> Broker:
    return gateway.running_broker()


def get_master_broker(gateway: GatewayDep) -> Broker:
    return gateway.master_broker()


BrokerDep = Annotated[Broker, Depends(get_broker)]
MasterBrokerDep = Annotated[Broker, Depends(get_master_broker)]


class ScopeCheck:
    """The dependency `requires` adds; `token_scope` lets the body guard (app/api/body_guard.py)
    check the same scope before the body is read."""

    def __init__(self, token_scope: Scope) -> None:
        self.token_scope = token_scope

    def __call__(self, request: Request, gateway: GatewayDep,
                 _: Annotated[HTTPAuthorizationCredentials | None,
                              Security(bearer_scheme)]) -> None:
        gateway.auth.check(request.headers.get("authorization"), self.token_scope)


def requires(scope: Scope) -> Any:
    """A dependency that refuses a request without a token holding `scope` (401/403)."""
    return Depends(ScopeCheck(scope))


TopicPath = Annotated[str, Path(pattern=TOPIC_PATTERN, description="Topic name.")]
GroupPath = Annotated[str, Path(pattern=GROUP_PATTERN, description="Subscription group name.")]
QueueIdPath = Annotated[int, Path(ge=0, le=QUEUE_ID_MAX, description="Queue id.")]
