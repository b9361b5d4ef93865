from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from store import MessageStore
from tests.support.store import small_config


@pytest.fixture
def open_store(tmp_path: Path) -> Iterator[Callable[..., MessageStore]]:
    """Start stores on tmp_path; whatever is still running at the end is shut down."""
    opened: list[MessageStore] = []

    def start(**overrides: Any) -> MessageStore:
        store = MessageStore(small_config(overrides.pop("data_dir", tmp_path), **overrides))
        store.start()
        opened.append(store)
        return store

    yield start
    for store in opened:
        if store.state.value == "RUNNING":
            store.shutdown()
