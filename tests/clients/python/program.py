"""A small program on the Python client that openapi-python-client generates from
openapi/openapi.json with openapi/python-client.yaml (docs/clients.md shows the command). It
produces a JSON message, a raw one with properties and a batch, consumes them, commits an
offset, reads the group's lag and looks a message up by key, then prints what it saw as one
JSON object.

    python program.py BASE_URL TOKEN TOPIC     (the generated `twinlog_client` importable)

tests/e2e/test_generated_clients.py runs it against a live broker, as it runs the TypeScript
program beside it (tests/clients/ts/program.ts), and checks both print the same.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from twinlog_client import AuthenticatedClient
from twinlog_client.api.consume import consume_messages, find_messages_by_key
from twinlog_client.api.groups import commit_consumer_offset, create_group, get_consumer_lag
from twinlog_client.api.produce import produce_batch, produce_message
from twinlog_client.api.topics import create_topic
from twinlog_client.models import (
    BatchResult,
    ConsumeResult,
    ConsumerOffsetView,
    Group,
    GroupCreate,
    KeyLookupResult,
    LagReport,
    OffsetCommit,
    ProduceBatch,
    ProduceBatchEntry,
    ProduceMessage,
    PutResult,
    Topic,
    TopicCreate,
)
from twinlog_client.types import File

GROUP = "billing"
PUTS = 4
# Messages are readable once dispatched to their queue, a moment after the put: the reads
# long-poll (wait_ms) until all are there, a bounded number of times.
READS_MAX = 20


def expect(answer: Any, kind: type) -> Any:
    """The parsed answer when it is the expected model; a problem otherwise ends the run."""
    if not isinstance(answer, kind):
        raise SystemExit(f"expected {kind.__name__}, got {answer!r}")
    return answer


def consume(client: AuthenticatedClient, topic: str, count: int) -> list[Any]:
    messages: list[Any] = []
    for _ in range(READS_MAX):
        read = expect(consume_messages.sync(topic, 0, client=client, offset=len(messages),
                                            body_encoding="utf8", wait_ms=500), ConsumeResult)
        messages += read.messages
        if len(messages) >= count:
            return messages
    raise SystemExit(f"read {len(messages)} of {count} messages")


def main(base_url: str, token: str, topic: str) -> dict[str, Any]:
    client = AuthenticatedClient(base_url=base_url, token=token)
    expect(create_topic.sync(client=client, body=TopicCreate(
        name=topic, read_queue_count=1, write_queue_count=1)), Topic)
    json_put = expect(produce_message.sync(topic, client=client, body=ProduceMessage(
        body="order 1 paid", keys=["order-1"])), PutResult)
    raw_put = expect(produce_message.sync(
        topic, client=client, body=File(payload=b"\xff\x00raw"), x_twinlog_keys="order-2",
        x_twinlog_properties=json.dumps({"region": "eu"})), PutResult)
    batch = expect(produce_batch.sync(topic, client=client, body=ProduceBatch(messages=[
        ProduceBatchEntry(body="b3JkZXIgMyBwYWlk", body_encoding="base64", keys=["order-3"]),
        ProduceBatchEntry(body="order 4 paid")])), BatchResult)
    messages = consume(client, topic, PUTS)
    expect(create_group.sync(client=client, body=GroupCreate(name=GROUP)), Group)
    committed = expect(commit_consumer_offset.sync(
        GROUP, topic, 0, client=client, body=OffsetCommit(offset=2)), ConsumerOffsetView)
    lag = expect(get_consumer_lag.sync(GROUP, client=client, topic=topic), LagReport)
    found = expect(find_messages_by_key.sync(topic, client=client, key="order-3",
                                             body_encoding="utf8"), KeyLookupResult)
    return {
        "puts": [put.status for put in (json_put, raw_put, *batch.results)],
        "offsets": [put.queue_offset for put in (json_put, raw_put, *batch.results)],
        "messages": [{"body": message.body, "body_encoding": message.body_encoding,
                      "keys": message.keys, "properties": message.properties.to_dict()}
                     for message in messages],
        "committed": committed.offset,
        "lag": lag.total_lag,
        "found": [message.body for message in found.messages],
        "msg_id": json_put.msg_id,
    }


if __name__ == "__main__":
    print(json.dumps(main(*sys.argv[1:4])))
