"""`GET /v1/messages/{msg_id}` through the app: found, 404, 400."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.app import app_settings, problem, serving

pytestmark = pytest.mark.anyio


async def test_get_message_by_id(tmp_path: Path) -> None:
    """A produced message is found by its msg_id; an id past the log answers 404
    MESSAGE_NOT_FOUND, one that is not 32 hex digits 400 INVALID_MESSAGE_ID."""
    async with serving(app_settings(tmp_path)) as served:
        put = await served.client.post("/v1/topics/ById/messages",
                                       json={"body": "hello", "keys": ["k1"], "tags": "t"})
        assert put.status_code == 201, put.text
        msg_id = put.json()["msg_id"]
        found = await served.client.get(f"/v1/messages/{msg_id}",
                                        params={"body_encoding": "utf8"})
        assert found.status_code == 200, found.text
        message = found.json()
        assert (message["msg_id"], message["body"], message["keys"], message["tags"]) == (
            msg_id, "hello", ["k1"], "t")
        past = msg_id[:16] + f"{served.broker.store.max_offset + 100:016X}"
        missing = await served.client.get(f"/v1/messages/{past}")
        assert missing.status_code == 404
        assert problem(missing)["error_code"] == "MESSAGE_NOT_FOUND"
        malformed = await served.client.get("/v1/messages/not-an-id")
        assert malformed.status_code == 400
        assert problem(malformed)["error_code"] == "INVALID_MESSAGE_ID"
