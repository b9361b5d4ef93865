"""The garbage collector at a broker's start (app/server/gc_tuning.py, memory_trim.py): with
the tuning on, one full collection before the heap is frozen; with it off, none forced (a
broker inside a test process would collect the whole run's heap at every start)."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

from tests.support.app import app_settings, serving

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(("tuning", "collections"), [(True, 1), (False, 0)])
async def test_a_start_forces_one_collection_with_the_tuning_and_none_without(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tuning: bool, collections: int) -> None:
    forced: list[int] = []
    collect = gc.collect
    monkeypatch.setattr(gc, "collect", lambda *args: forced.append(1) or collect(*args))
    async with serving(app_settings(tmp_path, gc_tuning=tuning)) as served:
        assert served.broker.is_running
        assert len(forced) == collections
        assert (gc.get_freeze_count() > 0) == tuning
