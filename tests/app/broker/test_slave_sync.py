"""Slave metadata sync: pulls the master's four tables, applies them as RocketMQ does, and
keeps failures visible and retried."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app.api.main import create_app
from app.broker.slave_sync import RETRY_FIRST_S, SlaveSync
from store.metadata import MetadataStore, MetadataTable, sqlite_database_url
from tests.support.app import app_settings
from tests.support.http_server import serving_over_tcp
from tests.support.ports import refused_port
from tests.support.store import wait_dispatched

WAIT_S = 10.0
PATHS = {"topics": MetadataTable.TOPIC_CONFIG,
         "subscription-groups": MetadataTable.SUBSCRIPTION_GROUP,
         "consumer-offsets": MetadataTable.CONSUMER_OFFSET,
         "delay-offsets": MetadataTable.DELAY_OFFSET}


@pytest.fixture
def stores(tmp_path: Path) -> Iterator[tuple[MetadataStore, MetadataStore]]:
    master = MetadataStore(sqlite_database_url(tmp_path / "master.sqlite3"))
    slave = MetadataStore(sqlite_database_url(tmp_path / "slave.sqlite3"))
    yield master, slave
    master.stop()
    slave.stop()


def _master_api(master: MetadataStore, requests: list[str],
                failing: set[str] | None = None) -> httpx.MockTransport:
    def handle(request: httpx.Request) -> httpx.Response:
        requests.append(request.url.path)
        table = request.url.path.removeprefix("/admin/sync/")
        if failing and table in failing:
            return httpx.Response(500, json={"detail": "boom"})
        assert request.headers["authorization"] == "Bearer sync-token"
        return httpx.Response(200, content=json.dumps(master.export_table(PATHS[table])))

    return httpx.MockTransport(handle)


def _sync(slave: MetadataStore, transport: httpx.MockTransport) -> SlaveSync:
    return SlaveSync("http://master:8080/", slave, interval_s=60, timeout_s=1,
                     auth_token="sync-token", transport=transport)


def test_applies_the_four_tables_in_order(stores: tuple[MetadataStore, MetadataStore]) -> None:
    """Topics, consumer offsets, delay offsets, then groups (RocketMQ's order) are pulled and
    applied; the slave then has the master's data versions."""
    master, slave = stores
    master.create_topic(name="Orders", write_queue_count=2, read_queue_count=2)
    master.create_group(name="Billing")
    master.commit_consumer_offset(group_name="Billing", topic="Orders", queue_id=1,
                                  queue_offset=7)
    master.set_delay_offsets(offsets={3: 11})
    requests: list[str] = []
    sync = _sync(slave, _master_api(master, requests))
    try:
        assert sync.run_once() == 60
    finally:
        sync.stop()
    assert requests == ["/admin/sync/topics", "/admin/sync/consumer-offsets",
                        "/admin/sync/delay-offsets", "/admin/sync/subscription-groups"]
    assert [t.name for t in slave.list_topics()] == ["Orders"]
    assert slave.get_consumer_offset(group_name="Billing", topic="Orders", queue_id=1) == 7
    assert slave.get_delay_offset(delay_level=3) == 11
    assert [g.name for g in slave.list_groups()] == ["Billing"]
    assert slave.data_versions() == master.data_versions()
    status = sync.status()
    assert status.sync_count == 1 and status.last_error is None and status.last_success_ms


def test_failure_is_kept_and_retried_sooner(
        stores: tuple[MetadataStore, MetadataStore]) -> None:
    """A failing pull records the error and the count, and retries with a growing backoff
    bounded by the interval; a later success clears the error."""
    master, slave = stores
    requests: list[str] = []
    failing = {"consumer-offsets"}
    sync = _sync(slave, _master_api(master, requests, failing))
    try:
        assert sync.run_once() == RETRY_FIRST_S
        assert sync.run_once() == RETRY_FIRST_S * 2
        status = sync.status()
        assert status.consecutive_failures == 2 and "500" in (status.last_error or "")
        assert status.last_success_ms is None
        failing.clear()
        assert sync.run_once() == 60
        assert sync.status().last_error is None and sync.status().consecutive_failures == 0
    finally:
        sync.stop()


def test_unreachable_master(stores: tuple[MetadataStore, MetadataStore]) -> None:
    """A master that does not answer is a recorded connection error, not a crash."""
    _, slave = stores
    with refused_port() as port:
        sync = SlaveSync(f"http://127.0.0.1:{port}", slave, interval_s=5, timeout_s=0.5,
                         auth_token=None)
        try:
            assert sync.run_once() == RETRY_FIRST_S
            assert "ConnectError" in (sync.status().last_error or "")
        finally:
            sync.stop()


def test_the_four_tables_over_real_http(tmp_path: Path) -> None:
    """A slave's sync pulls all four tables from a real master broker over real HTTP (uvicorn
    on loopback, no mock transport): topics, subscription groups and consumer offsets made
    through the master's API, delay offsets set in its metadata; the slave ends with the
    master's rows and data versions."""
    app = create_app(app_settings(tmp_path / "master"))
    slave = MetadataStore(sqlite_database_url(tmp_path / "slave.sqlite3"))
    try:
        with serving_over_tcp(app) as url, httpx.Client(base_url=url, timeout=10) as client:
            master = app.state.gateway.broker.metadata_store
            assert client.post("/v1/topics", json={"name": "Orders", "write_queue_count": 2}
                               ).status_code == 201
            assert client.post("/v1/groups", json={"name": "Billing", "retry_times_max": 5}
                               ).status_code == 201
            for _ in range(7):
                assert client.post("/v1/topics/Orders/messages",
                                   json={"body": "x", "queue_id": 1}).status_code == 201
            wait_dispatched(app.state.gateway.broker.store)
            assert client.put("/v1/groups/Billing/offsets/Orders/queues/1",
                              json={"offset": 7}).status_code == 200
            master.set_delay_offsets(offsets={3: 11, 5: 2})
            sync = SlaveSync(url, slave, interval_s=60, timeout_s=10, auth_token=None)
            try:
                assert sync.run_once() == 60, sync.status().last_error
            finally:
                sync.stop()
            expected_versions = master.data_versions()
        topics = {t.name: t.write_queue_count for t in slave.list_topics()}
        assert topics["Orders"] == 2
        billing = slave.get_group(name="Billing")
        assert billing.retry_times_max == 5
        assert slave.get_consumer_offset(group_name="Billing", topic="Orders", queue_id=1) == 7
        assert {(d.delay_level, d.queue_offset) for d in slave.list_delay_offsets()} == {
            (3, 11), (5, 2)}
        assert slave.data_versions() == expected_versions
    finally:
        slave.stop()


def test_a_retired_sync_applies_nothing_it_pulls_afterwards(
        stores: tuple[MetadataStore, MetadataStore]) -> None:
    """retire() returns at once while a pull is in flight, and the table that pull brings back
    is not applied (a member that took over must not be overwritten by its old leader's data)."""
    master, slave = stores
    master.create_topic(name="Orders", write_queue_count=2, read_queue_count=2)
    in_flight, release = threading.Event(), threading.Event()
    requests: list[str] = []
    answer = _master_api(master, requests)

    def handle(request: httpx.Request) -> httpx.Response:
        in_flight.set()
        assert release.wait(WAIT_S), "the test never released the pull"
        return answer.handle_request(request)

    sync = _sync(slave, httpx.MockTransport(handle))
    sync.start()
    try:
        assert in_flight.wait(WAIT_S), "no pull started"
        sync.retire()
        release.set()
    finally:
        sync.stop()
    assert requests == ["/admin/sync/topics"]
    assert slave.find_topic(name="Orders") is None


def _in_the_log_api(master: MetadataStore, *, broker_group: str, queue_offset: int,
                    min_queue_offset: int) -> httpx.MockTransport:
    """A master that writes metadata changes as records of its log (classic mode)."""

    def handle(request: httpx.Request) -> httpx.Response:
        table = request.url.path.removeprefix("/admin/sync/")
        export = {**master.export_table(PATHS[table]), "broker_group": broker_group,
                  "log_position": {"queue_offset": queue_offset, "commit_log_offset": 4096},
                  "metadata_min_queue_offset": min_queue_offset}
        return httpx.Response(200, content=json.dumps(export))

    return httpx.MockTransport(handle)


def _log_sync(slave: MetadataStore, transport: httpx.MockTransport,
              queue_max_offset: int = 1000) -> SlaveSync:
    return SlaveSync("http://master:8080/", slave, interval_s=60, timeout_s=1,
                     auth_token="sync-token", transport=transport, broker_group="broker-a",
                     queue_max_offset=lambda topic, queue_id: queue_max_offset,
                     tables_in_the_log=True)


def _master_with_an_offset(master: MetadataStore) -> None:
    master.create_topic(name="T", read_queue_count=1, write_queue_count=1)
    master.create_group(name="g")
    master.commit_consumer_offset(group_name="g", topic="T", queue_id=0, queue_offset=40)
    master.flush_consumer_offsets()


def test_tables_the_log_carries_are_not_pulled(
        stores: tuple[MetadataStore, MetadataStore]) -> None:
    """While the master's log still holds every metadata record the slave lacks, the slave
    takes topics, groups and offsets from its log only: the pull applies none of them."""
    master, slave = stores
    _master_with_an_offset(master)
    _log_sync(slave, _in_the_log_api(master, broker_group="broker-a", queue_offset=3,
                                     min_queue_offset=0)).sync_once()
    assert slave.list_topics() == [] and slave.list_groups() == []
    assert slave.list_consumer_offsets() == []
    assert slave.log_position.queue_offset == 0


def test_a_bootstrap_clamps_offsets_to_the_slave_s_queues_and_moves_its_position(
        stores: tuple[MetadataStore, MetadataStore]) -> None:
    """When retention took records the slave lacks, it takes the tables, no offset past its
    own queue (its log may be behind the master's), and applies records from the exported
    position on."""
    master, slave = stores
    _master_with_an_offset(master)
    _log_sync(slave, _in_the_log_api(master, broker_group="broker-a", queue_offset=7,
                                     min_queue_offset=5), queue_max_offset=30).sync_once()
    assert [topic.name for topic in slave.list_topics()] == ["T"]
    assert slave.get_consumer_offset(group_name="g", topic="T", queue_id=0) == 30
    assert slave.log_position.queue_offset == 7


def test_a_master_of_another_broker_group_is_refused(
        stores: tuple[MetadataStore, MetadataStore]) -> None:
    master, slave = stores
    _master_with_an_offset(master)
    sync = _log_sync(slave, _in_the_log_api(master, broker_group="broker-b", queue_offset=7,
                                            min_queue_offset=5))
    sync.run_once()
    assert sync.foreign_master is not None and "broker-b" in sync.foreign_master
    assert "broker-a" in (sync.state.last_error or "")
    assert slave.list_topics() == [] and slave.list_consumer_offsets() == []
