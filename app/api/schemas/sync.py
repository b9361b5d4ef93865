"""The API's model of a metadata sync's status (shared by the classic and DLedger views)."""

from __future__ import annotations

from pydantic import BaseModel


# The docstring is the spec's description, which stays byte for byte what clients were
# generated from: it names the module's path before app/ was split into rooms (the sync is
# app/broker/slave_sync.py now).
class MetadataSyncStatus(BaseModel):
    """A metadata sync (a classic slave's from its master, a DLedger follower's from the
    leader): app/slave_sync.py."""

    master_http_address: str
    interval_s: float
    last_attempt_ms: int | None
    last_success_ms: int | None
    last_error: str | None
    consecutive_failures: int
    sync_count: int
    tables_applied: dict[str, int]
