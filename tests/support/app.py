"""A broker's app served in-process for tests: settings on small files, a served client,
problem bodies."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI

from app.api.main import create_app
from app.broker.broker import Broker
from app.settings import Settings, load_settings
from tests.support.store import TEST_DISK_MAX_USED_RATIO

MESSAGE_SIZE_MAX_BYTES = 16 * 1024
MAX_BODY_SIZE_BYTES = 64 * 1024
MAX_BATCH_MESSAGES = 10


def app_settings(data_dir: Path, **overrides: Any) -> Settings:
    """Small files and limits, ephemeral HA port: a broker for one test."""
    values: dict[str, Any] = {
        "data_dir": data_dir,
        "mapped_file_size_bytes": 256 * 1024,
        "message_size_max_bytes": MESSAGE_SIZE_MAX_BYTES,
        "max_body_size_bytes": MAX_BODY_SIZE_BYTES,
        "max_batch_messages": MAX_BATCH_MESSAGES,
        "ha_listen_port": 0,
        "ha_secret": "test-ha-secret",
        "http_port": 0,
        "flush_interval_ms": 20,
        "disk_max_used_ratio": TEST_DISK_MAX_USED_RATIO,  # not the host's disk use
        # The tuning collects and freezes the heap at each start, and a test process's heap
        # is the whole run's: 74 starts took 20 s of tests/app/api's 40 (e2e brokers tune).
        "gc_tuning": False,
    }
    values.update(overrides)
    return load_settings(**values)


@dataclass
class Served:
    app: FastAPI
    client: httpx.AsyncClient

    @property
    def broker(self) -> Broker:
        broker: Broker | None = self.app.state.gateway.broker
        assert broker is not None
        return broker

    def stored_count(self) -> int:
        return int(self.broker.store.put_ok_count)


@asynccontextmanager
async def serving(settings: Settings) -> AsyncIterator[Served]:
    """The app with its lifespan running (a real broker on disk), and a client on it."""
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport,
                                     base_url="http://twinlog.test") as client:
            yield Served(app, client)


ServeFactory = Callable[..., AbstractAsyncContextManager[Served]]


def problem(response: httpx.Response) -> dict[str, Any]:
    """The problem+json body of a refusal (and checks it is one)."""
    assert response.headers["content-type"] == "application/problem+json", response.text
    document: dict[str, Any] = json.loads(response.content)
    assert document["status"] == response.status_code
    assert {"type", "title", "detail", "error_code"} <= document.keys()
    return document
