"""Topic, group and offset changes as the routes make them: records of the log
(app/broker/metadata_log.py), answered 201/200/204 once held as the broker's role promises (in
DLedger mode: committed) and applied here, 202 (problem+json naming the put status) when
applied here but not held as promised, or (DLedger) not known committed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict

from app.api.errors import from_put_status
from app.broker.broker import Broker
from app.broker.metadata_log import WriteOutcome
from store import PutMessageStatus
from store.metadata import SubscriptionGroup, TopicConfig
from store.metadata.log_records import MetadataChange, TopicsPut, encode
from store.metadata.topics import NewTopic

# A topic's share of a TopicsPut record at most (a 127-byte name and the JSON around it).
_TOPIC_RECORD_BYTES_MAX = 300


def _write(broker: Broker, changes: Sequence[MetadataChange]) -> None:
    """On a worker thread: MetadataWriteFailed (a refusal, answered as its put
    status) when nothing was written, a 202 ApiError when applied here but not held."""
    _answer(broker.metadata_log.write_blocking(changes))


async def write(broker: Broker, changes: Sequence[MetadataChange]) -> None:
    """`_write` on the event loop."""
    _answer(await broker.metadata_log.write(changes))


def _answer(outcome: WriteOutcome) -> None:
    if outcome.status is not PutMessageStatus.PUT_OK:
        raise from_put_status(outcome.status, outcome.detail)


def create_topics(broker: Broker, new_topics: Sequence[NewTopic]) -> list[TopicConfig]:
    metadata = broker.metadata_store
    with broker.metadata_log.change_lock:
        plan = metadata.plan_create_topics(new_topics)
        if len(plan) == 1:
            _write(broker, plan)
        elif broker.dledger is not None:
            _write(broker, [_one_record(broker, TopicsPut(tuple(plan)))])
        else:
            # Records under the message size bound, appended together under one lock hold.
            per_record = max(1, (broker.settings.message_size_max_bytes - 1024)
                             // _TOPIC_RECORD_BYTES_MAX)
            _write(broker, [TopicsPut(tuple(plan[first:first + per_record]))
                            for first in range(0, len(plan), per_record)])
    # Applied exactly as planned (the records carry whole rows): no query for them.
    return [TopicConfig(**asdict(change)) for change in plan]


def _one_record(broker: Broker, batch: TopicsPut) -> TopicsPut:
    """DLedger mode: a batch is one record, so one log entry, which commits whole or not at
    all (records of their own could commit in part across a leader change). One that does
    not fit a record is refused, nothing written."""
    size_bytes = len(encode(batch))
    size_max_bytes = broker.settings.message_size_max_bytes
    if size_bytes > size_max_bytes:
        fitting = max(1, len(batch.topics) * size_max_bytes // size_bytes)
        raise from_put_status(PutMessageStatus.MESSAGE_ILLEGAL, (
            f"these {len(batch.topics)} topics make a record of {size_bytes} bytes, past "
            f"message_size_max_bytes ({size_max_bytes}): in DLedger mode a batch is created "
            f"as one log entry, all or nothing; send at most about {fitting} per batch"))
    return batch


def update_topic(broker: Broker, name: str, *, read_queue_count: int | None,
                 write_queue_count: int | None, permission: int | None) -> TopicConfig:
    metadata = broker.metadata_store
    with broker.metadata_log.change_lock:
        change = metadata.plan_update_topic(name=name, read_queue_count=read_queue_count,
                                            write_queue_count=write_queue_count,
                                            permission=permission)
        if change is not None:
            _write(broker, [change])
    return metadata.get_topic(name=name)


def delete_topic(broker: Broker, name: str) -> None:
    """Its config and offsets, its queues and key-index entries (at the record, on every
    replica); its messages stay in the commit log until retention."""
    with broker.metadata_log.change_lock:
        _write(broker, [broker.metadata_store.plan_delete_topic(name=name)])


def create_group(broker: Broker, name: str, *, consume_enabled: bool, broadcast_enabled: bool,
                 retry_queue_count: int, retry_times_max: int,
                 backoff: str = "", fifo: bool = False) -> SubscriptionGroup:
    metadata = broker.metadata_store
    with broker.metadata_log.change_lock:
        _write(broker, [metadata.plan_create_group(
            name=name, consume_enabled=consume_enabled, broadcast_enabled=broadcast_enabled,
            retry_queue_count=retry_queue_count, retry_times_max=retry_times_max,
            backoff=backoff, fifo=fifo)])
    return metadata.get_group(name=name)


def update_group(broker: Broker, name: str, *, consume_enabled: bool | None,
                 broadcast_enabled: bool | None, retry_queue_count: int | None,
                 retry_times_max: int | None, backoff: str | None,
                 fifo: bool | None = None) -> SubscriptionGroup:
    """The given fields changed (None keeps one; a backoff of "": the broker's default),
    through a group.put record every replica applies."""
    metadata = broker.metadata_store
    with broker.metadata_log.change_lock:
        change = metadata.plan_update_group(
            name=name, consume_enabled=consume_enabled, broadcast_enabled=broadcast_enabled,
            retry_queue_count=retry_queue_count, retry_times_max=retry_times_max,
            backoff=backoff, fifo=fifo)
        if change is not None:
            _write(broker, [change])
    return metadata.get_group(name=name)


def delete_group(broker: Broker, name: str) -> None:
    metadata = broker.metadata_store
    with broker.metadata_log.change_lock:
        change = metadata.plan_delete_group(name=name)
        with broker.consumption.closing(name):  # no receive's record follows the delete
            _write(broker, [change])


def set_offset(broker: Broker, group: str, topic: str, queue_id: int, queue_offset: int, *,
               reset: bool) -> None:
    """A commit (forward only) or a reset of one queue's offset."""
    metadata = broker.metadata_store
    change = metadata.plan_offset(group_name=group, topic=topic, queue_id=queue_id,
                                  queue_offset=queue_offset, reset=reset)
    if change is not None:
        _write(broker, [change])
