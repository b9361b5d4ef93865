"""Filling an in-process broker's log (tests/support/app.py's `serving`) past a point, so
retention has files to remove."""

from __future__ import annotations

from tests.support.app import Served
from tests.support.store import wait_dispatched

FILL_BODY = "x" * 6000


async def fill_past(served: Served, until_offset: int, file_size_bytes: int) -> None:
    """Messages to topic Fill until the log passes `until_offset` and has just begun a new
    file (the records after it share that file), all dispatched."""
    store = served.broker.store
    while store.max_offset < until_offset or store.max_offset % file_size_bytes > 8000:
        response = await served.client.post("/v1/topics/Fill/messages",
                                            json={"body": FILL_BODY})
        assert response.status_code == 201, response.text
    wait_dispatched(store)
