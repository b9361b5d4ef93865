"""bench/lean_http.py, the benches' lean HTTP/1.1 client, against real uvicorn servers on
loopback (in a thread of this process): one kept-alive connection, JSON both ways, chunked
answers, and its bounds (answer size, deadline) failing clearly and leaving the client usable;
and the group consumption the bench drives, against a real broker's app."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import Response, StreamingResponse

from app.api.main import create_app
from bench.lean_http import LeanHttp, LeanHttpError
from tests.support.app import app_settings
from tests.support.http_server import serving_over_tcp

STALL_RELEASE_S = 10.0


class _Stall:
    """An answer held back until the test lets it go (from its own thread)."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._release: asyncio.Event | None = None

    async def wait(self) -> None:
        self._loop, self._release = asyncio.get_running_loop(), asyncio.Event()
        self.started.set()
        await asyncio.wait_for(self._release.wait(), STALL_RELEASE_S)

    def release(self) -> None:
        if self._loop is not None and self._release is not None:
            self._loop.call_soon_threadsafe(self._release.set)


def _echo_app(stall: _Stall) -> FastAPI:
    app = FastAPI()

    async def echo(request: Request) -> dict[str, Any]:
        body = await request.body()
        assert request.client is not None
        return {"method": request.method, "json": await request.json() if body else None,
                "params": dict(request.query_params), "client_port": request.client.port,
                "content_type": request.headers.get("content-type")}

    app.add_api_route("/echo", echo, methods=["GET", "POST", "PUT"])

    @app.get("/chunked")
    async def chunked() -> StreamingResponse:
        async def parts() -> AsyncIterator[bytes]:
            yield b'{"parts": ['
            for number in range(100):
                yield (b"," if number else b"") + str(number).encode()
            yield b"]}"
        return StreamingResponse(parts(), media_type="application/json")

    @app.get("/bytes/{size}")
    async def sized(size: int) -> Response:
        return Response(b"x" * size, media_type="application/octet-stream")

    @app.get("/closing")
    async def closing(request: Request) -> Response:
        assert request.client is not None
        return Response(str(request.client.port).encode(), headers={"Connection": "close"})

    @app.get("/refused")
    async def refused() -> Response:
        return Response(b'{"title": "no"}', status_code=409,
                        media_type="application/problem+json")

    @app.get("/stall")
    async def stalled() -> dict[str, bool]:
        await stall.wait()
        return {"late": True}

    return app


def test_requests_share_one_connection_and_carry_json_both_ways() -> None:
    """GET with a query, POST and PUT with JSON bodies, all on one kept-alive connection (the
    server sees one client port); a chunked answer is read whole; a 4xx is an answer, which
    raise_for_status refuses naming its status."""
    with serving_over_tcp(_echo_app(_Stall())) as url:
        async def run() -> None:
            async with LeanHttp(url, timeout_s=10) as client:
                got = (await client.get("/echo", params={"offset": 5, "max": 32})).json()
                assert got["method"] == "GET" and got["params"] == {"offset": "5", "max": "32"}
                posted = (await client.post("/echo", json={"handles": ["a", "b"]})).json()
                assert posted["method"] == "POST" and posted["json"] == {"handles": ["a", "b"]}
                assert posted["content_type"] == "application/json"
                put = (await client.put("/echo", json={"offset": 7})).json()
                assert put["method"] == "PUT" and put["json"] == {"offset": 7}
                assert got["client_port"] == posted["client_port"] == put["client_port"]
                assert (await client.get("/chunked")).json() == {"parts": list(range(100))}
                refused = await client.get("/refused")
                assert refused.status_code == 409
                with pytest.raises(LeanHttpError, match="HTTP 409"):
                    refused.raise_for_status()
                again = (await client.get("/echo")).json()
                assert again["client_port"] == got["client_port"]

        asyncio.run(run())


def test_an_answer_over_the_size_bound_fails_and_the_next_request_reconnects() -> None:
    """An answer one byte over `response_bytes_max` is refused naming the bound (one at the
    bound is read); the connection is dropped and the next request opens a new one."""
    with serving_over_tcp(_echo_app(_Stall())) as url:
        async def run() -> None:
            async with LeanHttp(url, timeout_s=10, response_bytes_max=1000) as client:
                first_port = (await client.get("/echo")).json()["client_port"]
                assert (await client.get("/bytes/1000")).content == b"x" * 1000
                with pytest.raises(LeanHttpError, match="over 1000 bytes"):
                    await client.get("/bytes/1001")
                assert (await client.get("/echo")).json()["client_port"] != first_port

        asyncio.run(run())


def test_a_stalled_answer_fails_at_the_deadline_and_the_client_stays_usable() -> None:
    """A request with no answer fails with a clear error once `timeout_s` has passed (not
    later than the bound's wait); the next request goes out on a new connection."""
    stall = _Stall()
    with serving_over_tcp(_echo_app(stall)) as url:
        async def run() -> None:
            async with LeanHttp(url, timeout_s=0.3) as client:
                first_port = (await client.get("/echo")).json()["client_port"]
                loop = asyncio.get_running_loop()
                started_s = loop.time()
                with pytest.raises(LeanHttpError, match="no answer within 0.3 s"):
                    await client.get("/stall")
                assert stall.started.is_set()
                assert 0.3 <= loop.time() - started_s < STALL_RELEASE_S
                assert (await client.get("/echo")).json()["client_port"] != first_port

        try:
            asyncio.run(run())
        finally:
            stall.release()


def test_an_answer_closing_the_connection_is_read_and_the_next_request_reconnects() -> None:
    """An answer with `Connection: close` is read whole; the next request opens a new
    connection rather than writing to the closed one."""
    with serving_over_tcp(_echo_app(_Stall())) as url:
        async def run() -> None:
            async with LeanHttp(url, timeout_s=10) as client:
                closed_port = int((await client.get("/closing")).text)
                assert (await client.get("/echo")).json()["client_port"] != closed_port

        asyncio.run(run())


def test_a_refused_connection_is_a_clear_error() -> None:
    """Nothing listening: the request fails naming the address, not with a bare OSError."""
    with serving_over_tcp(_echo_app(_Stall())) as url:
        pass  # the port was held by the server and is now closed

    async def run() -> None:
        async with LeanHttp(url, timeout_s=5) as client:
            with pytest.raises(LeanHttpError, match="cannot connect to 127.0.0.1"):
                await client.get("/echo")

    asyncio.run(run())


def test_group_consumption_with_the_lean_client_against_a_broker(tmp_path: Path) -> None:
    """The bench's (p) steps against a real broker's app over loopback: produce, receive 32
    (the broker's lean lane answers the lean client), ack every handle, and nothing is left
    to receive; the per-queue read and offset commit of (q) too."""
    app = create_app(app_settings(tmp_path / "broker"))
    with serving_over_tcp(app) as url:
        async def run() -> None:
            async with LeanHttp(url, timeout_s=10) as client:
                (await client.post("/v1/topics", json={
                    "name": "Orders", "read_queue_count": 1, "write_queue_count": 1})
                 ).raise_for_status()
                for _ in range(4):  # the test settings' batch bound is 10
                    (await client.post("/v1/topics/Orders/messages:batch", json={
                        "messages": [{"body": "x" * 100}] * 10})).raise_for_status()
                (await client.post("/v1/groups", json={"name": "p"})).raise_for_status()
                path = "/v1/groups/p/topics/Orders/messages"
                received = await client.post(path + ":receive", json={
                    "max_messages": 32, "invisible_ms": 60_000})
                received.raise_for_status()
                messages = received.json()["messages"]
                assert len(messages) == 32
                ack = await client.post(path + ":ack", json={
                    "receipt_handles": [message["receipt_handle"] for message in messages]})
                assert ack.status_code == 200, ack.text
                rest = (await client.post(path + ":receive", json={
                    "max_messages": 32, "invisible_ms": 60_000})).json()["messages"]
                assert len(rest) == 8
                assert not {m["msg_id"] for m in rest} & {m["msg_id"] for m in messages}
                read = (await client.get("/v1/topics/Orders/queues/0/messages",
                                         params={"offset": 0, "max_messages": 32})).json()
                assert len(read["messages"]) == 32 and read["next_offset"] == 32
                (await client.put("/v1/groups/q/offsets/Orders/queues/0",
                                  json={"offset": read["next_offset"]})).raise_for_status()

        asyncio.run(run())
