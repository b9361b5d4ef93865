"""A master process restarted on its data dir: idempotency keys and data survive."""

from __future__ import annotations

import pytest

from tests.support.brokers import Launcher

pytestmark = pytest.mark.processes


def test_idempotency_key_across_a_master_restart(launch: Launcher) -> None:
    """The same Idempotency-Key before and after a clean restart stores one message and
    answers the same ids; the restart leaves no abort marker."""
    master = launch("restarted", "ASYNC_MASTER")
    headers = {"idempotency-key": "order-42"}
    first = master.client.post("/v1/topics/Orders/messages", json={"body": "pay"},
                               headers=headers)
    assert first.status_code == 201 and not first.json()["replayed"]
    again = master.client.post("/v1/topics/Orders/messages", json={"body": "pay"},
                               headers=headers)
    assert again.json() == {**first.json(), "replayed": True}
    max_offset = master.get_json("/admin/store")["max_offset"]
    assert master.stop() == 0
    assert not (master.data_dir / "abort").exists()
    master.start()
    retry = master.client.post("/v1/topics/Orders/messages", json={"body": "pay"},
                               headers=headers)
    assert retry.status_code == 201 and retry.headers["idempotent-replayed"] == "true"
    assert retry.json() == {**first.json(), "replayed": True}
    assert master.get_json("/admin/store")["max_offset"] == max_offset
    fresh = master.client.post("/v1/topics/Orders/messages", json={"body": "pay"},
                               headers={"idempotency-key": "order-43"})
    assert fresh.json()["commit_log_offset"] == max_offset
