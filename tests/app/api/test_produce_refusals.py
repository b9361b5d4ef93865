"""Bad produce requests: each answers the right 4xx as problem+json and stores nothing."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.support.app import (
    MAX_BATCH_MESSAGES,
    MAX_BODY_SIZE_BYTES,
    MESSAGE_SIZE_MAX_BYTES,
    Served,
    app_settings,
    problem,
    serving,
)
from tests.support.ports import refused_port
from tests.support.store import wait_dispatched

pytestmark = pytest.mark.anyio

URL = "/v1/topics/Orders/messages"
JSON = {"content-type": "application/json"}
RAW = {"content-type": "application/octet-stream"}


@pytest.fixture(scope="module")
async def served(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Served]:
    """One open broker for the module: every test here leaves it as empty as it found it."""
    async with serving(app_settings(tmp_path_factory.mktemp("refusals"))) as running:
        yield running


@pytest.fixture(scope="module")
async def guarded(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Served]:
    """A broker with tokens: `producer` may produce, `reader` may only consume."""
    settings = app_settings(tmp_path_factory.mktemp("guarded"),
                            auth_tokens={"producer": ["produce"], "reader": ["consume"]})
    async with serving(settings) as running:
        yield running


@pytest.fixture(scope="module")
async def slave(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Served]:
    """A slave whose master never answers (nothing here needs it to)."""
    with refused_port() as ha_port, refused_port() as http_port:
        settings = app_settings(tmp_path_factory.mktemp("slave"), broker_role="SLAVE",
                                ha_master_address=f"127.0.0.1:{ha_port}",
                                master_http_address=f"http://127.0.0.1:{http_port}",
                                ha_reconnect_interval_ms=60_000, slave_sync_interval_s=3600)
        async with serving(settings) as running:
            yield running


async def _refused(served: Served, url: str, expected_status: int, expected_code: str,
                   **request: Any) -> dict[str, Any]:
    response = await served.client.post(url, **request)
    document = problem(response)
    assert response.status_code == expected_status, response.text
    assert document["error_code"] == expected_code, document
    assert served.stored_count() == 0
    # Nothing of the message is in the log (a topic it auto-created is, as a metadata record).
    store = served.broker.store
    wait_dispatched(store)
    assert all(store.queue_offset_range(topic, queue_id) in (None, (0, 0))
               for topic, queue_ids in store.queues.topics().items() for queue_id in queue_ids)
    return document


async def test_malformed_json(served: Served) -> None:
    """A body that is not JSON is 400 MALFORMED_JSON with put_status MESSAGE_ILLEGAL."""
    document = await _refused(served, URL, 400, "MALFORMED_JSON", content=b'{"body": ',
                              headers=JSON)
    assert document["put_status"] == "MESSAGE_ILLEGAL"


async def test_json_not_matching_the_schema(served: Served) -> None:
    """A wrong type, a missing body and an unknown field are 400 VALIDATION_FAILED with
    the schema errors listed."""
    for payload in ({"body": 5}, {"keys": ["a"]}, {"body": "x", "colour": "red"},
                    {"body": "x", "queue_id": "1"}, {"body": "x", "body_encoding": "hex"}):
        document = await _refused(served, URL, 400, "VALIDATION_FAILED",
                                  content=json.dumps(payload), headers=JSON)
        assert document["errors"], document


async def test_wrong_content_type(served: Served) -> None:
    """A text/plain body (or none declared) is 415 UNSUPPORTED_MEDIA_TYPE."""
    await _refused(served, URL, 415, "UNSUPPORTED_MEDIA_TYPE", content=b"hello",
                   headers={"content-type": "text/plain"})
    await _refused(served, URL, 415, "UNSUPPORTED_MEDIA_TYPE", content=b"hello")


async def test_batch_must_be_json(served: Served) -> None:
    """A raw body on the batch endpoint is 415."""
    await _refused(served, URL + ":batch", 415, "UNSUPPORTED_MEDIA_TYPE", content=b"x",
                   headers=RAW)


async def test_bad_base64(served: Served) -> None:
    """A base64 body that does not decode is 400 INVALID_BASE64."""
    await _refused(served, URL, 400, "INVALID_BASE64",
                   json={"body": "not base64!", "body_encoding": "base64"})


async def test_message_body_over_the_limit(served: Served) -> None:
    """A message body over message_size_max_bytes is 413 MESSAGE_TOO_LARGE, raw or JSON."""
    too_big = b"x" * (MESSAGE_SIZE_MAX_BYTES + 1)
    await _refused(served, URL, 413, "MESSAGE_TOO_LARGE", content=too_big, headers=RAW)
    await _refused(served, URL, 413, "MESSAGE_TOO_LARGE", json={
        "body": base64.b64encode(too_big).decode(), "body_encoding": "base64"})


async def test_request_body_over_the_limit(served: Served) -> None:
    """A request body over max_body_size_bytes is 413 REQUEST_TOO_LARGE, whether or not it
    declares its length."""
    too_big = b"x" * (MAX_BODY_SIZE_BYTES + 1)
    await _refused(served, URL, 413, "REQUEST_TOO_LARGE", content=too_big, headers=RAW)

    async def chunks() -> Any:
        for _ in range(5):
            yield b"y" * (MAX_BODY_SIZE_BYTES // 4)

    await _refused(served, URL, 413, "REQUEST_TOO_LARGE", content=chunks(), headers=RAW)


async def test_bad_topic_name(served: Served) -> None:
    """A topic with a character outside [A-Za-z0-9_%|-] or over 127 bytes is 400."""
    for topic in ("bad.topic", "x" * 128, "sp ace"):
        document = await _refused(served, f"/v1/topics/{topic}/messages", 400,
                                  "INVALID_TOPIC_NAME", json={"body": "x"})
        assert document["put_status"] == "MESSAGE_ILLEGAL"


async def test_too_many_batch_entries(served: Served) -> None:
    """More than max_batch_messages entries is 413 TOO_MANY_MESSAGES; none is stored."""
    messages = [{"body": f"m{index}"} for index in range(MAX_BATCH_MESSAGES + 1)]
    await _refused(served, URL + ":batch", 413, "TOO_MANY_MESSAGES", json={"messages": messages})


async def test_one_bad_batch_entry_refuses_the_batch(served: Served) -> None:
    """Validation is all or nothing: a bad entry refuses the batch and names its index."""
    messages = [{"body": "ok"}, {"body": "%%%", "body_encoding": "base64"}]
    document = await _refused(served, URL + ":batch", 400, "INVALID_BASE64",
                              json={"messages": messages})
    assert document["detail"].startswith("messages[1]")


async def test_unknown_queue(served: Served) -> None:
    """A queue id past the topic's write queues is 409 INVALID_QUEUE_ID, JSON or raw."""
    await _refused(served, URL, 409, "INVALID_QUEUE_ID", json={"body": "x", "queue_id": 4})
    await _refused(served, URL + "?queue_id=9", 409, "INVALID_QUEUE_ID", content=b"x",
                   headers=RAW)
    await _refused(served, URL + ":batch", 409, "INVALID_QUEUE_ID",
                   json={"messages": [{"body": "x", "queue_id": 7}]})


async def test_reserved_property_names(served: Served) -> None:
    """KEYS, TAGS and IDEMPOTENCY_KEY cannot be set through properties."""
    for name in ("KEYS", "TAGS", "IDEMPOTENCY_KEY"):
        await _refused(served, URL, 400, "VALIDATION_FAILED",
                       json={"body": "x", "properties": {name: "v"}})


async def test_bad_headers_of_a_raw_body(served: Served) -> None:
    """Raw-body attributes are validated like JSON ones: properties must be a JSON object
    of strings, keys must not hold spaces, queue_id must be a number."""
    for headers in ({"x-twinlog-properties": "not json"},
                    {"x-twinlog-properties": '{"a": 1}'},
                    {"x-twinlog-keys": "has space"}):
        await _refused(served, URL, 400, "VALIDATION_FAILED", content=b"x",
                       headers={**RAW, **headers})
    await _refused(served, URL + "?queue_id=one", 400, "VALIDATION_FAILED", content=b"x",
                   headers=RAW)


async def test_attributes_in_the_wrong_place(served: Served) -> None:
    """An Idempotency-Key header on a batch (whose entries carry keys) is refused rather than
    ignored; a bad X-Twinlog-* header or queue_id query is refused with a JSON body too."""
    await _refused(served, URL + ":batch", 400, "VALIDATION_FAILED",
                   json={"messages": [{"body": "x"}]}, headers={"idempotency-key": "k"})
    await _refused(served, URL, 400, "VALIDATION_FAILED", json={"body": "x"},
                   headers={"x-twinlog-properties": "null"})
    await _refused(served, URL + "?queue_id=x", 400, "VALIDATION_FAILED", json={"body": "x"})


async def test_bad_idempotency_key(served: Served) -> None:
    """An Idempotency-Key with spaces or over 128 characters is 400."""
    for key in ("has space", "k" * 129):
        await _refused(served, URL, 400, "INVALID_IDEMPOTENCY_KEY", json={"body": "x"},
                       headers={"idempotency-key": key})


async def test_missing_or_wrong_token(guarded: Served) -> None:
    """With tokens configured: no token or an unknown one is 401 (with WWW-Authenticate),
    a token without the produce scope is 403, for single and batch produce."""
    for headers, status, code in (({}, 401, "UNAUTHORIZED"),
                                  ({"authorization": "Bearer nope"}, 401, "UNAUTHORIZED"),
                                  ({"authorization": "Basic cHJvZHVjZXI="}, 401, "UNAUTHORIZED"),
                                  ({"authorization": "Bearer reader"}, 403, "FORBIDDEN")):
        document = await _refused(guarded, URL, status, code, json={"body": "x"},
                                  headers=headers)
        await _refused(guarded, URL + ":batch", status, code,
                       json={"messages": [{"body": "x"}]}, headers=headers)
        if status == 401:
            response = await guarded.client.post(URL, json={"body": "x"}, headers=headers)
            assert response.headers["www-authenticate"].startswith("Bearer")
        assert document["detail"]


async def test_produce_to_a_slave_is_503_naming_the_master(slave: Served) -> None:
    """A slave refuses produce with 503 SERVICE_NOT_AVAILABLE and the master's addresses."""
    for url, body in ((URL, {"body": "x"}), (URL + ":batch", {"messages": [{"body": "x"}]})):
        document = await _refused(slave, url, 503, "SERVICE_NOT_AVAILABLE", json=body)
        settings = slave.broker.settings
        assert document["master_http_address"] == settings.master_http_address
        assert document["master_ha_address"] == settings.ha_master_address
        assert document["put_status"] == "SERVICE_NOT_AVAILABLE"
