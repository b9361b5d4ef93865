"""Metadata changes as records of the log, seen through the API: the broker's own topic is
nobody's to use, and the bounds on topics and groups answer before anything is written."""

from __future__ import annotations

from pathlib import Path

import pytest

from store import Message
from store.system_topics import METADATA_TOPIC, PROPERTY_OP
from tests.support.app import app_settings, problem, serving
from tests.support.store import wait_until

pytestmark = pytest.mark.anyio


async def test_the_broker_s_own_topic_is_reserved(tmp_path: Path) -> None:
    async with serving(app_settings(tmp_path)) as served:
        client = served.client
        await client.post("/v1/topics", json={"name": "Visible"})
        for response in (await client.post("/v1/topics", json={"name": "TWINLOG_SYS_X"}),
                         await client.post(f"/v1/topics/{METADATA_TOPIC}/messages",
                                           json={"body": "x"})):
            assert response.status_code == 400, response.text
            assert problem(response)["error_code"] == "INVALID_TOPIC_NAME"
        for response in (await client.get(f"/v1/topics/{METADATA_TOPIC}/queues/0/messages"),
                         await client.get(f"/v1/topics/{METADATA_TOPIC}")):
            assert response.status_code in (400, 404), response.text
        listed = await client.get("/v1/topics")
        assert [topic["name"] for topic in listed.json()["topics"]] == ["Visible"]
        record = served.broker.store.get_messages(METADATA_TOPIC, 0, 0, 1).messages[0]
        by_id = await client.get(f"/v1/messages/{record.msg_id}")
        assert by_id.status_code == 404, by_id.text


async def test_write_queues_past_the_read_queues_are_refused(tmp_path: Path) -> None:
    """A write queue no reader reads would hold acknowledged messages no one can consume."""
    async with serving(app_settings(tmp_path)) as served:
        client = served.client
        created = await client.post("/v1/topics", json={
            "name": "Lopsided", "read_queue_count": 1, "write_queue_count": 4})
        assert created.status_code == 409, created.text
        assert problem(created)["error_code"] == "WRITE_QUEUES_EXCEED_READ_QUEUES"
        one = await client.post("/v1/topics", json={"name": "One", "read_queue_count": 1})
        assert (one.json()["read_queue_count"], one.json()["write_queue_count"]) == (1, 1)
        await client.post("/v1/topics", json={"name": "Even", "read_queue_count": 2,
                                              "write_queue_count": 2})
        grown = await client.patch("/v1/topics/Even", json={"write_queue_count": 3})
        assert grown.status_code == 409, grown.text
        both = await client.patch("/v1/topics/Even", json={"read_queue_count": 3,
                                                           "write_queue_count": 3})
        assert both.status_code == 200, both.text


async def test_groups_past_groups_max_are_refused_by_name(tmp_path: Path) -> None:
    async with serving(app_settings(tmp_path, groups_max=2)) as served:
        client = served.client
        await client.post("/v1/topics", json={"name": "T"})
        for name in ("g1", "g2"):
            assert (await client.post("/v1/groups", json={"name": name})).status_code == 201
        refused = await client.post("/v1/groups", json={"name": "g3"})
        assert refused.status_code == 409, refused.text
        assert problem(refused)["error_code"] == "GROUPS_MAX_REACHED"
        assert problem(refused)["setting"] == "groups_max"
        by_commit = await client.put("/v1/groups/g4/offsets/T/queues/0", json={"offset": 0})
        assert by_commit.status_code == 409, by_commit.text
        assert len((await client.get("/v1/groups")).json()["groups"]) == 2


@pytest.mark.parametrize("port", ["0", "99999"])
async def test_a_demote_to_a_port_out_of_range_is_400_naming_the_field(
        tmp_path: Path, port: str) -> None:
    async with serving(app_settings(tmp_path)) as served:
        response = await served.client.post("/admin/ha/demote", json={
            "master_ha_address": f"127.0.0.1:{port}",
            "master_http_address": "http://127.0.0.1:8080"})
        assert response.status_code == 400, response.text
        assert "master_ha_address" in response.text


async def test_a_dispatch_stuck_at_a_record_makes_the_broker_not_ready(tmp_path: Path) -> None:
    """A metadata record this broker cannot apply holds dispatch at it (its tables must not
    go on without it): /readyz answers 503 naming it, and the dispatch errors count it."""
    async with serving(app_settings(tmp_path)) as served:
        store = served.broker.store
        store.put_system_message(Message(METADATA_TOPIC, b'{"v": 99}', queue_id=0,
                                         properties={PROPERTY_OP: "topic.put"}))
        wait_until(lambda: store.dispatch.failing)
        ready = await served.client.get("/readyz")
        assert ready.status_code == 503, ready.text
        assert "dispatch fails" in ready.json()["detail"]
        assert "version 99" in ready.json()["detail"]
        metrics = (await served.client.get("/metrics")).text
        errors = [line for line in metrics.splitlines()
                  if line.startswith("twinlog_dispatch_errors_total ")]
        assert errors and float(errors[0].split()[1]) >= 1
