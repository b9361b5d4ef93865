"""SQLModel tables for the broker's metadata, and the plain values the repository returns.

Each table has a base class with its fields, a `...Row` class that is the SQLModel table (used
only inside this package) and a public class with the same fields. Repository functions return
the public class: a detached copy, so a caller can never change the database by mutating it.
Times are integer milliseconds since the epoch, as in RocketMQ, so they compare the same way on
SQLite and PostgreSQL.
"""

from __future__ import annotations

import enum

from sqlalchemy import BigInteger, Boolean, CheckConstraint, Integer, String, false
from sqlmodel import Field, SQLModel

from store.consumption.policy import BACKOFF_TEXT_LENGTH_MAX
from store.topic import TOPIC_LENGTH_MAX

# Stable constraint names on every database, so that a later migration can drop or alter a
# constraint by name (Alembic's advice); the check constraints below name their own suffix.
SQLModel.metadata.naming_convention = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

_GROUP_NAME_COLUMN_LENGTH = 255
_TABLE_NAME_COLUMN_LENGTH = 64
_BACKOFF_COLUMN_LENGTH = BACKOFF_TEXT_LENGTH_MAX


class TopicPermission(enum.IntFlag):
    """Topic permission bits with RocketMQ's PermName values, so that 6 means read + write."""

    WRITE = 2
    READ = 4


READ_WRITE = TopicPermission.READ | TopicPermission.WRITE


# ---- topic config ----------------------------------------------------------------------------


class TopicConfigBase(SQLModel):
    name: str = Field(primary_key=True, sa_type=String(TOPIC_LENGTH_MAX))
    read_queue_count: int = Field(sa_type=Integer)
    write_queue_count: int = Field(sa_type=Integer)
    permission: int = Field(sa_type=Integer)
    created_at_ms: int = Field(sa_type=BigInteger)
    updated_at_ms: int = Field(sa_type=BigInteger)


class TopicConfigRow(TopicConfigBase, table=True):
    __tablename__ = "topic_config"
    __table_args__ = (
        CheckConstraint("read_queue_count >= 1", name="read_queue_count_positive"),
        CheckConstraint("write_queue_count >= 1", name="write_queue_count_positive"),
    )


class TopicConfig(TopicConfigBase):
    """A topic's configuration."""

    @property
    def readable(self) -> bool:
        return bool(self.permission & TopicPermission.READ)

    @property
    def writable(self) -> bool:
        return bool(self.permission & TopicPermission.WRITE)


# ---- subscription group config -----------------------------------------------------------------


class SubscriptionGroupBase(SQLModel):
    name: str = Field(primary_key=True, sa_type=String(_GROUP_NAME_COLUMN_LENGTH))
    consume_enabled: bool = Field(sa_type=Boolean)
    broadcast_enabled: bool = Field(sa_type=Boolean)
    retry_queue_count: int = Field(sa_type=Integer)
    retry_times_max: int = Field(sa_type=Integer)
    created_at_ms: int = Field(sa_type=BigInteger)
    updated_at_ms: int = Field(sa_type=BigInteger)
    # store/consumption/policy.py `Backoff.text`; "" for the broker's default (pop_backoff).
    backoff: str = Field(default="", sa_type=String(_BACKOFF_COLUMN_LENGTH),
                         sa_column_kwargs={"server_default": ""})
    # A FIFO group: each of a topic's queues is delivered in order, one message at a time,
    # messages without a message group key too (docs/group-consumption.md).
    fifo: bool = Field(default=False, sa_type=Boolean,
                       sa_column_kwargs={"server_default": false()})


class SubscriptionGroupRow(SubscriptionGroupBase, table=True):
    __tablename__ = "subscription_group"
    __table_args__ = (
        CheckConstraint("retry_queue_count >= 0", name="retry_queue_count_not_negative"),
        CheckConstraint("retry_times_max >= 0", name="retry_times_max_not_negative"),
    )


class SubscriptionGroup(SubscriptionGroupBase):
    """A subscription (consumer) group's configuration."""


# ---- consumer offsets --------------------------------------------------------------------------
# No foreign keys to topics or groups: a slave applies the four tables in RocketMQ's order
# (topics, offsets, delay offsets, groups), so offsets may arrive before their group does.


class ConsumerOffsetBase(SQLModel):
    group_name: str = Field(primary_key=True, sa_type=String(_GROUP_NAME_COLUMN_LENGTH))
    topic: str = Field(primary_key=True, sa_type=String(TOPIC_LENGTH_MAX))
    queue_id: int = Field(primary_key=True, sa_type=Integer)
    # An offset in the consume queue (a message count), not a commit-log byte position.
    queue_offset: int = Field(sa_type=BigInteger)
    updated_at_ms: int = Field(sa_type=BigInteger)


class ConsumerOffsetRow(ConsumerOffsetBase, table=True):
    __tablename__ = "consumer_offset"
    __table_args__ = (
        CheckConstraint("queue_offset >= 0", name="queue_offset_not_negative"),
        CheckConstraint("queue_id >= 0", name="queue_id_not_negative"),
    )


class ConsumerOffset(ConsumerOffsetBase):
    """The next queue offset a group will consume from one queue of a topic."""


# ---- delay offsets -----------------------------------------------------------------------------


class DelayOffsetBase(SQLModel):
    # An explicit key, never a generated one: PostgreSQL would otherwise make it a SERIAL.
    delay_level: int = Field(
        primary_key=True, sa_type=Integer, sa_column_kwargs={"autoincrement": False}
    )
    queue_offset: int = Field(sa_type=BigInteger)
    updated_at_ms: int = Field(sa_type=BigInteger)


class DelayOffsetRow(DelayOffsetBase, table=True):
    __tablename__ = "delay_offset"
    __table_args__ = (
        CheckConstraint("delay_level >= 1 AND delay_level <= 18", name="delay_level_range"),
        CheckConstraint("queue_offset >= 0", name="queue_offset_not_negative"),
    )


class DelayOffset(DelayOffsetBase):
    """How far the schedule service has delivered the delay queue of one delay level."""


# ---- data versions -----------------------------------------------------------------------------


class DataVersionBase(SQLModel):
    counter: int = Field(sa_type=BigInteger)
    timestamp_ms: int = Field(sa_type=BigInteger)


class DataVersionRow(DataVersionBase, table=True):
    """One row per metadata table, seeded by the initial migration."""

    __tablename__ = "data_version"
    table_name: str = Field(primary_key=True, sa_type=String(_TABLE_NAME_COLUMN_LENGTH))


class DataVersion(DataVersionBase):
    """RocketMQ's DataVersion: a copy is stale when its version differs from the master's."""


# ---- where the tables stand in the log ---------------------------------------------------------


class LogPositionBase(SQLModel):
    # The next queue offset of the metadata topic to apply (store/system_topics.py): every
    # metadata record below it is in these tables. The topic and group tables may be ahead of
    # it (they are written as each record applies), never behind.
    queue_offset: int = Field(sa_type=BigInteger)
    # The commit-log offset just past the last record applied (0: none).
    commit_log_offset: int = Field(sa_type=BigInteger)
    updated_at_ms: int = Field(sa_type=BigInteger)
    # The last whole metadata snapshot among the records applied: its part 0's queue and
    # commit-log offsets and its part count (store/system_topics.py's SnapshotAt). A start
    # finds it here rather than read the log back from its end (store/system_feed.py); None
    # when none was applied since the tables were reset or bootstrapped, or not known.
    snapshot_queue_offset: int | None = Field(default=None, sa_type=BigInteger, nullable=True)
    snapshot_commit_log_offset: int | None = Field(default=None, sa_type=BigInteger,
                                                   nullable=True)
    snapshot_parts: int | None = Field(default=None, sa_type=Integer, nullable=True)


class LogPositionRow(LogPositionBase, table=True):
    """One row per stream of records the tables follow (today one: "metadata")."""

    __tablename__ = "log_position"
    name: str = Field(primary_key=True, sa_type=String(_TABLE_NAME_COLUMN_LENGTH))


class LogPosition(LogPositionBase):
    """How far into the log the metadata tables are applied."""
