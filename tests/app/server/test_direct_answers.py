"""The direct lane (app/api/direct_lane.py, app/server/direct_answers.py): what the protocol
answers itself is byte for byte what the ASGI lane answers, and everything else is the ASGI
lane's own answer.

One broker's app (lifespan running, real files) behind two servers of the guarded protocol
on 127.0.0.1 in this event loop: one with the direct lane, one without. Each script of raw
requests goes to both on a fresh connection of each (one request after another, or all in
one write: pipelined), and the bytes read back must be equal; the direct server's protocol
notes which answers it wrote itself, and that must be the plain reads and only them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from uvicorn.server import ServerState

from app.api.asgi_route import TwinlogAPI
from app.api.direct_lane import Answer
from app.api.metrics import RefusalCounts
from app.server.direct_answers import DirectCycle
from app.server.http_protocol import ConnectionLimits, protocol_class
from tests.support.app import Served, app_settings, serving
from tests.support.store import wait_dispatched

pytestmark = pytest.mark.anyio

TOKEN = "direct-token"
PRODUCE_ONLY = "produce-token"
LIMITS = ConnectionLimits(connections_max=64, header_bytes_max=8192, headers_max=64,
                          header_timeout_s=10.0, body_timeout_s=10.0)
DATE = [(b"date", b"Sat, 28 Nov 2026 12:00:00 GMT")]
READ_TIMEOUT_S = 10.0
MESSAGES = 40


def _get(target: str, *, token: str | None = TOKEN, method: str = "GET",
         version: str = "1.1", extra: str = "") -> bytes:
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    return (f"{method} {target} HTTP/{version}\r\nHost: 127.0.0.1\r\n{auth}{extra}"
            "\r\n").encode("latin-1")


CONSUME = "/v1/topics/R/queues/0/messages"
# (request, whether the direct lane answers it): each is sent alone on a connection.
SINGLE: list[tuple[bytes, bool]] = [
    (_get(CONSUME), True),
    (_get(CONSUME + "?offset=5&max_messages=32&body_encoding=utf8"), True),
    (_get(CONSUME + "?offset=0&max_messages=1"), True),
    (_get(CONSUME + "?offset=38&max_messages=5&body_encoding=utf8"), True),
    (_get(CONSUME + "?offset=0&max_messages=1024"), True),
    (_get(CONSUME + "?offset=40"), True),  # nothing yet, no wait: answered at once
    (_get(CONSUME + "?offset=90"), True),
    (_get(CONSUME + "?offset=3&wait_ms=60000"), True),  # something there: no wait
    (_get(CONSUME + "?offset=40&wait_ms=50"), False),  # a long poll: the ASGI lane waits
    (_get(CONSUME + "?tags=t&max_messages=7"), True),
    (_get(CONSUME + "?tags=nope"), True),
    (_get(CONSUME + "?tags=*&offset=39"), True),
    (_get(CONSUME + "?tags=%7C%7C"), False),  # an invalid tag expression: 400
    (_get(CONSUME + "?offset=-1"), False),
    (_get(CONSUME + "?offset=05"), False),
    (_get(CONSUME + "?max_messages=0"), False),
    (_get(CONSUME + "?body_encoding=UTF8"), False),
    (_get(CONSUME + "?wait_ms=x"), False),
    (_get(CONSUME + "?offset=1&offset=2"), True),  # the last one wins, as Starlette has it
    (_get(CONSUME + "#fragment"), True),
    (_get("/v1/topics/R/queues/1/messages"), True),  # an empty queue
    (_get("/v1/topics/R/queues/2/messages"), False),  # not a read queue: 404
    (_get("/v1/topics/Nope/queues/0/messages"), False),
    (_get("/v1/topics/Hidden/queues/0/messages"), False),  # not readable: 403
    (_get("/v1/topics/a%0A/queues/0/messages"), False),
    (_get("/v1/topics/%52/queues/0/messages"), False),  # R, percent-encoded
    (_get("http://127.0.0.1/v1/topics/R/queues/0/messages"), False),  # absolute form
    (_get(CONSUME, token=None), False),  # 401
    (_get(CONSUME, token="wrong"), False),  # 401
    (_get(CONSUME, token=PRODUCE_ONLY), False),  # 403
    (_get(CONSUME, method="HEAD"), False),
    (_get(CONSUME, version="1.0"), False),
    (_get(CONSUME, extra="Content-Length: 2\r\n") + b"{}", False),
    (_get(CONSUME, extra="Expect: 100-continue\r\n"), False),
    (_get(CONSUME, extra="Connection: close\r\n"), True),
    (_get(CONSUME + "?max_messages=2", extra="X-Forwarded-Proto: https\r\n"), True),
    (_get("/v1/topics/R/queues/0/messages/"), False),  # no such route: 404
    (_get("/v1/topics"), False),
]


async def _prepare(served: Served) -> None:
    """Topic R: 40 messages in queue 0 (tag t, keys, a property, one body not UTF-8), queue
    1 empty; topic Hidden, which does not allow reads."""
    client = served.client
    headers = {"Authorization": f"Bearer {TOKEN}"}
    for name, permission in (("R", 6), ("Hidden", 2)):
        created = await client.post("/v1/topics", headers=headers, json={
            "name": name, "read_queue_count": 2, "write_queue_count": 2,
            "permission": permission})
        assert created.status_code == 201, created.text
    messages: list[dict[str, Any]] = [
        {"body": f"m{index}", "keys": ["k"], "tags": "t", "properties": {"p": str(index)},
         "queue_id": 0} for index in range(MESSAGES - 1)]
    messages.append({"body": "/w==", "body_encoding": "base64", "queue_id": 0})
    for first in range(0, len(messages), 10):
        put = await client.post("/v1/topics/R/messages:batch", headers=headers,
                                json={"messages": messages[first:first + 10]})
        assert put.status_code == 201, put.text
    wait_dispatched(served.broker.store)


@asynccontextmanager
async def _two_servers(served: Served) -> AsyncIterator[tuple[int, int, list[int]]]:
    """The ports of a server with the direct lane and of one without, and the list where
    the first notes the status of each answer its protocol writes itself."""
    app = served.app
    assert isinstance(app, TwinlogAPI) and app.direct_lane is not None
    config = uvicorn.Config(app, lifespan="off", log_level="warning", access_log=False,
                            ws="none")
    config.load()
    state = ServerState()
    state.default_headers = DATE
    direct_statuses: list[int] = []
    direct_class = protocol_class(LIMITS, RefusalCounts(), app.direct_lane)

    class Noting(direct_class):  # type: ignore[misc, valid-type]
        def _write_direct(self, answer: Answer, cycle: DirectCycle) -> None:
            direct_statuses.append(answer.http_status)
            super()._write_direct(answer, cycle)

    loop = asyncio.get_running_loop()
    servers = []
    for kind in (Noting, protocol_class(LIMITS, RefusalCounts())):
        servers.append(await loop.create_server(
            lambda kind=kind: kind(config=config, server_state=state, app_state={}),
            "127.0.0.1", 0))
    try:
        yield (servers[0].sockets[0].getsockname()[1], servers[1].sockets[0].getsockname()[1],
               direct_statuses)
    finally:
        for server in servers:
            server.close()
        for connection in list(state.connections):
            connection.transport.close()


async def _answers(port: int, requests: list[bytes], *, pipelined: bool) -> list[bytes]:
    """The raw answers (head and body) to `requests` on one fresh connection, sent one
    after another or all at once; then whatever else the server sends until it closes
    (a close is awaited only after a request that asks for one or is HTTP/1.0)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    answers: list[bytes] = []
    try:
        if pipelined:
            writer.write(b"".join(requests))
        for request in requests:
            if not pipelined:
                writer.write(request)
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), READ_TIMEOUT_S)
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.lower() == b"content-length":
                    length = int(value)
            if request.startswith(b"HEAD "):
                length = 0
            body = await asyncio.wait_for(reader.readexactly(length), READ_TIMEOUT_S)
            answers.append(head + body)
        if any(b"Connection: close" in request or b" HTTP/1.0\r\n" in request
               for request in requests):
            answers.append(await asyncio.wait_for(reader.read(), READ_TIMEOUT_S))
    finally:
        writer.close()
    return answers


@pytest.mark.parametrize("cache_bytes_max", [32 * 1024 * 1024, 0])
async def test_direct_answers_are_the_asgi_lanes_byte_for_byte(
        tmp_path: Path, cache_bytes_max: int) -> None:
    """Every request of the table, alone on a connection; then the table's requests one
    after another on one keep-alive connection, and pipelined in one write. With the
    encoded-read cache off, reads of over 8 messages are answered from a task (their later
    chunks after a turn of the loop), the pipelined requests behind them queued."""
    settings = app_settings(tmp_path, consume_cache_bytes_max=cache_bytes_max,
                            long_poll_wait_ms_max=1000,
                            auth_tokens={TOKEN: ["produce", "consume", "admin"],
                                         PRODUCE_ONLY: ["produce"]})
    async with serving(settings) as served:
        await _prepare(served)
        async with _two_servers(served) as (direct_port, asgi_port, direct_statuses):
            for request, direct in SINGLE:
                del direct_statuses[:]
                answers = await _answers(direct_port, [request], pipelined=False)
                assert answers == await _answers(asgi_port, [request], pipelined=False), \
                    request
                assert direct_statuses == ([200] if direct else []), (request, answers)
            # HTTP/1.0 and a Connection: close end a connection; the rest share one
            kept = [request for request, _ in SINGLE
                    if b"Connection: close" not in request and b"HTTP/1.0" not in request
                    and b"Content-Length" not in request]
            kept.append(_get(CONSUME + "?max_messages=3", extra="Connection: close\r\n"))
            expected_direct = sum(1 for request, direct in SINGLE if direct and request in kept)
            for pipelined in (False, True):
                del direct_statuses[:]
                answers = await _answers(direct_port, kept, pipelined=pipelined)
                assert answers == await _answers(asgi_port, kept, pipelined=pipelined)
                assert len(answers) == len(kept) + 1 and answers[-1] == b""
                if not pipelined:  # (pipelined, a request behind one in flight waits in
                    # uvicorn's queue and takes the ASGI lane)
                    assert direct_statuses == [200] * (expected_direct + 1)
                else:
                    assert direct_statuses and set(direct_statuses) == {200}


async def test_a_direct_answer_that_fails_after_its_first_chunk_is_the_lean_lanes_500(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A read whose later chunk fails (the store raises past queue offset 8) answers, from
    the direct lane's task, the 500 problem the lean lane answers, byte for byte; the
    connection then serves the next request."""
    settings = app_settings(tmp_path, consume_cache_bytes_max=0,
                            auth_tokens={TOKEN: ["produce", "consume", "admin"]})
    async with serving(settings) as served:
        await _prepare(served)
        store = served.broker.store
        get_encoded = store.get_encoded

        def failing(topic: str, queue_id: int, queue_offset: int, *args: Any) -> Any:
            if queue_offset >= 8:
                raise RuntimeError("the store failed")
            return get_encoded(topic, queue_id, queue_offset, *args)

        monkeypatch.setattr(store, "get_encoded", failing)
        requests = [_get(CONSUME + "?max_messages=32"), _get(CONSUME + "?max_messages=2")]
        async with _two_servers(served) as (direct_port, asgi_port, direct_statuses):
            answers = await _answers(direct_port, requests, pipelined=False)
            assert answers == await _answers(asgi_port, requests, pipelined=False)
            assert answers[0].startswith(b"HTTP/1.1 500 ")
            assert b'"instance":"/v1/topics/R/queues/0/messages"' in answers[0]
            assert direct_statuses == [500, 200]
