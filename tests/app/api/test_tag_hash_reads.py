"""Tag filters through the app read the consume queue's tags code first: a receive with a tag
expression and the per-queue consume with `tags` read no commit-log record of another tag
(counted through a seam: the store's `commit_log.read_records`, wrapped), and a message whose
tag shares the wanted tag's code is read and then left out by its own tag."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.app.api.test_receive import _consumption, _receive, _settings, _setup
from tests.support.app import Served, serving
from tests.support.store import wait_dispatched

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
async def served(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Served]:
    async with serving(_settings(tmp_path_factory.mktemp("tags"))) as running:
        yield running


def _count_record_reads(served: Served) -> list[int]:
    log = served.broker.store.commit_log
    asked: list[int] = []
    read_records = log.read_records

    def counted(offsets: list[int]) -> Any:
        asked.extend(offsets)
        return read_records(offsets)

    log.read_records = counted  # type: ignore[method-assign]
    return asked


async def test_a_receive_for_a_tag_reads_no_record_of_other_tags(served: Served) -> None:
    group, topic = await _setup(served, queues=1, messages=[
        {"body": f"b{number}", "tags": "B"} for number in range(40)])
    asked = _count_record_reads(served)
    try:
        assert await _receive(served, group, topic, tags="A", max_messages=32) == []
        assert asked == []
        _setup_more = await served.client.post(f"/v1/topics/{topic}/messages",
                                               json={"body": "a0", "tags": "A"})
        assert _setup_more.status_code == 201
        wait_dispatched(served.broker.store)
        del asked[:]
        [message] = await _receive(served, group, topic, tags="A", max_messages=32)
        assert message["body"] == "a0" and len(asked) == 1
    finally:
        del served.broker.store.commit_log.read_records
    [counts] = await _consumption(served, group)
    assert counts["in_flight"] == 1 and counts["ready"] == 0  # the 40 B are consumed


async def test_a_tags_consume_reads_no_record_of_other_tags(served: Served) -> None:
    _, topic = await _setup(served, queues=1, messages=[
        {"body": f"b{number}", "tags": "B"} for number in range(30)] + [
        {"body": "a0", "tags": "A"}])
    asked = _count_record_reads(served)
    try:
        response = await served.client.get(f"/v1/topics/{topic}/queues/0/messages", params={
            "offset": 0, "max_messages": 100, "tags": "A", "body_encoding": "utf8"})
    finally:
        del served.broker.store.commit_log.read_records
    assert response.status_code == 200, response.text
    assert [item["body"] for item in response.json()["messages"]] == ["a0"]
    assert response.json()["next_offset"] == 31
    assert len(asked) == 1


async def test_a_tag_of_the_same_code_is_confirmed_by_the_record_tag(served: Served) -> None:
    """"Aa" and "BB" share Java's hashCode: both are read, only "Aa" is kept."""
    group, topic = await _setup(served, queues=1, messages=[
        {"body": "bb", "tags": "BB"}, {"body": "aa", "tags": "Aa"}, {"body": "bb2", "tags": "BB"}])
    received = await _receive(served, group, topic, tags="Aa", max_messages=10)
    assert [item["body"] for item in received] == ["aa"]
    response = await served.client.get(f"/v1/topics/{topic}/queues/0/messages", params={
        "offset": 0, "tags": "Aa", "body_encoding": "utf8"})
    assert [item["body"] for item in response.json()["messages"]] == ["aa"]
    assert response.json()["next_offset"] == 3
