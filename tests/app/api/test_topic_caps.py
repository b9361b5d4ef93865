"""Caps on topics and queues per topic: past them, a 4xx naming the setting, nothing created."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from app.api.schemas.topics import TOPICS_PER_BATCH_MAX
from app.settings import SettingsError
from store.consumption.names import retry_topic
from tests.support.app import Served, ServeFactory, app_settings, problem, serving

pytestmark = pytest.mark.anyio

TOPIC_COUNT = 10_000
OPEN_FILES_MAX = 64
# Beyond the consume-queue bound: commit-log files, the metadata database, the syncfs
# directory, the event loop and the threads' own. Fixed, whatever the topic count.
OTHER_DESCRIPTORS_MAX = 64
CONCURRENT_REQUESTS = 32
# Consume-queue files are allocated whole: 10,000 of the default 6 MB would reserve 60 GB.
ENTRIES_PER_FILE = 1024


def _queue_directory_exists(served: Served, topic: str) -> bool:
    return (served.broker.store.paths.root / "consumequeue" / topic).exists()


async def _assert_not_created(served: Served, topic: str) -> None:
    described = await served.client.get(f"/v1/topics/{topic}")
    assert described.status_code == 404, described.text
    assert served.broker.metadata_store.find_topic(name=topic) is None
    assert not _queue_directory_exists(served, topic)


async def test_topics_max_refuses_auto_creation_and_creation(serve: ServeFactory) -> None:
    """With topics_max topics held, a produce to a new topic and POST /v1/topics both answer
    409 TOPICS_MAX_REACHED naming the setting; no row and no file is created, and existing
    topics still take messages."""
    async with serve(topics_max=2) as served:
        for topic in ("First", "Second"):
            created = await served.client.post(f"/v1/topics/{topic}/messages",
                                               json={"body": topic})
            assert created.status_code == 201, created.text
        refused = await served.client.post("/v1/topics/Third/messages", json={"body": "x"})
        document = problem(refused)
        assert refused.status_code == 409
        assert document["error_code"] == "TOPICS_MAX_REACHED"
        assert document["setting"] == "topics_max" and "topics_max" in document["detail"]
        assert document["put_status"] == "MESSAGE_ILLEGAL"
        explicit = await served.client.post("/v1/topics", json={"name": "Third"})
        assert explicit.status_code == 409
        assert problem(explicit)["setting"] == "topics_max"
        await _assert_not_created(served, "Third")
        again = await served.client.post("/v1/topics/First/messages", json={"body": "more"})
        assert again.status_code == 201, again.text


async def test_queues_per_topic_max_refuses_wider_topics(serve: ServeFactory) -> None:
    """A topic asking for more queues than queues_per_topic_max is refused with 400 naming
    the setting and not created; an update past it is refused too."""
    async with serve(queues_per_topic_max=8) as served:
        refused = await served.client.post(
            "/v1/topics", json={"name": "Wide", "read_queue_count": 9, "write_queue_count": 9})
        document = problem(refused)
        assert refused.status_code == 400
        assert document["error_code"] == "QUEUES_PER_TOPIC_MAX_EXCEEDED"
        assert document["setting"] == "queues_per_topic_max"
        await _assert_not_created(served, "Wide")
        fits = await served.client.post(
            "/v1/topics", json={"name": "Fits", "read_queue_count": 8, "write_queue_count": 8})
        assert fits.status_code == 201, fits.text


def test_default_queue_count_must_fit_the_cap(tmp_path: Path) -> None:
    """Auto-created topics get default_queue_count queues, so it may not pass the cap."""
    with pytest.raises(SettingsError, match="default_queue_count"):
        app_settings(tmp_path, queues_per_topic_max=4, default_queue_count=8)


async def _create_topics(served: Served, count: int) -> None:
    """`count` topics through POST /v1/topics:batch, TOPICS_PER_BATCH_MAX at a time."""
    for first in range(0, count, TOPICS_PER_BATCH_MAX):
        names = [f"T{index:05d}" for index in range(first, min(first + TOPICS_PER_BATCH_MAX,
                                                                   count))]
        response = await served.client.post("/v1/topics:batch",
                                             json={"topics": [{"name": name} for name in names]})
        assert response.status_code == 201, response.text


async def _produce_to_each(served: Served, count: int) -> None:
    """One message to each topic, a few requests at a time."""
    limit = asyncio.Semaphore(CONCURRENT_REQUESTS)

    async def produce(index: int) -> None:
        async with limit:
            response = await served.client.post(f"/v1/topics/T{index:05d}/messages",
                                                json={"body": f"m{index}", "queue_id": 0})
            assert response.status_code == 201, response.text

    await asyncio.gather(*(produce(index) for index in range(count)))


@pytest.mark.slow
@pytest.mark.wide
async def test_ten_thousand_topics_keep_open_files_bounded(serve: ServeFactory) -> None:
    """10,000 topics created through the API, each with a consumable message, keep the
    process's open descriptors under a fixed bound (printed), and the 10,001st topic beyond
    topics_max answers 409, created or auto-created."""
    async with serve(topics_max=TOPIC_COUNT, consume_queue_open_files_max=OPEN_FILES_MAX,
                     consume_queue_entries_per_file=ENTRIES_PER_FILE,
                     database_url="sqlite://") as served:
        started = time.monotonic()
        await _create_topics(served, TOPIC_COUNT)
        created_s = time.monotonic() - started
        await _produce_to_each(served, TOPIC_COUNT)
        store = served.broker.store
        deadline = time.monotonic() + 30
        while store.dispatch.dispatched_offset < store.max_offset:
            assert time.monotonic() < deadline, "dispatch did not catch up"
            await asyncio.sleep(0.01)
        descriptors = len(os.listdir("/proc/self/fd"))
        print(f"\n{TOPIC_COUNT} topics created in {created_s:.1f} s, one message each by "
              f"{time.monotonic() - started:.1f} s: {descriptors} open descriptors (bound "
              f"{2 * OPEN_FILES_MAX + OTHER_DESCRIPTORS_MAX}), "
              f"{store.queues.open_files.open_file_count} consume-queue files mapped")
        assert descriptors <= 2 * OPEN_FILES_MAX + OTHER_DESCRIPTORS_MAX
        for beyond in (await served.client.post("/v1/topics", json={"name": "T10000"}),
                       await served.client.post("/v1/topics/T10000/messages",
                                                json={"body": "x"})):
            assert beyond.status_code == 409 and problem(beyond)["setting"] == "topics_max"
        await _assert_not_created(served, "T10000")
        for index in (0, 4_999, 9_999):
            read = await served.client.get(f"/v1/topics/T{index:05d}/queues/0/messages",
                                           params={"offset": 0, "max_messages": 1,
                                                   "body_encoding": "utf8"})
            assert read.status_code == 200, read.text
            assert read.json()["messages"][0]["body"] == f"m{index}"


async def test_a_groups_retry_queue_count_is_held_to_the_cap(tmp_path: Path) -> None:
    """A group's retry topics get retry_queue_count queues: past queues_per_topic_max the
    group is refused (400 naming the setting) on create and update, as a topic would be, so
    that no receive is later refused for the group's setting. A group stored under a wider
    cap still receives after the cap is lowered: its retry topic takes the cap's queues."""
    async with serving(app_settings(tmp_path, queues_per_topic_max=8)) as served:
        client = served.client
        refused = await client.post("/v1/groups", json={"name": "wide", "retry_queue_count": 9})
        assert refused.status_code == 400, refused.text
        assert problem(refused)["error_code"] == "QUEUES_PER_TOPIC_MAX_EXCEEDED"
        assert problem(refused)["setting"] == "queues_per_topic_max"
        assert (await client.get("/v1/groups/wide")).status_code == 404
        created = await client.post("/v1/groups", json={"name": "g", "retry_queue_count": 8})
        assert created.status_code == 201, created.text
        widened = await client.patch("/v1/groups/g", json={"retry_queue_count": 9})
        assert widened.status_code == 400, widened.text
        assert problem(widened)["error_code"] == "QUEUES_PER_TOPIC_MAX_EXCEEDED"
        assert (await client.get("/v1/groups/g")).json()["retry_queue_count"] == 8
        put = await client.post("/v1/topics/T/messages", json={"body": "x"})
        assert put.status_code == 201, put.text
    async with serving(app_settings(tmp_path, queues_per_topic_max=4,
                                    default_queue_count=4)) as served:
        received = await served.client.post("/v1/groups/g/topics/T/messages:receive",
                                            json={"invisible_ms": 10_000, "body_encoding": "utf8"})
        assert received.status_code == 200, received.text
        assert [message["body"] for message in received.json()["messages"]] == ["x"]
        handle = received.json()["messages"][0]["receipt_handle"]
        released = await served.client.post(
            "/v1/groups/g/topics/T/messages:change-invisibility",
            json={"receipt_handle": handle, "invisible_ms": 0})
        assert released.status_code == 200, released.text
        retry = served.broker.metadata_store.find_topic(name=retry_topic("g", "T"))
        assert retry is not None and retry.read_queue_count == 4
