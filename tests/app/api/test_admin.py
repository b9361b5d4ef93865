"""Topics, groups, offsets and lag; the admin views, metrics, health and their tokens."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from app.api.schemas.broker import BrokerView, StoreView, TableExportView
from app.api.schemas.groups import LagReport
from app.api.schemas.ha import DiffView, HaView
from app.api.schemas.topics import TopicDetail
from store.metadata import MetadataTable
from tests.support.app import Served, app_settings, problem, serving
from tests.support.store import wait_dispatched

pytestmark = pytest.mark.anyio

ADMIN = {"authorization": "Bearer admin-token"}
CONSUMER = {"authorization": "Bearer consumer-token"}
PRODUCER = {"authorization": "Bearer producer-token"}
MONITOR = {"authorization": "Bearer monitor-token"}
DASHBOARD = "https://dash.example:3000"


@pytest.fixture(scope="module")
async def served(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Served]:
    settings = app_settings(tmp_path_factory.mktemp("admin"), auth_tokens={
        "admin-token": ["admin", "consume"], "consumer-token": ["consume"],
        "producer-token": ["produce"], "monitor-token": ["monitor"]},
        cors_allow_origins=[DASHBOARD])
    async with serving(settings) as running:
        yield running


async def _produce(served: Served, topic: str, queue_id: int, count: int) -> None:
    for index in range(count):
        response = await served.client.post(f"/v1/topics/{topic}/messages", headers=PRODUCER,
                                            json={"body": f"m{index}", "queue_id": queue_id})
        assert response.status_code == 201
    wait_dispatched(served.broker.store)


async def test_topic_lifecycle(served: Served) -> None:
    """An admin creates a topic; consumers list and describe it with per-queue offsets; a
    second create is 409; a consumer token cannot create."""
    create = {"name": "Admin1", "read_queue_count": 3, "write_queue_count": 3}
    forbidden = await served.client.post("/v1/topics", json=create, headers=CONSUMER)
    assert forbidden.status_code == 403
    created = await served.client.post("/v1/topics", json=create, headers=ADMIN)
    assert created.status_code == 201, created.text
    again = await served.client.post("/v1/topics", json=create, headers=ADMIN)
    assert again.status_code == 409 and problem(again)["error_code"] == "TOPIC_ALREADY_EXISTS"
    await _produce(served, "Admin1", 1, 2)
    detail = TopicDetail.model_validate_json(
        (await served.client.get("/v1/topics/Admin1", headers=CONSUMER)).content)
    assert [(q.queue_id, q.min_offset, q.max_offset) for q in detail.queues] == [
        (0, 0, 0), (1, 0, 2), (2, 0, 0)]
    listed = (await served.client.get("/v1/topics", headers=CONSUMER)).json()["topics"]
    assert "Admin1" in {topic["name"] for topic in listed}
    missing = await served.client.get("/v1/topics/Nope", headers=CONSUMER)
    assert missing.status_code == 404


async def test_offsets_and_lag(served: Served) -> None:
    """Commits move forward only (409 otherwise, unless allow_backwards), never past the log
    end (400); lag is per queue with max and total, -1 for a queue never committed."""
    await _produce(served, "Lagging", 0, 5)
    await _produce(served, "Lagging", 1, 2)
    url = "/v1/groups/G1/offsets/Lagging/queues/0"
    assert (await served.client.put(url, json={"offset": 3}, headers=CONSUMER)).status_code == 200
    back = await served.client.put(url, json={"offset": 1}, headers=CONSUMER)
    assert back.status_code == 409 and problem(back)["error_code"] == "OFFSET_MOVES_BACKWARDS"
    past = await served.client.put(url, json={"offset": 6}, headers=CONSUMER)
    assert past.status_code == 409 and problem(past)["error_code"] == "INVALID_OFFSET"
    reset = await served.client.put(url, json={"offset": 2, "allow_backwards": True},
                                    headers=CONSUMER)
    assert reset.json()["offset"] == 2
    lag = LagReport.model_validate_json(
        (await served.client.get("/v1/groups/G1/lag", headers=CONSUMER)).content)
    by_queue = {(q.topic, q.queue_id): (q.consumer_offset, q.lag) for q in lag.queues}
    assert by_queue[("Lagging", 0)] == (2, 3)
    assert by_queue[("Lagging", 1)] == (-1, 2)
    assert (lag.max_lag, lag.total_lag) == (3, 5)
    assert lag.topics[0].total_lag == 5
    offsets = (await served.client.get("/v1/groups/G1/offsets", headers=CONSUMER)).json()
    assert [o["offset"] for o in offsets["offsets"]] == [2]
    unknown = await served.client.get("/v1/groups/Nobody/lag", headers=CONSUMER)
    assert unknown.status_code == 404


async def test_groups(served: Served) -> None:
    """Groups are created by an admin (or by a first commit) and listed and described."""
    created = await served.client.post("/v1/groups", json={"name": "Billing"}, headers=ADMIN)
    assert created.status_code == 201
    described = await served.client.get("/v1/groups/Billing", headers=CONSUMER)
    assert described.json()["retry_times_max"] == 16
    names = {g["name"] for g in (await served.client.get("/v1/groups", headers=CONSUMER)).json()[
        "groups"]}
    assert "Billing" in names
    bad = await served.client.post("/v1/groups", json={"name": "bad name"}, headers=ADMIN)
    assert bad.status_code == 400


async def test_admin_views(served: Served) -> None:
    """/admin/diff, /admin/ha, /admin/broker and /admin/store describe a lone master."""
    await _produce(served, "Views", 0, 3)
    diff = DiffView.model_validate_json(
        (await served.client.get("/admin/diff", headers=ADMIN)).content)
    assert diff.role == "ASYNC_MASTER" and diff.master is not None and diff.slave is None
    assert diff.master.master_max_offset == served.broker.store.max_offset
    assert diff.master.max_diff_bytes == 0 and diff.master.slaves == []
    ha = HaView.model_validate_json((await served.client.get("/admin/ha", headers=ADMIN)).content)
    assert ha.master is not None and ha.master.connection_count == 0
    broker = BrokerView.model_validate_json(
        (await served.client.get("/admin/broker", headers=ADMIN)).content)
    assert broker.role == "ASYNC_MASTER" and broker.flush_disk_type == "ASYNC_FLUSH"
    assert broker.versions["fastapi"] and broker.metadata_schema_revision
    assert "auth_tokens" not in broker.settings
    assert set(broker.data_versions) == {"topic_config", "subscription_group",
                                         "consumer_offset", "delay_offset"}
    store = StoreView.model_validate_json(
        (await served.client.get("/admin/store", headers=ADMIN)).content)
    assert store.max_offset == served.broker.store.max_offset
    assert store.put_counts["PUT_OK"] >= 3 and store.commit_log_files
    assert store.disk_used_bytes > 0


async def test_sync_exports(served: Served) -> None:
    """The four /admin/sync tables are what MetadataStore exports, with data versions."""
    await served.client.post("/v1/topics", json={"name": "Synced"}, headers=ADMIN)
    for path, table in (("topics", "topic_config"),
                        ("subscription-groups", "subscription_group"),
                        ("consumer-offsets", "consumer_offset"),
                        ("delay-offsets", "delay_offset")):
        response = await served.client.get(f"/admin/sync/{path}", headers=ADMIN)
        export = TableExportView.model_validate_json(response.content)
        assert export.table == table
        metadata = served.broker.metadata_store
        assert export.model_dump(include={"table", "data_version", "rows"}) == (
            metadata.export_table(MetadataTable(table)))
        # ... and which of the log's metadata records the table reflects
        assert export.broker_group == served.broker.settings.broker_group
        assert export.log_position is not None
        assert export.log_position.queue_offset == metadata.log_position.queue_offset >= 1
        assert export.metadata_min_queue_offset == 0
    topics = (await served.client.get("/admin/sync/topics", headers=ADMIN)).json()
    assert "Synced" in {row["name"] for row in topics["rows"]}
    assert topics["data_version"]["counter"] >= 1


async def test_admin_needs_the_admin_scope(served: Served) -> None:
    """Admin and metrics need an admin token; health and readiness need none."""
    for path in ("/admin/diff", "/admin/store", "/admin/sync/topics", "/metrics"):
        assert (await served.client.get(path)).status_code == 401
        assert (await served.client.get(path, headers=CONSUMER)).status_code == 403
    assert (await served.client.get("/healthz")).json() == {"status": "ok"}
    ready = (await served.client.get("/readyz")).json()
    assert ready["ready"] is True and ready["role"] == "ASYNC_MASTER"
    assert (await served.client.get("/v1/topics")).status_code == 401


async def test_metrics(served: Served) -> None:
    """/metrics is Prometheus text with puts by status, latency, bytes and offsets."""
    await _produce(served, "Measured", 0, 2)
    await served.client.post("/v1/topics/Measured/messages", content=b"{", headers={
        **PRODUCER, "content-type": "application/json"})
    response = await served.client.get("/metrics", headers=ADMIN)
    assert response.headers["content-type"].startswith("text/plain")
    text = response.text
    for expected in ('twinlog_puts_total{status="PUT_OK"}',
                     'twinlog_puts_total{status="MESSAGE_ILLEGAL"}',
                     'twinlog_put_latency_seconds_bucket{kind="single",le="+Inf"}',
                     "twinlog_http_produce_request_bytes_total",
                     "twinlog_commit_log_max_offset_bytes", "twinlog_ha_connections",
                     "twinlog_dispatch_behind_bytes", "twinlog_store_put_bytes_total"):
        assert expected in text, expected


async def test_unknown_path_and_method(served: Served) -> None:
    """Framework errors are problem+json too: 404 for a path, 405 for a method."""
    missing = await served.client.get("/v2/nothing", headers=ADMIN)
    assert missing.status_code == 404 and problem(missing)["error_code"] == "NOT_FOUND"
    wrong = await served.client.delete("/v1/topics", headers=ADMIN)
    assert wrong.status_code == 405 and problem(wrong)["error_code"] == "METHOD_NOT_ALLOWED"
    body = await served.client.post("/v1/topics", content=b"name=x", headers={
        **ADMIN, "content-type": "application/x-www-form-urlencoded"})
    assert body.status_code == 415


async def test_monitor_token_reads_but_changes_nothing(served: Served) -> None:
    """A monitor token reads every GET admin endpoint and /metrics; it may not create a
    snapshot, promote, create a topic or produce (403); the admin token still reads them."""
    for path in ("/admin/diff", "/admin/ha", "/admin/broker", "/admin/store",
                 "/admin/sync/topics", "/metrics"):
        for headers in (MONITOR, ADMIN):
            response = await served.client.get(path, headers=headers)
            assert response.status_code == 200, (path, response.text)
    for path in ("/admin/snapshots", "/admin/ha/promote", "/admin/ha/demote"):
        refused = await served.client.post(path, headers=MONITOR, json={})
        assert refused.status_code == 403, path
        assert problem(refused)["error_code"] == "FORBIDDEN"
    assert (await served.client.post("/v1/topics", headers=MONITOR,
                                     json={"name": "NotByMonitor"})).status_code == 403
    assert (await served.client.post("/v1/topics/T/messages", headers=MONITOR,
                                     json={"body": "x"})).status_code == 403


async def test_cors_preflight_for_a_dashboard_origin(served: Served) -> None:
    """A browser preflight from a configured origin is answered without a token and allows
    the Authorization header; the real GET carries the origin; other origins get nothing."""
    preflight = await served.client.options("/admin/diff", headers={
        "origin": DASHBOARD, "access-control-request-method": "GET",
        "access-control-request-headers": "authorization"})
    assert preflight.status_code == 200
    assert preflight.headers["access-control-allow-origin"] == DASHBOARD
    assert "authorization" in preflight.headers["access-control-allow-headers"].lower()
    read = await served.client.get("/metrics", headers={**MONITOR, "origin": DASHBOARD})
    assert read.headers["access-control-allow-origin"] == DASHBOARD
    stranger = await served.client.options("/admin/diff", headers={
        "origin": "https://evil.example", "access-control-request-method": "GET"})
    assert stranger.status_code == 400
    assert "access-control-allow-origin" not in stranger.headers


async def test_405_names_every_method_of_the_path(served: Served) -> None:
    """A 405 carries Allow (RFC 9110) with the methods of every route of that path, not only
    the first one matched: /v1/topics has GET (list) and POST (create)."""
    for method, path, allowed in (("DELETE", "/v1/topics", "GET, POST"),
                                  ("TRACE", "/v1/groups/g1", "GET, PATCH, DELETE"),
                                  ("PUT", "/admin/diff", "GET"),
                                  ("DELETE", "/v1/topics/T/messages", "GET, POST")):
        answer = await served.client.request(method, path, headers=ADMIN)
        assert answer.status_code == 405, (method, path)
        assert answer.headers.get("allow") == allowed, (method, path)


async def test_integers_written_with_a_fraction_of_zero(served: Served) -> None:
    """JSON Schema integers include 1.0: topic, group, offset, produce and batch bodies take
    them as integers; 1.5 and true are still refused."""
    created = await served.client.post("/v1/topics", headers=ADMIN, json={
        "name": "Floaty", "read_queue_count": 2.0, "write_queue_count": 2.0,
        "permission": 6.0})
    assert created.status_code == 201 and created.json()["write_queue_count"] == 2
    group = await served.client.post("/v1/groups", headers=ADMIN, json={
        "name": "floaty-group", "retry_queue_count": 1.0, "retry_times_max": 3.0})
    assert group.status_code == 201 and group.json()["retry_times_max"] == 3
    single = await served.client.post("/v1/topics/Floaty/messages", headers=PRODUCER,
                                      json={"body": "x", "queue_id": 1.0})
    assert single.status_code == 201 and single.json()["queue_id"] == 1
    batch = await served.client.post("/v1/topics/Floaty/messages:batch", headers=PRODUCER,
                                     json={"messages": [{"body": "y", "queue_id": 1.0}]})
    assert batch.status_code == 201 and batch.json()["results"][0]["queue_id"] == 1
    wait_dispatched(served.broker.store)
    commit = await served.client.put("/v1/groups/floaty-group/offsets/Floaty/queues/1",
                                     headers=CONSUMER, json={"offset": 1.0})
    assert commit.status_code == 200, commit.text
    for bad in (1.5, True):
        refused = await served.client.post("/v1/topics/Floaty/messages", headers=PRODUCER,
                                           json={"body": "x", "queue_id": bad})
        assert refused.status_code == 400, bad
