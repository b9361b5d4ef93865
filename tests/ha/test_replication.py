from __future__ import annotations

from collections.abc import Callable

from store import BrokerRole, Message, MessageStore, PutMessageStatus
from store.retention import RetentionService
from tests.support.ha import Node, same_bytes, wait_caught_up
from tests.support.store import wait_dispatched

StartNode = Callable[..., Node]


def _produce(store: MessageStore, count: int, prefix: str = "m") -> None:
    for index in range(count):
        body = f"{prefix}-{index}-".encode() * (3 + index % 120)
        result, _ = store.put_message(Message(f"Topic{index % 3}", body,
                                              {"KEYS": f"{prefix}{index}", "TAGS": "t"}))
        assert result.status is PutMessageStatus.PUT_OK


def _messages(store: MessageStore) -> list[tuple[str, int, bytes]]:
    wait_dispatched(store)
    found = []
    for topic, queue_ids in store.queues.topics().items():
        for queue_id in queue_ids:
            batch = store.get_messages(topic, queue_id, 0, 1000)
            found += [(topic, queue_id, m.body) for m in batch.messages]
    return sorted(found)


def test_slave_becomes_byte_identical_across_rolls(start_node: StartNode) -> None:
    """A slave replicates every byte across several file rolls and rebuilds the same
    consume queues from them."""
    master = start_node("master", BrokerRole.ASYNC_MASTER)
    _produce(master.store, 300, "before")
    slave = start_node("slave", BrokerRole.SLAVE,
                       ha_master_address=f"127.0.0.1:{master.ha_port}")
    _produce(master.store, 300, "during")
    wait_caught_up(master.store, slave.store)
    assert master.store.max_offset > 4 * master.store.config.mapped_file_size_bytes
    assert same_bytes(master.store, slave.store)
    assert _messages(slave.store) == _messages(master.store)
    assert len(_messages(slave.store)) == 600


def test_empty_slave_gets_whole_retained_history(start_node: StartNode) -> None:
    """An empty slave joining a master whose first files are gone gets everything the master
    still holds, starting at its min offset (not only the last file)."""
    master = start_node("master", BrokerRole.ASYNC_MASTER)
    _produce(master.store, 500)
    wait_dispatched(master.store)
    RetentionService(master.store.config, master.store.commit_log, master.store.queues,
                     master.store.dispatch, used_ratio=lambda _: 0.0,
                     wall_clock_s=lambda: 1e12).delete_expired()
    files_left = len(master.store.commit_log.files.files)
    assert master.store.min_offset > 0 and files_left == 1
    _produce(master.store, 400, "more")
    assert len(master.store.commit_log.files.files) >= 3
    slave = start_node("slave", BrokerRole.SLAVE,
                       ha_master_address=f"127.0.0.1:{master.ha_port}")
    wait_caught_up(master.store, slave.store)
    assert slave.store.min_offset == master.store.min_offset
    assert same_bytes(master.store, slave.store)
    assert _messages(slave.store) == _messages(master.store)


def test_slave_restart_catches_up(start_node: StartNode) -> None:
    """A slave stopped and restarted resumes from its own max offset and ends identical."""
    master = start_node("master", BrokerRole.ASYNC_MASTER)
    address = f"127.0.0.1:{master.ha_port}"
    slave = start_node("slave", BrokerRole.SLAVE, ha_master_address=address)
    _produce(master.store, 200)
    wait_caught_up(master.store, slave.store)
    slave.stop()
    _produce(master.store, 200, "while-down")
    slave = start_node("slave", BrokerRole.SLAVE, ha_master_address=address)
    wait_caught_up(master.store, slave.store)
    assert same_bytes(master.store, slave.store)
    assert _messages(slave.store) == _messages(master.store)


def test_diff_views_go_to_zero(start_node: StartNode) -> None:
    """After quiescence the master's per-slave diff and the slave's own view are 0 bytes, and
    the sampler keeps bounded samples of it, each naming the slave by its stable id (on the
    master and on the slave itself), not only by its link's ephemeral address."""
    from ha import MasterDiff, SlaveLinkView

    master = start_node("master", BrokerRole.SYNC_MASTER)
    slave = start_node("slave", BrokerRole.SLAVE, ha_master_address=f"127.0.0.1:{master.ha_port}")
    _produce(master.store, 100)
    wait_caught_up(master.store, slave.store)
    master_view = master.replication.diff()
    assert isinstance(master_view, MasterDiff)

    def settled() -> bool:
        view = master.replication.diff()
        return isinstance(view, MasterDiff) and view.max_diff_bytes == 0 and bool(view.slaves)

    from tests.support.store import wait_until

    wait_until(settled)
    view = master.replication.diff()
    assert isinstance(view, MasterDiff)
    assert view.in_sync_slave_count == 1 and view.master_max_offset == master.store.max_offset
    assert view.slaves[0].ack_offset == master.store.max_offset
    slave_view = slave.replication.diff()
    assert isinstance(slave_view, SlaveLinkView)
    assert slave_view.connected and slave_view.local_max_offset == master.store.max_offset
    wait_until(lambda: slave.replication.diff().diff_bytes == 0)  # type: ignore[union-attr]
    wait_until(lambda: len(master.replication.sampler.peek_samples()) > 0)
    slave_id = slave.replication.client.slave_id.hex()  # type: ignore[union-attr]
    assert {s.slave_id for s in master.replication.sampler.drain_samples()} == {slave_id}
    wait_until(lambda: len(slave.replication.sampler.peek_samples()) > 0)
    assert {s.slave_id for s in slave.replication.sampler.peek_samples()} == {slave_id}
