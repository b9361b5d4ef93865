"""What every request handler reaches through `app.state.gateway`: settings, auth, metrics and
the running broker (set by the lifespan, absent before start and after stop)."""

from __future__ import annotations

from dataclasses import dataclass, field

from app.api.auth import Authenticator
from app.api.errors import ApiError, from_put_status
from app.api.metrics import Metrics
from app.broker.broker import Broker
from app.broker.snapshots import Snapshots
from app.settings import Settings
from store import PutMessageStatus


@dataclass(slots=True)
class Gateway:
    settings: Settings
    auth: Authenticator
    metrics: Metrics = field(init=False)
    broker: Broker | None = None

    def __post_init__(self) -> None:
        self.metrics = Metrics(lambda: self.broker)

    @property
    def snapshots(self) -> Snapshots | None:
        """The broker's snapshots (None before the lifespan built the broker)."""
        return self.broker.snapshots if self.broker is not None else None

    def running_broker(self) -> Broker:
        broker = self.broker
        if broker is None or not broker.is_running:
            state = "not started" if broker is None else broker.state.value
            raise ApiError("NOT_READY", f"the broker is {state}")
        return broker

    def master_broker(self, *, for_put: bool = False) -> Broker:
        """The running broker if it takes writes; a slave answers 503 naming its master (as
        the put status SERVICE_NOT_AVAILABLE for a produce, NOT_A_MASTER otherwise)."""
        broker = self.running_broker()
        if broker.is_slave:
            raise self.not_a_master(for_put=for_put)
        return broker

    def not_a_master(self, *, for_put: bool = False) -> ApiError:
        broker = self.broker
        if broker is not None and broker.dledger is not None:
            return not_leader(broker, for_put=for_put)
        http_address = broker.master_http_address if broker else self.settings.master_http_address
        ha_address = broker.master_ha_address if broker else self.settings.ha_master_address
        detail = f"this broker is a slave; send writes to {http_address or 'the master'}"
        error = ApiError("NOT_A_MASTER", detail, master_http_address=http_address,
                         master_ha_address=ha_address)
        if for_put:
            error = from_put_status(PutMessageStatus.SERVICE_NOT_AVAILABLE, detail,
                                    **error.extra)
        return error


def not_leader(broker: Broker, *, for_put: bool = False) -> ApiError:
    """A DLedger follower's 503: the leader's id and gateway when one is known (clients
    resend there), with Retry-After (an election takes about a second)."""
    assert broker.dledger is not None
    leader_id = broker.dledger.status().leader_id
    http_address = broker.write_address()
    self_id = broker.dledger.self_id
    if leader_id == self_id:
        detail = (f"this member ({self_id}) just became the DLedger leader and is catching up "
                  "(its commit, then its idempotency window); retry")
    else:
        where = (f"send writes to the leader {leader_id} at {http_address}" if http_address
                 else "no leader is known yet (an election is running); retry")
        detail = f"this member ({self_id}) is not the DLedger leader; {where}"
    return ApiError("NOT_LEADER", detail,
                    put_status=PutMessageStatus.SERVICE_NOT_AVAILABLE if for_put else None,
                    leader_id=leader_id, leader_http_address=http_address,
                    master_http_address=http_address)
