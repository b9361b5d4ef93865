"""Produce and consume through the app: JSON, raw bodies, batches, and what comes back."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from typing import Any

import pytest

from app.api.schemas.messages import ConsumeResult
from app.api.schemas.produce import BatchResult, PutResult
from tests.support.app import Served, ServeFactory, app_settings, serving
from tests.support.store import wait_dispatched

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
async def served(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Served]:
    """One broker for the module; each test uses its own topic."""
    async with serving(app_settings(tmp_path_factory.mktemp("produce"))) as running:
        yield running


async def _read(served: Served, topic: str, queue_id: int, offset: int = 0,
                **params: Any) -> ConsumeResult:
    wait_dispatched(served.broker.store)
    response = await served.client.get(f"/v1/topics/{topic}/queues/{queue_id}/messages",
                                       params={"offset": offset, **params})
    assert response.status_code == 200, response.text
    return ConsumeResult.model_validate_json(response.content)


async def test_json_message_round_trip(served: Served) -> None:
    """A JSON message comes back with its body, keys, tag, properties and offsets."""
    response = await served.client.post("/v1/topics/Json/messages", json={
        "body": "héllo", "keys": ["order-1", "user-7"], "tags": "created",
        "properties": {"trace": "t-1"}, "queue_id": 2})
    assert response.status_code == 201, response.text
    result = PutResult.model_validate_json(response.content)
    assert (result.status.value, result.queue_id, result.queue_offset) == ("PUT_OK", 2, 0)
    assert result.http_status == 201 and not result.replayed and result.msg_id
    read = await _read(served, "Json", 2, body_encoding="utf8")
    assert read.next_offset == 1 and read.status.value == "FOUND"
    (message,) = read.messages
    assert (message.body, message.body_encoding) == ("héllo", "utf8")
    assert message.keys == ["order-1", "user-7"] and message.tags == "created"
    assert message.properties == {"trace": "t-1"}
    assert message.msg_id == result.msg_id
    assert message.commit_log_offset == result.commit_log_offset
    assert message.store_timestamp_ms >= message.born_timestamp_ms > 0


async def test_raw_body_with_attribute_headers(served: Served) -> None:
    """An octet-stream body is stored byte for byte; keys, tag, properties and the queue come
    from X-Twinlog-* headers and the query; non-UTF-8 bodies come back as base64."""
    body = bytes(range(256))
    response = await served.client.post(
        "/v1/topics/Raw/messages", params={"queue_id": 1}, content=body,
        headers={"content-type": "application/octet-stream", "x-twinlog-keys": "a, b",
                 "x-twinlog-tags": "bin", "x-twinlog-properties": '{"kind": "bytes"}'})
    assert response.status_code == 201, response.text
    read = await _read(served, "Raw", 1, body_encoding="utf8")
    (message,) = read.messages
    assert message.body_encoding == "base64"
    assert base64.b64decode(message.body) == body
    assert (message.keys, message.tags, message.properties) == (["a", "b"], "bin",
                                                                {"kind": "bytes"})


async def test_base64_json_body(served: Served) -> None:
    """A base64 JSON body is decoded before it is stored."""
    encoded = base64.b64encode(b"\x00\xffdata").decode()
    response = await served.client.post("/v1/topics/Base64/messages",
                                        json={"body": encoded, "body_encoding": "base64"})
    assert response.status_code == 201
    queue_id = response.json()["queue_id"]
    (message,) = (await _read(served, "Base64", queue_id)).messages
    assert base64.b64decode(message.body) == b"\x00\xffdata"


async def test_batch_stores_in_order(served: Served) -> None:
    """A batch answers one result per entry, in order, with consecutive offsets."""
    messages = [{"body": f"m{index}", "queue_id": 0} for index in range(5)]
    response = await served.client.post("/v1/topics/Batch/messages:batch",
                                        json={"messages": messages})
    assert response.status_code == 201, response.text
    results = BatchResult.model_validate_json(response.content).results
    assert [r.queue_offset for r in results] == [0, 1, 2, 3, 4]
    offsets = [r.commit_log_offset or 0 for r in results]
    assert offsets == sorted(offsets)
    read = await _read(served, "Batch", 0, body_encoding="utf8", max_messages=10)
    assert [m.body for m in read.messages] == [f"m{index}" for index in range(5)]


async def test_batch_with_a_refused_entry_is_207(served: Served) -> None:
    """An entry the store refuses (properties over 32 KiB) gets its own status and code;
    the others are stored, and the batch answers 207."""
    huge = {f"p{index}": "v" * 4000 for index in range(10)}
    response = await served.client.post("/v1/topics/Mixed/messages:batch", json={
        "messages": [{"body": "ok"}, {"body": "big", "properties": huge}, {"body": "ok2"}]})
    assert response.status_code == 207, response.text
    results = BatchResult.model_validate_json(response.content).results
    assert [r.status.value for r in results] == ["PUT_OK", "PROPERTIES_SIZE_EXCEEDED", "PUT_OK"]
    assert [r.http_status for r in results] == [201, 413, 201]
    assert results[1].detail and results[1].msg_id is None


async def test_single_message_over_properties_limit_is_413(served: Served) -> None:
    """A message whose properties exceed the record limit is 413 PROPERTIES_SIZE_EXCEEDED."""
    huge = {f"p{index}": "v" * 4000 for index in range(10)}
    before = served.stored_count()
    response = await served.client.post("/v1/topics/Props/messages",
                                        json={"body": "x", "properties": huge})
    assert response.status_code == 413
    assert response.json()["put_status"] == "PROPERTIES_SIZE_EXCEEDED"
    assert served.stored_count() == before


async def test_consume_offsets_and_unknown_queues(served: Served) -> None:
    """Reads past the end say so; a queue past the topic's read queues or an unknown topic
    is 404; a read from an old offset starts at the queue's minimum."""
    await served.client.post("/v1/topics/Reads/messages", json={"body": "x", "queue_id": 0})
    end = await _read(served, "Reads", 0, offset=1)
    assert end.status.value == "OFFSET_OVERFLOW_ONE" and end.next_offset == 1
    empty = await _read(served, "Reads", 3)
    assert empty.messages == [] and empty.next_offset == 0
    for url, code in (("/v1/topics/Reads/queues/4/messages", "QUEUE_NOT_FOUND"),
                      ("/v1/topics/Nobody/queues/0/messages", "TOPIC_NOT_FOUND")):
        response = await served.client.get(url)
        assert response.status_code == 404
        assert response.json()["error_code"] == code
    bad = await served.client.get("/v1/topics/Reads/queues/0/messages",
                                  params={"max_messages": 0})
    assert bad.status_code == 400 and bad.json()["error_code"] == "VALIDATION_FAILED"


async def test_created_topic_routes_to_its_queue_count(served: Served) -> None:
    """A topic created with 2 write queues spreads messages over exactly those two."""
    created = await served.client.post("/v1/topics", json={"name": "Two",
                                                           "write_queue_count": 2})
    assert created.status_code == 201
    queue_ids = set()
    for _ in range(4):
        response = await served.client.post("/v1/topics/Two/messages", json={"body": "x"})
        queue_ids.add(response.json()["queue_id"])
    assert queue_ids == {0, 1}
    refused = await served.client.post("/v1/topics/Two/messages",
                                       json={"body": "x", "queue_id": 2})
    assert refused.status_code == 409


async def test_json_body_with_the_queue_id_query_and_headers(serve: ServeFactory) -> None:
    """With a JSON body, the queue_id query and X-Twinlog-* headers fill in what the body
    leaves out (as the spec says); the body's own fields win."""
    async with serve() as served:
        await _json_with_query_and_headers(served)


async def _json_with_query_and_headers(served: Served) -> None:
    url = "/v1/topics/Orders/messages?queue_id=1"
    response = await served.client.post(url, json={"body": "x"}, headers={
        "x-twinlog-tags": "from-header", "x-twinlog-keys": "k1,k2"})
    assert response.status_code == 201 and response.json()["queue_id"] == 1
    own = await served.client.post(url, json={"body": "x", "queue_id": 2, "tags": "own"},
                                   headers={"x-twinlog-tags": "from-header"})
    assert own.status_code == 201 and own.json()["queue_id"] == 2
    wait_dispatched(served.broker.store)
    read = await served.client.get("/v1/topics/Orders/queues/1/messages")
    first = read.json()["messages"][0]
    assert (first["tags"], first["keys"]) == ("from-header", ["k1", "k2"])
    read = await served.client.get("/v1/topics/Orders/queues/2/messages")
    assert read.json()["messages"][0]["tags"] == "own"
