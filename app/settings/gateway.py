"""The HTTP gateway's settings: address, auth, CORS, produce limits and connection limits."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, Field
from pydantic_settings import NoDecode

from app.settings.values import KIB, MIB, Port, Scope


class GatewayFields(BaseModel):
    """Settings of the HTTP gateway (a part of `Settings`)."""

    # -- HTTP ----------------------------------------------------------------------------------
    http_host: str = Field("127.0.0.1", description="address the HTTP gateway listens on; an "
                           "IPv4 address here is also the STOREHOST written into message ids")
    http_port: Port = Field(8080, description="HTTP gateway port (0: the kernel picks one)")
    # NoDecode: from the environment or `--set`, the value is text the validators below
    # decode (JSON, or the compact form), not JSON that pydantic-settings would insist on.
    auth_tokens: Annotated[dict[str, list[Scope]], NoDecode] = Field(
        default_factory=dict,
        description="bearer token -> scopes; empty means open access (development only). As "
                    'text: JSON ({"t1": ["admin"], "t2": "monitor"}) or token:scope+scope,... '
                    "(t1:admin,t2:produce+consume)",
    )
    cors_allow_origins: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="browser origins (https://dash.example:3000) allowed to call the API, for "
                    'dashboards; empty: no CORS headers. As text: JSON (["https://a"]) or '
                    "comma-separated",
    )
    max_batch_messages: int = Field(1000, ge=1, le=100_000, description="messages one "
                                    "`...messages:batch` request may carry")
    max_body_size_bytes: int = Field(8 * MIB, ge=1024, description="largest produce request "
                                     "body; must be >= message_size_max_bytes")
    idempotency_window_s: float = Field(300.0, gt=0, le=7 * 24 * 3600, description="how long "
                                        "a produce's Idempotency-Key is remembered (per topic)")
    idempotency_keys_max: int = Field(100_000, ge=1, le=10_000_000, description="idempotency "
                                      "keys remembered at once; the oldest go first past it")
    # -- HTTP connection limits (docs/gateway-limits.md) ------------------------------------------
    max_metadata_body_size_bytes: int = Field(
        MIB, ge=1024, le=64 * MIB,
        description="request body limit of every route but produce (topics, groups, offsets, "
                    "admin); checked after the token and before a byte is read")
    http_header_bytes_max: int = Field(32 * KIB, ge=1024, le=MIB,
                                       description="request line and headers, in bytes")
    http_headers_max: int = Field(100, ge=8, le=10_000,
                                  description="header fields in one request")
    http_header_timeout_s: float = Field(
        10.0, gt=0, le=300, description="a request's line and headers must arrive within this "
                                        "of the connection opening or the previous response")
    http_body_timeout_s: float = Field(
        30.0, gt=0, le=3600, description="a request body must arrive whole within this of its "
                                         "headers")
    http_keep_alive_timeout_s: int = Field(5, ge=1, le=3600,
                                           description="an idle keep-alive connection is closed "
                                                       "after this")
    http_connections_max: int = Field(
        1024, ge=1, le=1_000_000,
        description="open HTTP connections; lowered at start to what the descriptor budget "
                    "leaves (app/server/fd_budget.py); past it a new connection gets 503 and a "
                    "close")
    http_event_loop: Literal["uvloop", "asyncio"] = Field(
        "uvloop", description="the HTTP server's event loop (uvloop is the faster; "
                              "bench/fair_batches.py --broker compares them)")
    http_eager_accept: bool = Field(
        True, description="accept every waiting connection at once (app/server/eager_accept.py); "
                          "off, uvloop accepts one per loop turn and a busy loop leaves new "
                          "connections queued for seconds")
    read_workers: int = Field(
        0, ge=0, le=16,
        description="processes that serve consume reads over the store's files, beside the "
                    "one that appends (docs/read-workers.md); 0: the broker serves every read "
                    "itself. Not with TLS or in DLedger mode (they stay off there)")
    read_worker_connections_max: int = Field(
        256, ge=1, le=100_000,
        description="connections one read worker serves at once; past it the broker keeps "
                    "a new read connection and serves it itself")
    read_worker_restarts_max: int = Field(
        5, ge=0, le=1000,
        description="restarts of a read worker that died; past it the worker stays down and "
                    "the broker serves its share of reads itself")
    tls_cert: Path | None = Field(None, description="PEM certificate (chain): serve HTTPS")
    tls_key: Path | None = Field(None, description="PEM private key of tls_cert")
    long_poll_wait_ms_max: int = Field(
        30_000, ge=0, le=300_000,
        description="the longest a consume read waits for a message (wait_ms is cut to it)")
    long_poll_waiters_max: int = Field(
        4096, ge=0, le=1_000_000,
        description="consume reads waiting at once (each holds a connection); past it a "
                    "read that would wait answers 429 LONG_POLL_BUSY")
