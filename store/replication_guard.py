"""What SYNC_MASTER puts need from replication: the store's side of the plug ha/ fills.
"""

from __future__ import annotations

from typing import Protocol

from store.waits.completion import PutCompletion


class ReplicationGuard(Protocol):
    """What SYNC_MASTER puts need from replication (implemented in ha/, which decides)."""

    def replication_completion(self, end_offset: int) -> PutCompletion:
        """What a put of bytes ending at `end_offset` awaits: decided at once
        (SLAVE_NOT_AVAILABLE: not enough slaves in sync), or pending until the slaves hold it
        (PUT_OK) or its deadline passes (FLUSH_SLAVE_TIMEOUT)."""
        ...

    def replicated_offset(self) -> int:
        """The offset the needed number of slaves have acknowledged (-1: not enough)."""
        ...

    @property
    def pending_count(self) -> int: ...
