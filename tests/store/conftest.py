from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from store import MessageStore
from store.metadata import MetadataStore
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


@pytest.fixture
def metadata(tmp_path: Path) -> Iterator[MetadataStore]:
    """The metadata tables in a SQLite file of tmp_path, persister running."""
    tables = MetadataStore(f"sqlite:///{tmp_path / 'metadata.db'}")
    tables.start()
    yield tables
    tables.stop()
