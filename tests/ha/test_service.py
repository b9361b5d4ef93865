"""The master's HA service driven directly: a real store, the service on port 0 and scripted
slaves, so what each answer of a SYNC_MASTER put means is seen ack by ack."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from ha import HAConfig
from ha.connection import HAConnection
from ha.epochs import Epoch, load_history
from ha.service import HAService
from store import BrokerRole, Message, MessageStore, PutMessageStatus
from store.paths import StorePaths
from store.waits.completion import PutCompletion
from tests.support.ha_peer import ScriptedSlave
from tests.support.store import small_config, wait_until

SECRET = "service-test-secret"
CONFIG: dict[str, Any] = {
    "broker_role": BrokerRole.SYNC_MASTER,
    "ha_listen_port": 0,  # the kernel picks a free port; the test reads it back
    "ha_secret": SECRET,
    "ha_send_heartbeat_interval_ms": 100,
    "ha_housekeeping_interval_ms": 5000,
    "slave_timeout_ms": 20_000,
}

StartService = Callable[..., HAService]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[MessageStore]:
    store = MessageStore(small_config(tmp_path / "master", broker_role=BrokerRole.SYNC_MASTER))
    store.start()
    yield store
    store.shutdown()


@pytest.fixture
def start_service(store: MessageStore) -> Iterator[StartService]:
    services: list[HAService] = []
    slaves: list[ScriptedSlave] = []

    def start(**overrides: Any) -> HAService:
        service = HAService(HAConfig(**{**CONFIG, **overrides}), store)
        service.start()
        services.append(service)
        return service

    yield start
    for slave in slaves:
        slave.close()
    for service in services:
        service.stop()


def _slave(service: HAService, slave_id: bytes | None = None, report: int | None = 0,
           secret: str | None = SECRET) -> ScriptedSlave:
    """A scripted slave past the handshake that reported `report` (an empty slave by default)."""
    slave = ScriptedSlave(service.listen_address[1], secret, slave_id=slave_id)
    slave.handshake()
    if report is not None:
        slave.report(report)
    return slave


def _put(store: MessageStore, body: bytes = b"x" * 100) -> tuple[int, PutCompletion]:
    result, done = store.put_message(Message("S", body))
    assert result.status is PutMessageStatus.PUT_OK
    return result.commit_log_offset + result.wrote_bytes, done


def _transferring(service: HAService, count: int) -> None:
    wait_until(lambda: sum(c.state.value == "transferring" for c in service.connections)
               == count)


def test_put_ok_waits_for_the_ack_of_its_end_offset(
        store: MessageStore, start_service: StartService) -> None:
    """A SYNC_MASTER put completes PUT_OK only when a slave acks its end offset; an ack one
    byte short leaves it pending."""
    service = start_service()
    slave = _slave(service)
    _transferring(service, 1)
    end, done = _put(store)
    slave.receive_until(end)
    slave.report(end - 1)
    wait_until(lambda: service.replicated_offset() == end - 1)
    assert not done.is_done and service.pending_count == 1
    slave.report(end)
    assert done.result(10) is PutMessageStatus.PUT_OK
    assert service.replicated_offset() == end and service.pending_count == 0


def test_two_slaves_needed_means_two_distinct_slaves(
        store: MessageStore, start_service: StartService) -> None:
    """With in_sync_replicas 3 the replicated offset is the lower ack of two distinct slaves;
    the same slave reconnecting replaces its old link and never counts twice."""
    service = start_service(in_sync_replicas=3)
    first = _slave(service, slave_id=b"a" * 16)
    _transferring(service, 1)
    again = _slave(service, slave_id=b"a" * 16)  # the same slave, a second link
    wait_until(lambda: len(service.connections) == 1)
    _transferring(service, 1)
    assert service.replicated_offset() == -1 and not service.is_slave_ok(0)
    other = _slave(service, slave_id=b"b" * 16)
    _transferring(service, 2)
    end, done = _put(store)
    again.receive_until(end)
    other.receive_until(end)
    again.report(end)
    other.report(end - 10)
    wait_until(lambda: service.replicated_offset() == end - 10)
    assert not done.is_done
    other.report(end)
    assert done.result(10) is PutMessageStatus.PUT_OK
    assert service.connection_count == 2
    first.close()


def test_one_slave_needed_is_the_most_advanced_one(
        store: MessageStore, start_service: StartService) -> None:
    """With in_sync_replicas 2 one slave holding the message is enough: the replicated offset
    is the highest ack of the connected slaves, not the lowest."""
    service = start_service(in_sync_replicas=2)
    ahead, behind = _slave(service), _slave(service)
    _transferring(service, 2)
    end, done = _put(store)
    behind.receive_until(end)
    behind.report(end - 10)
    wait_until(lambda: service.replicated_offset() == end - 10)
    ahead.receive_until(end)
    ahead.report(end)
    assert done.result(10) is PutMessageStatus.PUT_OK
    assert sorted(view.ack_offset for view in service.slave_views()) == [end - 10, end]
    assert service.replicated_offset() == end


def test_a_slave_reconnecting_when_all_slots_are_taken_replaces_its_own_link(
        store: MessageStore, start_service: StartService) -> None:
    """With every slot taken, the slave holding one reconnects (its old link half-open): the new
    link is not refused, it takes the old link's slot and the old link is closed."""
    service = start_service(ha_connections_max=1)
    old = _slave(service, slave_id=b"a" * 16)
    _transferring(service, 1)
    (old_link,) = service.connections
    new = _slave(service, slave_id=b"a" * 16)
    wait_until(lambda: service.connections != [old_link] and len(service.connections) == 1)
    _transferring(service, 1)
    assert service.refused_connection_count == 0 and not old_link.is_open
    new.close()
    old.close()


def test_a_closed_slave_stops_counting(store: MessageStore, start_service: StartService) -> None:
    """When the only slave goes away its acks stop counting: the next put answers
    SLAVE_NOT_AVAILABLE at once."""
    service = start_service()
    slave = _slave(service)
    _transferring(service, 1)
    end, done = _put(store)
    slave.receive_until(end)
    slave.report(end)
    assert done.result(10) is PutMessageStatus.PUT_OK
    slave.close()
    wait_until(lambda: service.connections == [])
    assert service.replicated_offset() == -1 and not service.is_slave_ok(end)
    _, refused = _put(store)
    assert refused.is_done and refused.result() is PutMessageStatus.SLAVE_NOT_AVAILABLE


def test_a_slave_that_acked_an_empty_master_is_in_sync(
        store: MessageStore, start_service: StartService) -> None:
    """On a master with nothing stored, a slave that reported offset 0 has everything: it is
    in sync, so the first put waits for its ack instead of answering SLAVE_NOT_AVAILABLE."""
    service = start_service()
    slave = _slave(service, report=0)
    _transferring(service, 1)
    wait_until(lambda: service.replicated_offset() == 0)
    assert store.max_offset == 0 and service.is_slave_ok(0)
    end, done = _put(store)
    assert not done.is_done
    slave.receive_until(end)
    slave.report(end)
    assert done.result(10) is PutMessageStatus.PUT_OK


def test_slave_ok_only_within_the_fall_behind_bound(
        store: MessageStore, start_service: StartService) -> None:
    """A slave counts as in sync while an offset is less than ha_slave_fall_behind_bytes_max
    past its ack."""
    service = start_service(ha_slave_fall_behind_bytes_max=1000)
    assert not service.is_slave_ok(0)
    slave = _slave(service)
    _transferring(service, 1)
    end, _ = _put(store)
    slave.receive_until(end)
    slave.report(end)
    wait_until(lambda: service.replicated_offset() == end)
    assert service.is_slave_ok(end) and service.is_slave_ok(end + 999)
    assert not service.is_slave_ok(end + 1000)


def test_wait_ends_at_its_deadline_and_at_stop(
        store: MessageStore, start_service: StartService) -> None:
    """A put nobody acks answers FLUSH_SLAVE_TIMEOUT at slave_timeout_ms, not before; a put
    pending when
    the service stops answers FLUSH_SLAVE_TIMEOUT too, and no wait is left."""
    service = start_service(slave_timeout_ms=300)
    slave = _slave(service)
    _transferring(service, 1)
    put_at_s = time.monotonic()
    _, done = _put(store)
    assert done.result(10) is PutMessageStatus.FLUSH_SLAVE_TIMEOUT
    assert time.monotonic() - put_at_s >= 0.29  # not before its deadline (ms rounding aside)
    service.waits.add(store.max_offset + 1, 2**62)
    assert service.pending_count == 1
    service.stop()
    assert service.pending_count == 0
    slave.close()


def test_stop_answers_pending_puts(store: MessageStore, start_service: StartService) -> None:
    """Stopping the service completes a put still waiting for its slave as
    FLUSH_SLAVE_TIMEOUT (the message is stored), not never."""
    service = start_service()
    slave = _slave(service)
    _transferring(service, 1)
    _, done = _put(store)
    assert not done.is_done
    service.stop()
    assert done.result(10) is PutMessageStatus.FLUSH_SLAVE_TIMEOUT
    slave.close()


def test_refused_slaves_are_counted_and_named(
        store: MessageStore, start_service: StartService) -> None:
    """Acks beyond the log, wrong secrets and a slave ahead of its agreement each close their
    link and are counted, each one; the ahead one is kept in `rejected` with its offset."""
    service = start_service()
    _put(store)
    liars = []
    for lies in (1, 2):  # each one counts
        liar = _slave(service)
        liar.receive_until(store.max_offset)
        liar.report(store.max_offset + 1)
        liars.append(liar)
        wait_until(lambda: service.ack_beyond_max_count == lies)  # noqa: B023
    for wrong in (1, 2):
        with pytest.raises(Exception):  # noqa: B017 - the slave side fails as it may
            _slave(service, secret="not-the-secret", report=None)
        wait_until(lambda: service.protocol_error_count == wrong)  # noqa: B023
    ahead = _slave(service, report=500)  # agreed at 0 (an empty history), reports more
    wait_until(lambda: len(service.rejected) == 1)
    rejected = service.rejected[0]
    assert (rejected.state, rejected.request_offset) == ("ahead_of_master", 500)
    assert "ahead of the offset" in rejected.reason
    assert service.ack_beyond_max_count == 2 and service.protocol_error_count == 2
    ahead.close()
    for liar in liars:
        liar.close()


def test_slots_are_bounded(store: MessageStore, start_service: StartService) -> None:
    """Past ha_connections_max slaves each new slave is refused a slot and counted."""
    service = start_service(ha_connections_max=1)
    holder = _slave(service, slave_id=b"a" * 16)
    _transferring(service, 1)
    assert service.refused_connection_count == 0
    for refused, slave_id in enumerate((b"b" * 16, b"c" * 16), start=1):
        with pytest.raises(Exception):  # noqa: B017 - the slave side fails as it may
            _slave(service, slave_id=slave_id, report=None)
        wait_until(lambda: service.refused_connection_count == refused)  # noqa: B023
        wait_until(lambda: service.connection_count == 1)  # the refused one is closing
    holder.close()


def test_two_handshakes_finishing_together_cannot_share_the_last_slot(
        store: MessageStore, start_service: StartService, monkeypatch: pytest.MonkeyPatch) -> None:
    """The slot is taken under the service's lock as a handshake succeeds: a second slave whose
    handshake ends while the first is still between its slot and its first report is refused,
    not admitted past ha_connections_max (the first is held there by a seam around the slot
    decision)."""
    service = start_service(ha_connections_max=1)
    first_slotted = threading.Event()
    release_first = threading.Event()
    take_slot = service._on_handshake

    def hold_the_first(connection: HAConnection) -> str:
        refusal = take_slot(connection)
        if not first_slotted.is_set():
            first_slotted.set()
            release_first.wait(10)
        return refusal

    monkeypatch.setattr(service, "_on_handshake", hold_the_first)
    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(_slave, service, b"a" * 16)
        assert first_slotted.wait(10)
        try:
            with pytest.raises(Exception):  # noqa: B017 - the slave side fails as it may
                _slave(service, slave_id=b"b" * 16, report=None)
            wait_until(lambda: service.refused_connection_count == 1)
        finally:
            release_first.set()
        first.result(10).close()


def test_handshakes_are_bounded_oldest_dropped(start_service: StartService) -> None:
    """Past ha_handshakes_max sockets in the handshake, the oldest is dropped and counted,
    each time."""
    service = start_service(ha_handshakes_max=1, ha_handshake_timeout_ms=60_000)
    sockets = [socket.create_connection(("127.0.0.1", service.listen_address[1]), timeout=5)]
    wait_until(lambda: len(service.connections) == 1)
    assert service.handshake_evicted_count == 0
    for evicted in (1, 2):
        sockets.append(
            socket.create_connection(("127.0.0.1", service.listen_address[1]), timeout=5))
        wait_until(lambda: service.handshake_evicted_count == evicted)  # noqa: B023
        wait_until(lambda: len(service.connections) == 1)
    assert service.connection_count == 0
    for sock in sockets:
        sock.close()


def test_each_start_begins_an_epoch_at_the_max_offset(
        store: MessageStore, start_service: StartService) -> None:
    """Starting as master opens a new epoch at the store's max offset, led by this node, and
    saves the history; a restart opens the next one."""
    first = start_service()
    assert first.epochs == [Epoch(1, 0, first.node_id)] and len(first.node_id) > 0
    first.stop()
    _put(store)
    second = start_service()
    assert second.epochs == [Epoch(1, 0, first.node_id),
                             Epoch(2, store.max_offset, first.node_id)]
    assert load_history(StorePaths(store.config.data_dir).ha_epochs) == second.epochs


def test_slave_views_report_each_link(store: MessageStore, start_service: StartService) -> None:
    """Each connected slave has a view with its ack and its lag behind the master."""
    service = start_service(ha_slave_fall_behind_bytes_max=1 << 20)
    slave = _slave(service)
    _transferring(service, 1)
    end, _ = _put(store)
    slave.receive_until(end)
    slave.report(end)
    wait_until(lambda: service.replicated_offset() == end)
    (view,) = service.slave_views()
    assert (view.ack_offset, view.diff_bytes, view.in_sync) == (end, 0, True)
    assert view.slave_id == slave.slave_id.hex()
    host, port = slave.sock.getsockname()[:2]
    assert view.address == f"{host}:{port}"  # the slave's end of the link, as /admin/ha shows


def test_stop_after_a_failed_start_is_clean(
        store: MessageStore, start_service: StartService) -> None:
    """A master whose HA port is taken fails to start, and stopping it then (what a broker
    does with the parts it started) raises nothing and leaves the store without replication."""
    with socket.create_server(("127.0.0.1", 0)) as taken:
        service = HAService(HAConfig(**{**CONFIG, "ha_listen_port": taken.getsockname()[1]}),
                            store)
        with pytest.raises(OSError):
            service.start()
        service.stop()
    assert service.pending_count == 0
    _, done = _put(store)
    assert done.result(5) is PutMessageStatus.PUT_OK  # no replication guard is left behind


def test_rejected_slaves_kept_are_bounded(
        store: MessageStore, start_service: StartService) -> None:
    """The list of rejected slaves keeps only the newest ones, up to its bound: a master that
    rejects slave after slave does not grow it without end."""
    service = start_service()
    offsets = range(500, 540)
    for request_offset in offsets:
        _slave(service, report=request_offset).close()
        wait_until(lambda: service.rejected  # noqa: B023
                   and service.rejected[-1].request_offset == request_offset)  # noqa: B023
    kept = [rejected.request_offset for rejected in service.rejected]
    assert 0 < len(kept) < len(offsets)
    assert kept == list(offsets[-len(kept):])  # the newest, in order
