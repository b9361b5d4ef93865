"""The uvicorn server of `twinlog serve`: the guarded protocol, its deadlines, TLS.

`build_server` turns the settings into a uvicorn config: the connection cap from the descriptor
budget (app/server/fd_budget.py), the guarded httptools protocol (app/server/http_protocol.py), the
keep-alive timeout, and the certificate and key when TLS is on. The server checks the connections'
deadlines every EXPIRE_EVERY_TICKS of uvicorn's 0.1 s ticks, and accepts every waiting connection at
once (app/server/eager_accept.py).
"""

from __future__ import annotations

import asyncio
import logging
import socket
from pathlib import Path

import uvicorn
from fastapi import FastAPI

from app.api.asgi_route import TwinlogAPI
from app.api.gateway import Gateway
from app.api.metrics import RefusalCounts
from app.server.eager_accept import EagerAccept
from app.server.fd_budget import FdBudget
from app.server.http_protocol import (
    ConnectionLimits,
    GuardedHttpToolsProtocol,
    expire_overdue,
    protocol_class,
)
from app.server.port_file import PortReportingServer
from app.server.read_workers.pool import ReadWorkers
from app.server.read_workers.setup import start_read_workers, stop_read_workers
from app.settings import Settings
from store.shared_reads.publisher import EndsPublisher

log = logging.getLogger(__name__)

# 0.5 s: a deadline is enforced at most this late.
EXPIRE_EVERY_TICKS = 5


class TwinlogServer(PortReportingServer):
    eager_accept: EagerAccept | None = None
    read_workers: tuple[ReadWorkers, EndsPublisher] | None = None
    gateway: Gateway
    accepts_eagerly = True

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            self._start_read_workers()
        if self.started and self.accepts_eagerly:
            self._start_eager_accept()

    def _start_eager_accept(self) -> None:
        """Every connection waiting is accepted at once (app/server/eager_accept.py)."""
        listener = self.servers[0].sockets[0]
        self.eager_accept = EagerAccept(listener, self._protocol, self.config.ssl)
        self.eager_accept.start(asyncio.get_running_loop())

    def _protocol(self, carried: bytes = b"") -> asyncio.Protocol:
        """The protocol of a new connection (`carried`: the bytes a connection handed back by
        a read worker sent that nobody answered yet)."""
        config = self.config
        created: asyncio.Protocol = config.http_protocol_class(  # type: ignore[call-arg]
            config=config, server_state=self.server_state, app_state=self.lifespan.state,
            _loop=asyncio.get_running_loop())
        if isinstance(created, GuardedHttpToolsProtocol):
            created.carried = carried
        return created

    def _start_read_workers(self) -> None:
        broker = self.gateway.broker
        protocol_class = self.config.http_protocol_class
        if broker is None or getattr(protocol_class, "direct_lane", None) is None:
            return  # (no direct lane, CORS or a root path: a worker would answer otherwise)
        self.read_workers = start_read_workers(self.gateway.settings, broker, self._protocol,
                                               asyncio.get_running_loop())
        if self.read_workers is not None:
            workers = self.read_workers[0]
            self.config.http_protocol_class.read_workers = workers  # type: ignore[attr-defined]
            self.gateway.metrics.read_worker_counts = workers.counts

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        if self.eager_accept is not None:
            self.eager_accept.stop()
        if self.read_workers is not None and self.gateway.broker is not None:
            self.config.http_protocol_class.read_workers = None  # type: ignore[attr-defined]
            stop_read_workers(self.read_workers, self.gateway.broker)
            self.read_workers = None
        # Long-poll reads answer now with what there is: left parked, each would hold the
        # graceful shutdown for its whole wait_ms and then be cut off.
        broker = self.gateway.broker
        if broker is not None:
            broker.store.release_readers()
        await super().shutdown(sockets)

    async def on_tick(self, counter: int) -> bool:
        if counter % EXPIRE_EVERY_TICKS == 0:
            expire_overdue(self.server_state.connections, asyncio.get_running_loop().time())
        return await super().on_tick(counter)


def _available(module: str, fallback: str) -> str:
    try:
        __import__(module)
    except ImportError:
        return fallback
    return module


def build_server(app: FastAPI, settings: Settings, budget: FdBudget,
                 port_file: Path | None) -> TwinlogServer:
    counts: RefusalCounts = app.state.gateway.metrics.http_refusals
    limits = ConnectionLimits.from_settings(settings, budget.connections_max)
    config = uvicorn.Config(
        app, host=settings.http_host, port=settings.http_port,
        loop=(_available("uvloop", "auto") if settings.http_event_loop == "uvloop"
              else "asyncio"),
        http=protocol_class(limits, counts,
                            app.direct_lane if isinstance(app, TwinlogAPI) else None),
        # The broker serves no WebSocket: "none" loads no WebSocket library (about 0.4 MB
        # resident, issue 31); an upgrade request is answered as plain HTTP.
        ws="none",
        lifespan="on", access_log=False, log_level=settings.log_level, server_header=False,
        timeout_keep_alive=settings.http_keep_alive_timeout_s,
        timeout_graceful_shutdown=int(settings.timeout_graceful_shutdown_s),
        ssl_certfile=settings.tls_cert, ssl_keyfile=settings.tls_key)
    log.info("%s (http_connections_max %d)", budget.describe(), settings.http_connections_max)
    server = TwinlogServer(config, app, port_file)
    server.gateway = app.state.gateway
    app.state.gateway.metrics.http_connections_open = lambda: len(server.server_state.connections)
    server.accepts_eagerly = settings.http_eager_accept
    return server
