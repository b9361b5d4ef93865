"""The slave sync's HTTP transport (the standard library's http.client) against a real master
over loopback: a table past the answer bound and a refused token fail the pull, named."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.api.main import create_app
from app.broker.slave_sync import SlaveSync
from app.broker.sync_transport import HttpTransport, MasterRefused, SyncRequest
from store.metadata import MetadataStore, sqlite_database_url
from tests.support.app import app_settings
from tests.support.http_server import serving_over_tcp

SYNC_TOKEN = "sync-token-for-the-test"


def test_a_table_larger_than_the_bound_is_refused(tmp_path: Path) -> None:
    """The answer is not read past `answer_bytes_max`: the pull fails naming the bound, and
    a bound the table fits in reads it whole."""
    app = create_app(app_settings(tmp_path / "master"))
    with serving_over_tcp(app) as url:
        app.state.gateway.broker.metadata_store.create_topic(
            name="Orders", write_queue_count=2, read_queue_count=2)
        request = SyncRequest("/admin/sync/topics", {})
        whole = HttpTransport(url, timeout_s=10)(request)
        assert whole.status == 200 and b"Orders" in whole.body
        bound_bytes = len(whole.body) - 1
        with pytest.raises(MasterRefused, match=f"larger than {bound_bytes} bytes"):
            HttpTransport(url, timeout_s=10, answer_bytes_max=bound_bytes)(request)
        fits = HttpTransport(url, timeout_s=10, answer_bytes_max=len(whole.body))(request)
        assert fits.body == whole.body


def test_a_refused_token_is_a_named_sync_error(tmp_path: Path) -> None:
    """A master that refuses the slave's token (401) fails the round with MasterRefused,
    the status and the master's problem in `last_error`; the right token syncs."""
    app = create_app(app_settings(tmp_path / "master", auth_tokens={SYNC_TOKEN: ["admin"]}))
    slave = MetadataStore(sqlite_database_url(tmp_path / "slave.sqlite3"))
    try:
        with serving_over_tcp(app) as url:
            app.state.gateway.broker.metadata_store.create_topic(
                name="Orders", write_queue_count=2, read_queue_count=2)
            refused = SlaveSync(url, slave, interval_s=60, timeout_s=10, auth_token="wrong")
            try:
                refused.run_once()
            finally:
                refused.stop()
            error = refused.status().last_error or ""
            assert error.startswith(f"MasterRefused: GET {url}/admin/sync/topics: 401: "), error
            assert slave.list_topics() == []
            synced = SlaveSync(url, slave, interval_s=60, timeout_s=10, auth_token=SYNC_TOKEN)
            try:
                assert synced.run_once() == 60, synced.status().last_error
            finally:
                synced.stop()
        assert [topic.name for topic in slave.list_topics()] == ["Orders"]
    finally:
        slave.stop()
