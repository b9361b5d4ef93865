"""A slave whose disk fills (issue 9, item 2): it stops applying the master's bytes, says why
in its link view (what `/admin/diff` shows on a slave), keeps serving reads, and catches up by
itself once space is back. The slave runs on a real 4 MiB tmpfs (skipped where mounting is not
permitted)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ha import SlaveLinkView
from store import BrokerRole, Message, MessageStore, PutMessageStatus
from tests.support.ha import Node, same_bytes, wait_caught_up
from tests.support.small_fs import fill, small_fs
from tests.support.store import wait_dispatched, wait_until

StartNode = Callable[..., Node]


def _produce(store: MessageStore, count: int) -> None:
    for index in range(count):
        result, _ = store.put_message(Message("Full", bytes([index % 251]) * 2000))
        assert result.status is PutMessageStatus.PUT_OK


def _link(slave: Node) -> SlaveLinkView:
    view = slave.replication.diff()
    assert isinstance(view, SlaveLinkView)
    return view


def test_full_slave_stops_applying_says_why_and_resumes(
    start_node: StartNode, tmp_path: Path
) -> None:
    """With its disk full the slave answers no SIGBUS: its link view names
    CREATE_MAPPED_FILE_FAILED and ENOSPC, reads of what it holds go on, and it becomes
    byte-identical to the master by itself once space is back."""
    master = start_node("master", BrokerRole.ASYNC_MASTER)
    _produce(master.store, 20)
    with small_fs(tmp_path / "slave"):
        slave = start_node("slave", BrokerRole.SLAVE,
                           {"disk_reserve_bytes": 0},  # the disk's own ENOSPC, as it comes
                           ha_master_address=f"127.0.0.1:{master.ha_port}")
        wait_caught_up(master.store, slave.store)
        wait_dispatched(slave.store)
        held = slave.store.get_messages("Full", 0, 0, 100).messages
        filler = fill(tmp_path / "slave")
        _produce(master.store, 200)  # about six 64 KiB files: more than the slave has room for
        wait_until(lambda: "CREATE_MAPPED_FILE_FAILED" in (_link(slave).apply_error or ""))
        assert "No space left" in (_link(slave).apply_error or "")
        assert slave.store.max_offset < master.store.max_offset
        assert slave.store.get_messages("Full", 0, 0, 100).messages[: len(held)] == held
        filler.unlink()
        wait_caught_up(master.store, slave.store)
        assert same_bytes(master.store, slave.store)
        wait_until(lambda: _link(slave).apply_error is None)
        slave.stop()
