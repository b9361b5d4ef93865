"""Subscription groups: create, update, delete and read them (MetadataStore's group part)."""

from __future__ import annotations

from store.metadata import groups, plans
from store.metadata.errors import GroupNotFound
from store.metadata.models import (
    SubscriptionGroup,
)
from store.metadata.rules import (
    check_group_name,
)
from store.metadata.store_base import MetadataStoreBase


class GroupsMixin(MetadataStoreBase):
    """Subscription groups: create, update, delete and read them (MetadataStore's group part)."""

    def create_group(
        self,
        *,
        name: str,
        consume_enabled: bool = True,
        broadcast_enabled: bool = False,
        retry_queue_count: int = groups.DEFAULT_RETRY_QUEUE_COUNT,
        retry_times_max: int = groups.DEFAULT_RETRY_TIMES_MAX,
        backoff: str = "",
        fifo: bool = False,
    ) -> SubscriptionGroup:
        self._check_open()
        with self._write_lock:
            plans.check_groups_max(self._engine, name, self._groups_max)
            created = groups.create_group(
                engine=self._engine,
                name=name,
                now_ms=self._clock_ms(),
                consume_enabled=consume_enabled,
                broadcast_enabled=broadcast_enabled,
                retry_queue_count=retry_queue_count,
                retry_times_max=retry_times_max,
                backoff=backoff,
                fifo=fifo,
            )
            self._view.put_group(created)
            return created.model_copy()

    def update_group(
        self,
        *,
        name: str,
        consume_enabled: bool | None = None,
        broadcast_enabled: bool | None = None,
        retry_queue_count: int | None = None,
        retry_times_max: int | None = None,
        backoff: str | None = None,
        fifo: bool | None = None,
    ) -> SubscriptionGroup:
        self._check_open()
        with self._write_lock:
            updated = groups.update_group(
                engine=self._engine,
                name=name,
                now_ms=self._clock_ms(),
                consume_enabled=consume_enabled,
                broadcast_enabled=broadcast_enabled,
                retry_queue_count=retry_queue_count,
                retry_times_max=retry_times_max,
                backoff=backoff,
                fifo=fifo,
            )
            self._view.put_group(updated)
            return updated.model_copy()

    def delete_group(self, *, name: str) -> None:
        """Delete a group and its consumer offsets (stored and pending)."""
        self._check_open()
        with self._write_lock:
            groups.delete_group(engine=self._engine, name=name, now_ms=self._clock_ms())
            self._view.drop_group(name)
            self._offsets.forget(group_name=name)

    def find_group(self, *, name: str) -> SubscriptionGroup | None:
        self._check_open()
        check_group_name(name)
        group = self._view.group(name)
        return None if group is None else group.model_copy()

    def get_group(self, *, name: str) -> SubscriptionGroup:
        group = self.find_group(name=name)
        if group is None:
            raise GroupNotFound(f"group {name!r} does not exist")
        return group

    def list_groups(self) -> list[SubscriptionGroup]:
        self._check_open()
        return [group.model_copy() for group in self._view.groups()]
