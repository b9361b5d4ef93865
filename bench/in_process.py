"""The ceiling of batch produce: the same batches put in-process, no HTTP, no JSON.

A MessageStore configured as `twinlog serve` configures it (ASYNC_MASTER, ASYNC_FLUSH, 1 GiB
files), fed batches of `batch_messages` new Message objects with MessageStore.put_messages for
`duration_s`; the HTTP batch figure is compared with this one in the same run.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from app.settings import load_settings
from store import Message, MessageStore


def in_process_batch(data_dir: Path, body: bytes, batch_messages: int,
                     duration_s: float) -> float:
    """Messages per second put in batches by one thread."""
    settings = load_settings(data_dir=data_dir, mapped_file_size_bytes=1 << 30,
                             ha_allow_unauthenticated=True, ha_listen_port=0)
    store = MessageStore(settings.to_store_config())
    store.start()
    try:
        stored = 0
        started_s = time.perf_counter()
        stop_at_s = started_s + duration_s
        while time.perf_counter() < stop_at_s:
            batch = [Message("Bench", body, {}) for _ in range(batch_messages)]
            results = store.put_messages(batch)
            stored += sum(1 for result, _ in results if result.status.name == "PUT_OK")
        return stored / (time.perf_counter() - started_s)
    finally:
        store.shutdown()
        shutil.rmtree(data_dir, ignore_errors=True)
