"""The Broker's lifecycle: start, clean stop (no abort marker), misuse refused."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from app.broker.broker import Broker, BrokerState, BrokerStateError
from store import StoreStateError
from tests.support.app import app_settings


def test_clean_stop_removes_the_abort_marker(tmp_path: Path) -> None:
    """A started broker holds the abort marker; stop() removes it and stopping twice is fine."""
    broker = Broker(app_settings(tmp_path))
    broker.start()
    assert (tmp_path / "abort").exists() and broker.state is BrokerState.RUNNING
    assert broker.replication is not None and broker.replication.service is not None
    broker.stop()
    broker.stop()
    assert not (tmp_path / "abort").exists()
    assert broker.state.value == BrokerState.STOPPED.value
    with pytest.raises(BrokerStateError):
        broker.start()


def test_a_failed_start_releases_everything(tmp_path: Path) -> None:
    """A second broker on the same data dir fails to start and leaves the first intact."""
    first = Broker(app_settings(tmp_path))
    first.start()
    try:
        second = Broker(app_settings(tmp_path))
        with pytest.raises(StoreStateError):
            second.start()
        assert second.state is BrokerState.STOPPED
        assert first.store.put_message is not None and first.is_running
    finally:
        first.stop()


def test_start_and_stop_own_the_background_work(tmp_path: Path) -> None:
    """Periodic snapshots (a master with snapshot_interval_s) and the put-rate sampler are
    started by Broker.start and ended by Broker.stop: the app starts none of its own."""
    owned = {"snapshots", "put-rate-sampler"}

    def running() -> set[str]:
        return {thread.name for thread in threading.enumerate()} & owned

    assert running() == set()
    broker = Broker(app_settings(tmp_path, snapshot_interval_s=60))
    broker.start()
    try:
        assert running() == owned
    finally:
        broker.stop()
    assert running() == set()


def test_stop_before_start_is_refused(tmp_path: Path) -> None:
    """Stopping a broker that never started is a bug in the caller."""
    with pytest.raises(BrokerStateError):
        Broker(app_settings(tmp_path)).stop()


def test_topic_queue_counts_survive_a_restart(tmp_path: Path) -> None:
    """At start the store learns every topic's write queue count from the metadata."""
    broker = Broker(app_settings(tmp_path))
    broker.start()
    broker.metadata_store.create_topic(name="Wide", write_queue_count=9, read_queue_count=9)
    broker.stop()
    restarted = Broker(app_settings(tmp_path))
    restarted.start()
    try:
        assert restarted.store.commit_log.queue_count("Wide") == 9
    finally:
        restarted.stop()
