"""A slave whose tables trail its log never answers 404 for a topic its log holds
(app/broker/topic_catch_up.py): with dispatch held at the topic's record, or the tables being
rebuilt after a cut, a lookup waits for them and answers the topic, or 503
METADATA_CATCHING_UP (Retry-After) when they do not catch up in time; /readyz is 503 while a
rebuild runs. Dispatch and the rebuild are held at the tables' apply (a seam), never timed."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from app.broker import topic_catch_up
from app.broker.topic_catch_up import Step, step
from store.dispatch import SystemRecord
from tests.support.app import Served, app_settings, problem, serving
from tests.support.ports import refused_port
from tests.support.store import wait_dispatched, wait_until

pytestmark = pytest.mark.anyio

HOLD_S = 10.0  # a held apply gives up past this (a test that never releases fails, not hangs)
READ = "/v1/topics/Link/queues/0/messages"


@asynccontextmanager
async def _slave(data_dir: Path) -> AsyncIterator[Served]:
    """A slave whose master never answers: bytes reach its log only from the test."""
    with refused_port() as ha_port, refused_port() as http_port:
        settings = app_settings(data_dir, broker_role="SLAVE",
                                ha_master_address=f"127.0.0.1:{ha_port}",
                                master_http_address=f"http://127.0.0.1:{http_port}",
                                ha_reconnect_interval_ms=60_000, slave_sync_interval_s=3600)
        async with serving(settings) as served:
            yield served


class HeldApply:
    """The slave's tables' apply, held at the record of `topic` (op topic.put) once
    `armed`, until `release`."""

    def __init__(self, served: Served, topic: str) -> None:
        self._metadata = served.broker.metadata_store
        self._apply: Callable[[SystemRecord], Any] = self._metadata.apply_record
        self._topic = topic.encode()
        self.armed = True
        self.entered = threading.Event()
        self.released = threading.Event()

    def __call__(self, record: SystemRecord) -> Any:
        if self.armed and self._topic in record.body:
            self.entered.set()
            assert self.released.wait(HOLD_S), "the test never released the apply"
        return self._apply(record)


@contextmanager
def _held(served: Served, monkeypatch: pytest.MonkeyPatch, topic: str) -> Iterator[HeldApply]:
    held = HeldApply(served, topic)
    monkeypatch.setattr(served.broker.metadata_store, "apply_record", held)
    try:
        yield held
    finally:
        held.released.set()


@dataclass(frozen=True)
class MasterLogs:
    """A master's log bytes: Link with a message; and Link alone then Later (`link_end`:
    where Link's record ends)."""

    with_message: bytes
    two_topics: bytes
    link_end: int


@pytest.fixture(scope="module")
async def logs(tmp_path_factory: pytest.TempPathFactory) -> MasterLogs:
    async def log_after(*requests: tuple[str, dict[str, Any]]) -> list[bytes]:
        async with serving(app_settings(tmp_path_factory.mktemp("master"))) as master:
            store = master.broker.store
            written = []
            for path, body in requests:
                response = await master.client.post(path, json=body)
                assert response.status_code in (200, 201), response.text
                wait_dispatched(store)
                written.append(store.commit_log.read_bytes(0, store.max_offset))
            return written

    [with_message] = await log_after(("/v1/topics/Link/messages", {"body": "one"}))
    link_alone, two_topics = await log_after(("/v1/topics", {"name": "Link"}),
                                             ("/v1/topics", {"name": "Later"}))
    return MasterLogs(with_message, two_topics, len(link_alone))


def _streamed(slave: Served, master_bytes: bytes) -> None:
    status = slave.broker.store.append_raw(0, master_bytes)
    assert status.name == "OK", status


def test_the_step_waits_only_while_the_tables_trail_the_end_asked_about() -> None:
    assert step(False, 100, 100, 0) is Step.CURRENT
    assert step(False, 120, 100, 500) is Step.CURRENT
    assert step(False, 99, 100, 500) is Step.WAIT_DISPATCH
    assert step(True, 100, 100, 500) is Step.WAIT_REBUILD
    assert step(True, 100, 100, 0) is Step.TIMED_OUT
    assert step(False, 99, 100, 0) is Step.TIMED_OUT


async def test_a_read_while_dispatch_holds_the_topic_s_record_waits_for_it(
        tmp_path: Path, logs: MasterLogs, monkeypatch: pytest.MonkeyPatch) -> None:
    """The slave's log holds Link's record and a message; its dispatch is held at the
    record. A read of Link waits for dispatch (no 404) and answers the message once the
    apply goes on."""
    async with _slave(tmp_path) as slave:
        store = slave.broker.store
        with _held(slave, monkeypatch, "Link") as held:
            _streamed(slave, logs.with_message)
            wait_until(held.entered.is_set)
            read = asyncio.create_task(slave.client.get(READ, params={"body_encoding": "utf8"}))
            while not len(store.dispatch.dispatched_waits):  # the read waits for dispatch
                assert not read.done(), read.result().text
                await asyncio.sleep(0.001)
            held.released.set()
            response = await read
        assert response.status_code == 200, response.text
        assert [m["body"] for m in response.json()["messages"]] == ["one"]


async def test_a_read_past_the_wait_is_503_retryable_and_404_once_caught_up(
        tmp_path: Path, logs: MasterLogs, monkeypatch: pytest.MonkeyPatch) -> None:
    """Dispatch held at Link's record past the wait: 503 METADATA_CATCHING_UP with
    Retry-After, for a read, a topic's description and a key look-up; released, the read
    answers, and a topic the log never held is 404 at once."""
    monkeypatch.setattr(topic_catch_up, "CATCH_UP_WAIT_MS", 200)
    async with _slave(tmp_path) as slave:
        with _held(slave, monkeypatch, "Link") as held:
            _streamed(slave, logs.with_message)
            wait_until(held.entered.is_set)
            for path in (READ, "/v1/topics/Link", "/v1/topics/Link/messages?key=k"):
                response = await slave.client.get(path)
                assert response.status_code == 503, (path, response.text)
                assert problem(response)["error_code"] == "METADATA_CATCHING_UP"
                assert response.headers["retry-after"] == "1"
            held.released.set()
            wait_dispatched(slave.broker.store)
        assert (await slave.client.get(READ)).status_code == 200
        unknown = await slave.client.get("/v1/topics/Never/queues/0/messages")
        assert unknown.status_code == 404, unknown.text
        assert problem(unknown)["error_code"] == "TOPIC_NOT_FOUND"


async def test_a_topic_stays_while_a_cut_rebuilds_the_tables(
        tmp_path: Path, logs: MasterLogs, monkeypatch: pytest.MonkeyPatch) -> None:
    """The slave applied Link (a topic with no message yet) and Later; a cut removes Later's
    record, so the tables are reset and refilled from the log. Held at Link's record in that
    replay, the slave is not ready and a look-up of Link is 503 (old: 404, Link gone); once
    the replay ends, Link is there and Later is not."""
    monkeypatch.setattr(topic_catch_up, "CATCH_UP_WAIT_MS", 200)
    async with _slave(tmp_path) as slave:
        store = slave.broker.store
        _streamed(slave, logs.two_topics)
        wait_dispatched(store)
        assert (await slave.client.get("/v1/topics/Later")).status_code == 200
        with _held(slave, monkeypatch, "Link") as held:
            cut = threading.Thread(target=store.truncate_log, args=(logs.link_end,))
            cut.start()
            try:
                wait_until(held.entered.is_set)
                response = await slave.client.get("/v1/topics/Link")
                assert response.status_code == 503, response.text
                assert problem(response)["error_code"] == "METADATA_CATCHING_UP"
                ready = await slave.client.get("/readyz")
                assert ready.status_code == 503, ready.text
                assert "rebuilt" in ready.json()["detail"]
            finally:
                held.released.set()
                cut.join(HOLD_S)
        assert store.system_feed.rebuild_count == 1
        assert (await slave.client.get("/v1/topics/Link")).status_code == 200
        assert (await slave.client.get("/v1/topics/Later")).status_code == 404
        assert (await slave.client.get("/readyz")).status_code == 200
