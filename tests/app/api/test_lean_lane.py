"""The lean lane (app/api/lean_lane.py): the reads and the offset commit answer exactly what
FastAPI's routes answer, and none of them queries the metadata database."""

from __future__ import annotations

import functools
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

import httpx
import pytest
from sqlalchemy import event

from app.api.asgi_route import TwinlogAPI
from app.api.deps import ScopeCheck
from app.api.lean_lane import query_of
from tests.support.app import Served, app_settings, serving
from tests.support.store import wait_dispatched

pytestmark = pytest.mark.anyio

TOKEN = "lean-token"
HEADERS = {"Authorization": f"Bearer {TOKEN}"}


def _settings(tmp_path: Path) -> Any:
    return app_settings(tmp_path, auth_tokens={TOKEN: ["produce", "consume", "admin"]})


async def _prepare(served: Served) -> str:
    """A topic R with 40 messages in queue 0 (keys, a property, a body that is not UTF-8), a
    not-readable topic, and group g with a commit; the msg_id of R's first message."""
    client = served.client
    for name, permission in (("R", 6), ("Hidden", 2)):
        created = await client.post("/v1/topics", headers=HEADERS, json={
            "name": name, "read_queue_count": 2, "write_queue_count": 2,
            "permission": permission})
        assert created.status_code == 201, created.text
    messages = [{"body": f"m{index}", "keys": ["k", f"k{index}"], "tags": "t",
                 "properties": {"p": str(index)}, "queue_id": 0} for index in range(39)]
    messages.append({"body": "/w==", "body_encoding": "base64", "queue_id": 0})
    results = []
    for first in range(0, len(messages), 10):  # max_batch_messages in tests
        put = await client.post("/v1/topics/R/messages:batch", headers=HEADERS,
                                json={"messages": messages[first:first + 10]})
        assert put.status_code == 201, put.text
        results += put.json()["results"]
    wait_dispatched(served.broker.store)
    commit = await client.put("/v1/groups/g/offsets/R/queues/0", headers=HEADERS,
                              json={"offset": 3})
    assert commit.status_code == 200, commit.text
    msg_id: str = results[0]["msg_id"]
    return msg_id


def _reads(msg_id: str) -> list[tuple[str, dict[str, str]]]:
    """Requests for every lean read: answers, refusals, and parameters the lean lane leaves
    to FastAPI (out of their plain form or bounds)."""
    consume = "/v1/topics/R/queues/0/messages"
    return [
        (consume, {}),
        (consume, {"offset": "5", "max_messages": "32", "body_encoding": "utf8"}),
        (consume, {"offset": "0", "max_messages": "1"}),
        (consume, {"offset": "38", "max_messages": "5", "body_encoding": "utf8"}),
        (consume, {"offset": "40"}),
        (consume, {"offset": "90"}),
        (consume, {"offset": "-1"}),
        (consume, {"offset": "05"}),
        (consume, {"max_messages": "0"}),
        (consume, {"max_messages": "1025"}),
        (consume, {"body_encoding": "UTF8"}),
        (consume, {"wait_ms": "x"}),
        ("/v1/topics/R/queues/1/messages", {}),
        ("/v1/topics/R/queues/2/messages", {}),
        ("/v1/topics/R/queues/1024/messages", {}),
        ("/v1/topics/Nope/queues/0/messages", {}),
        ("/v1/topics/Hidden/queues/0/messages", {}),
        ("/v1/topics/TWINLOG_SYS_METADATA/queues/0/messages", {}),
        ("/v1/topics/a%0A/queues/0/messages", {}),
        (f"/v1/messages/{msg_id}", {"body_encoding": "utf8"}),
        (f"/v1/messages/{msg_id}", {}),
        (f"/v1/messages/{msg_id}", {"body_encoding": "hex"}),
        ("/v1/messages/not-an-id", {}),
        (f"/v1/messages/{msg_id[:16]}{'F' * 16}", {}),
        ("/v1/topics/R/messages", {"key": "k", "max_messages": "3"}),
        ("/v1/topics/R/messages", {"key": "k7", "body_encoding": "utf8"}),
        ("/v1/topics/R/messages", {"key": ""}),
        ("/v1/topics/R/messages", {}),
        ("/v1/topics/Nope/messages", {"key": "k"}),
        ("/v1/groups/g/lag", {}),
        ("/v1/groups/g/lag", {"topic": "R"}),
        ("/v1/groups/g/lag", {"topic": "bad topic"}),
        ("/v1/groups/none/lag", {}),
        ("/v1/groups/g/offsets", {}),
        ("/v1/groups/g/offsets", {"topic": "Nope"}),
        ("/admin/diff", {}),
    ]


@contextmanager
def _fastapi_lane_only(app: Any) -> Iterator[None]:
    assert isinstance(app, TwinlogAPI)
    lean = app._lean_routes
    assert {"GET", "PUT"} <= lean.keys()
    app._lean_routes = {}
    try:
        yield
    finally:
        app._lean_routes = lean


def _answer(response: httpx.Response) -> tuple[int, str | None, bytes]:
    return response.status_code, response.headers.get("content-type"), response.content


async def test_the_lean_reads_answer_as_fastapi_does(tmp_path: Path) -> None:
    """Every lean read, its refusals and what it leaves to FastAPI: status, content type
    and body byte for byte as FastAPI's lane answers them, with and without a token."""
    async with serving(_settings(tmp_path)) as served:
        msg_id = await _prepare(served)
        requests = _reads(msg_id)
        client = served.client

        async def answers() -> list[tuple[int, str | None, bytes]]:
            found = []
            for path, params in requests:
                found.append(_answer(await client.get(path, params=params, headers=HEADERS)))
                found.append(_answer(await client.get(path, params=params)))
            return found

        lean = await answers()
        with _fastapi_lane_only(served.app):
            fastapi = await answers()
        for (path, params), lean_pair, fastapi_pair in zip(
                requests, zip(lean[::2], lean[1::2], strict=True),
                zip(fastapi[::2], fastapi[1::2], strict=True), strict=True):
            assert lean_pair == fastapi_pair, (path, params)
        assert {status for status, _, _ in lean} >= {200, 400, 401, 403, 404}


async def test_the_lean_commit_answers_as_fastapi_does(tmp_path: Path) -> None:
    """Commits (forward, the same offset, backwards, past the queue, bodies of other shapes
    or types, no token) answer the same from both lanes; the two lanes commit to two groups
    so that each meets the same state."""
    async with serving(_settings(tmp_path)) as served:
        await _prepare(served)
        client = served.client
        bodies: list[tuple[dict[str, str], bytes]] = [
            (HEADERS, b'{"offset": 5}'),
            (HEADERS, b'{"offset": 5}'),
            (HEADERS, b'{"offset": 2}'),
            (HEADERS, b'{"offset": 1, "allow_backwards": true}'),
            (HEADERS, b'{"offset": 99}'),
            (HEADERS, b'{"offset": "7"}'),
            (HEADERS, b'{"offset": 7.0}'),
            (HEADERS, b'{"offset": 8, "extra": 1}'),
            (HEADERS, b'{"offset": 8, "allow_backwards": 1}'),
            (HEADERS, b"[8]"),
            (HEADERS, b"{"),
            ({**HEADERS, "Content-Type": "text/plain"}, b'{"offset": 9}'),
            ({}, b'{"offset": 10}'),
        ]

        async def commits(group: str) -> list[tuple[int, str | None, Any]]:
            found = []
            for headers, body in bodies:
                response = await client.put(
                    f"/v1/groups/{group}/offsets/R/queues/0", content=body,
                    headers={"Content-Type": "application/json", **headers})
                document = json.loads(response.content)
                document.pop("updated_at_ms", None)
                document.pop("group", None)
                document.pop("instance", None)
                if "detail" in document:
                    document["detail"] = document["detail"].replace(group, "G")
                found.append((response.status_code, response.headers.get("content-type"),
                              document))
            return found

        lean = await commits("grpA")
        with _fastapi_lane_only(served.app):
            fastapi = await commits("grpB")
        assert lean == fastapi
        assert [status for status, _, _ in lean] == [
            200, 200, 409, 200, 409, 400, 200, 400, 400, 400, 400, 415, 401], lean


@contextmanager
def _counting_queries(served: Served) -> Iterator[list[str]]:
    engine = served.broker.metadata_store._engine
    statements: list[str] = []

    def count(_connection: Any, _cursor: Any, statement: str, *_: Any) -> None:
        # (the offset persister writes every few seconds, whatever requests come)
        if threading.current_thread().name != "consumer-offset-persister":
            statements.append(statement)

    event.listen(engine, "before_cursor_execute", count)
    try:
        yield statements
    finally:
        event.remove(engine, "before_cursor_execute", count)


async def test_reads_and_a_known_queues_commit_query_nothing(tmp_path: Path) -> None:
    """Consume, a message by id or key, lag, offsets and the commit of a queue committed
    before: no statement reaches the metadata database (the view and the offset table
    answer)."""
    async with serving(_settings(tmp_path)) as served:
        msg_id = await _prepare(served)
        client = served.client
        with _counting_queries(served) as statements:
            for path, params in [("/v1/topics/R/queues/0/messages", {"max_messages": "8"}),
                                 ("/v1/topics/R/queues/1/messages", {}),
                                 (f"/v1/messages/{msg_id}", {}),
                                 ("/v1/topics/R/messages", {"key": "k"}),
                                 ("/v1/groups/g/lag", {}),
                                 ("/v1/groups/g/lag", {"topic": "R"}),
                                 ("/v1/groups/g/offsets", {})]:
                response = await client.get(path, params=params, headers=HEADERS)
                assert response.status_code == 200, (path, response.text)
            commit = await client.put("/v1/groups/g/offsets/R/queues/0", headers=HEADERS,
                                      json={"offset": 9})
            assert commit.status_code == 200, commit.text
        assert statements == []


def test_query_parameters_parse_as_starlette_parses_them() -> None:
    """query_of's split of a query with nothing to unquote gives parse_qsl's pairs (the
    last of a repeated name winning), and a query with something to unquote parse_qsl's."""
    for query in ("offset=1&max_messages=2", "a", "a=&b", "&&a=1&&", "a=1&a=2", "a=b=c",
                  "=x", ";a=1", "a=1;b=2", "x=%41&y=1", "x=a+b", "a=1&&b"):
        assert query_of({"query_string": query.encode()}) == dict(
            parse_qsl(query, keep_blank_values=True)), query
    assert query_of({"query_string": b""}) == {} and query_of({}) == {}


async def test_the_lean_group_consumption_answers_as_fastapi_does(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Receive, ack and change of invisibility (answers, refusals, bodies of other shapes or
    types, no token) answer the same from both lanes, each lane with its own group on the
    same topic; the lean lane runs no FastAPI dependency (the token check on a worker
    thread)."""
    async with serving(_settings(tmp_path)) as served:
        await _prepare(served)
        client = served.client
        dependency_calls = [0]
        check = ScopeCheck.__call__

        @functools.wraps(check)  # FastAPI reads the dependency's parameters from it
        def counted(self: ScopeCheck, *args: Any, **kwargs: Any) -> None:
            dependency_calls[0] += 1
            check(self, *args, **kwargs)

        monkeypatch.setattr(ScopeCheck, "__call__", counted)

        async def answers(group: str) -> list[tuple[int, str | None, Any]]:
            created = await client.post("/v1/groups", headers=HEADERS, json={"name": group})
            assert created.status_code == 201, created.text
            path = f"/v1/groups/{group}/topics/R/messages"
            handles: list[str] = []
            found = []

            async def post(action: str, body: bytes, headers: dict[str, str] = HEADERS,
                           ) -> None:
                response = await client.post(
                    f"{path}:{action}", content=body,
                    headers={"Content-Type": "application/json", **headers})
                document = json.loads(response.content)
                handles.extend(message["receipt_handle"]
                               for message in document.get("messages", ()))
                if isinstance(document.get("receipt_handle"), str):  # a change's new handle
                    handles.append(document["receipt_handle"])
                text = json.dumps(document).replace(group, "G")
                for number, handle in enumerate(handles):
                    text = text.replace(handle, f"H{number}")
                document = json.loads(text)
                document.pop("instance", None)
                for message in document.get("messages", ()):
                    message.pop("invisible_until_ms")
                    message.pop("store_timestamp_ms", None)
                document.pop("invisible_until_ms", None)
                found.append((response.status_code, response.headers.get("content-type"),
                              document))

            receive = b'{"max_messages": 3, "invisible_ms": 60000, "body_encoding": "utf8"}'
            await post("receive", receive)
            await post("receive", b'{"max_messages": 2, "tags": "t"}')
            for body in (b'{"max_messages": 0}', b'{"max_messages": "2"}',
                         b'{"invisible_ms": 5}', b'{"tags": "a || "}', b'{"extra": 1}',
                         b'{"body_encoding": "hex"}', b'{"wait_ms": -1}', b"[1]", b"{"):
                await post("receive", body)
            await post("receive", receive, {**HEADERS, "Content-Type": "text/plain"})
            await post("receive", receive, {})
            first, second, third, fourth = handles[:4]
            await post("ack", json.dumps({"receipt_handles": [first]}).encode())
            await post("ack", json.dumps({"receipt_handles": [first]}).encode())
            await post("ack", json.dumps({"receipt_handles": [second, "garbage"]}).encode())
            for body in (b'{"receipt_handles": []}', b'{"receipt_handles": [1]}',
                         b'{"receipt_handles": "x"}', b"{}"):
                await post("ack", body)
            change = {"receipt_handle": third, "invisible_ms": 60_000}
            await post("change-invisibility", json.dumps(change).encode())
            await post("change-invisibility", json.dumps(change).encode())
            await post("change-invisibility", json.dumps(
                {"receipt_handle": fourth, "invisible_ms": 0}).encode())
            await post("change-invisibility", json.dumps({"receipt_handle": fourth}).encode())
            await post("change-invisibility", b'{"receipt_handle": "x", "invisible_ms": 1.5}')
            return found

        lean = await answers("popA")
        lean_dependency_calls, dependency_calls[0] = dependency_calls[0], 0
        with _fastapi_lane_only(served.app):
            fastapi = await answers("popB")
        assert lean == fastapi
        assert [status for status, _, _ in lean] == [
            200, 200, 400, 400, 400, 400, 400, 400, 400, 400, 400, 415, 401,
            200, 409, 207, 400, 400, 400, 400, 200, 409, 200, 400, 400], lean
        # The lean lane left only the refused bodies to FastAPI (each solves the check once).
        fallbacks = 8 + 4 + 2  # refused receive, ack and change bodies
        assert lean_dependency_calls == fallbacks, lean_dependency_calls
        assert dependency_calls[0] > lean_dependency_calls
