from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ha import HAConfig, Replication
from ha.client import HAClient
from ha.protocol import ProtocolError
from store import BrokerRole, Message, MessageStore, PutMessageStatus, StoreConfig
from store.retention import RetentionService
from tests.support.child_lines import ChildLines
from tests.support.ha import FAST_HA, Node, same_bytes, wait_caught_up
from tests.support.ha_peer import ScriptedSlave, scripted_master_handshake
from tests.support.store import (
    TEST_DISK_MAX_USED_RATIO,
    small_config,
    wait_dispatched,
    wait_until,
)
from tests.support.tcp_proxy import TcpProxy

StartNode = Callable[..., Node]
ROOT = Path(__file__).resolve().parents[2]
# More than heartbeats could carry between two cuts (12 bytes per 200 ms): records flowing.
LIVE_BYTES_PER_CUT = 64 * 1024
WRITES_MAX = 100_000  # the writer's bound if the test fails before stopping it


def _produce_one(store: MessageStore, index: int, size: int = 3000) -> None:
    store.put_message(Message("F", bytes([index % 256]) * size))


def _produce(store: MessageStore, count: int, size: int = 3000) -> None:
    for index in range(count):
        _produce_one(store, index, size)


def _connect(node: Node) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", node.ha_port), timeout=5)
    return sock


def _scripted(node: Node, secret: str | None = FAST_HA["ha_secret"],
              **options: Any) -> ScriptedSlave:
    return ScriptedSlave(node.ha_port, secret, **options).handshake()


def _closed_by_peer(sock: socket.socket, timeout_s: float = 5.0) -> bool:
    sock.settimeout(timeout_s)
    try:
        while sock.recv(65536):
            pass
        return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def _master_still_serves(master: Node, slave: Node) -> None:
    _produce(master.store, 20)
    wait_caught_up(master.store, slave.store)
    assert same_bytes(master.store, slave.store)


def _pair(start_node: StartNode, **master_overrides: object) -> tuple[Node, Node]:
    master = start_node("master", BrokerRole.ASYNC_MASTER, **master_overrides)
    secret = master_overrides.get("ha_secret", FAST_HA["ha_secret"])
    slave = start_node("slave", BrokerRole.SLAVE, ha_secret=secret,
                       ha_master_address=f"127.0.0.1:{master.ha_port}")
    _produce(master.store, 30)
    wait_caught_up(master.store, slave.store)
    return master, slave


def _wait_for_traffic(proxy: TcpProxy, size_bytes: int) -> None:
    """Until the proxy has carried `size_bytes` more from the master than it had so far."""
    carried = proxy.bytes_from_target
    wait_until(lambda: proxy.bytes_from_target - carried >= size_bytes)


def _wait_for_reconnect(client: HAClient, reconnects_before: int) -> None:
    wait_until(lambda: client.reconnect_count > reconnects_before)


def test_link_cut_mid_frame_resumes(start_node: StartNode) -> None:
    """Cutting the link three times, each time while it carries data (at least
    LIVE_BYTES_PER_CUT transferred since the previous cut, the writer still writing): the
    slave reconnects each time and resumes at its offset, byte-identical in the end."""
    master = start_node("master", BrokerRole.ASYNC_MASTER)
    proxy = TcpProxy(("127.0.0.1", master.ha_port))
    stop_writing = threading.Event()

    def write_until_stopped() -> None:
        index = 0
        while not stop_writing.is_set() and index < WRITES_MAX:
            _produce_one(master.store, index)
            index += 1

    writer = threading.Thread(target=write_until_stopped)
    try:
        slave = start_node("slave", BrokerRole.SLAVE, ha_master_address=proxy.address)
        client = slave.replication.client
        assert client is not None
        writer.start()
        for cut in range(3):
            _wait_for_traffic(proxy, LIVE_BYTES_PER_CUT)
            assert writer.is_alive(), f"cut {cut} would hit an idle link"
            reconnects = client.reconnect_count
            proxy.cut()
            _wait_for_reconnect(client, reconnects)
        stop_writing.set()
        writer.join(30)
        assert not writer.is_alive()
        wait_caught_up(master.store, slave.store)
        assert same_bytes(master.store, slave.store)
        assert client.reconnect_count >= 3
    finally:
        stop_writing.set()
        proxy.close()


def test_garbage_on_the_ha_port(start_node: StartNode) -> None:
    """Garbage bytes read as an impossible ack: that connection closes, the master serves on."""
    master, slave = _pair(start_node)
    sock = _connect(master)
    sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" * 4)
    assert _closed_by_peer(sock)
    _master_still_serves(master, slave)


def test_half_frame_then_silence(start_node: StartNode) -> None:
    """A few bytes and then silence: housekeeping closes the connection."""
    master, slave = _pair(start_node)
    sock = _connect(master)
    sock.sendall(b"\x00\x00\x00")
    assert _closed_by_peer(sock, timeout_s=FAST_HA["ha_housekeeping_interval_ms"] / 1000 + 3)
    _master_still_serves(master, slave)


def test_ack_beyond_master_offset_closes_and_counts(start_node: StartNode) -> None:
    """A client cannot fake replication: an ack past the master's max offset closes it."""
    master, slave = _pair(start_node)
    service = master.replication.service
    assert service is not None
    fake = _scripted(master, epochs=service.epochs, max_offset=master.store.max_offset)
    fake.report(master.store.max_offset)
    fake.report(master.store.max_offset + 10**9)
    assert fake.closed_by_peer()
    wait_until(lambda: service.ack_beyond_max_count == 1)
    _master_still_serves(master, slave)


def test_huge_size_field_sent_to_a_slave(start_node: StartNode, tmp_path: Path) -> None:
    """A fake master sending a frame size over the read buffer: the slave closes, counts a
    protocol error, and keeps trying to reconnect instead of allocating or hanging."""
    fake = socket.create_server(("127.0.0.1", 0))
    fake.settimeout(5)
    port = fake.getsockname()[1]
    slave = start_node("slave", BrokerRole.SLAVE, ha_master_address=f"127.0.0.1:{port}")
    peer, _ = fake.accept()
    with peer:
        scripted_master_handshake(peer, FAST_HA["ha_secret"])
        peer.sendall(b"\x00" * 8 + (1 << 30).to_bytes(4, "big"))
        assert _closed_by_peer(peer)
    client = slave.replication.client
    assert client is not None
    wait_until(lambda: client.last_error is not None and "outside" in client.last_error)
    peer, _ = fake.accept()  # it reconnects
    peer.close()
    fake.close()
    assert slave.store.max_offset == 0


def test_wrong_secret_is_refused(start_node: StartNode) -> None:
    """With ha_secret set, a slave with the wrong secret is closed and gets no data; the
    right secret replicates."""
    master, slave = _pair(start_node, ha_secret="right-secret")
    intruder = start_node("intruder", BrokerRole.SLAVE, ha_secret="wrong-secret",
                          ha_master_address=f"127.0.0.1:{master.ha_port}")
    client = intruder.replication.client
    assert client is not None
    wait_until(lambda: client.reconnect_count >= 2)
    assert intruder.store.max_offset == 0
    with pytest.raises(ProtocolError):
        _scripted(master, secret="wrong-secret")
    _master_still_serves(master, slave)


def test_slave_behind_retention_needs_reset(start_node: StartNode) -> None:
    """A slave asking for an offset the master no longer holds is named needs_reset and
    disconnected, instead of getting heartbeats forever."""
    master = start_node("master", BrokerRole.ASYNC_MASTER)
    _produce(master.store, 100)
    wait_dispatched(master.store)
    RetentionService(master.store.config, master.store.commit_log, master.store.queues,
                     master.store.dispatch, used_ratio=lambda _: 1.0).delete_expired()
    assert master.store.min_offset > 100
    service = master.replication.service
    assert service is not None
    # It holds the master's history up to offset 100, which retention has removed since.
    fake = _scripted(master, epochs=service.epochs, max_offset=100)
    assert fake.decision is not None and fake.decision.agreement.name == "NEEDS_RESET"
    assert fake.closed_by_peer()
    wait_until(lambda: len(service.rejected) == 1)
    assert service.rejected[0].state == "needs_reset"


def test_slave_ahead_of_master_is_named(start_node: StartNode) -> None:
    """A slave that reports more than the offset it agreed to keep (an empty slave that
    then claims bytes) is named ahead_of_master and disconnected."""
    master = start_node("master", BrokerRole.ASYNC_MASTER)
    _produce(master.store, 5)
    fake = _scripted(master)
    fake.report(master.store.max_offset + 1000)
    assert fake.closed_by_peer()
    service = master.replication.service
    assert service is not None
    wait_until(lambda: len(service.rejected) == 1)
    assert service.rejected[0].state == "ahead_of_master"
    assert "ahead" in service.rejected[0].reason


def test_heartbeat_header_keeps_idle_link_alive(start_node: StartNode) -> None:
    """An idle link stays up past the housekeeping interval: both sides heartbeat."""
    master, slave = _pair(start_node)
    time.sleep(FAST_HA["ha_housekeeping_interval_ms"] / 1000 * 1.5)
    client = slave.replication.client
    assert client is not None and client.connected and client.reconnect_count == 0
    assert master.replication.service is not None
    assert master.replication.service.connection_count == 1


@pytest.mark.processes
def test_killed_slave_process_catches_up(tmp_path: Path) -> None:
    """A slave in its own process, killed with SIGKILL mid-stream and restarted, catches up to
    a byte-identical commit log and the same consume queues."""
    file_size = 64 * 1024
    master = MessageStore(small_config(tmp_path / "master"))
    master.start()
    replication = Replication(HAConfig(ha_listen_port=0, **FAST_HA), master)
    replication.start()
    assert replication.service is not None
    address = f"127.0.0.1:{replication.service.listen_address[1]}"

    def spawn() -> tuple[subprocess.Popen[str], ChildLines]:
        child = subprocess.Popen(
            [sys.executable, "-m", "ha.standalone", str(tmp_path / "slave"),
             address, str(file_size)],
            stdout=subprocess.PIPE, text=True, cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT),
                 "TWINLOG_HA_SECRET": FAST_HA["ha_secret"],
                 "TWINLOG_DISK_MAX_USED_RATIO": str(TEST_DISK_MAX_USED_RATIO)})
        children.append(child)
        lines = ChildLines(child)
        assert lines.next() == "READY"
        return child, lines

    children: list[subprocess.Popen[str]] = []
    try:
        child, lines = spawn()
        writer = threading.Thread(target=_produce, args=(master, 400))
        writer.start()
        lines.until(lambda line: int(line) > 3 * file_size)
        child.send_signal(signal.SIGKILL)
        child.wait(10)
        writer.join(60)
        assert not writer.is_alive()
        child, lines = spawn()
        lines.until(lambda line: int(line) == master.max_offset)
        child.send_signal(signal.SIGTERM)
        assert child.wait(20) == 0
        slave = MessageStore(StoreConfig(data_dir=tmp_path / "slave", broker_role=BrokerRole.SLAVE,
                                         mapped_file_size_bytes=file_size,
                                         message_size_max_bytes=16 * 1024,
                                         disk_max_used_ratio=TEST_DISK_MAX_USED_RATIO))
        slave.start()
        try:
            assert same_bytes(master, slave)
            wait_dispatched(master)
            for queue_id in range(4):
                ours = slave.get_messages("F", queue_id, 0, 1000).messages
                theirs = master.get_messages("F", queue_id, 0, 1000).messages
                assert [m.body for m in ours] == [m.body for m in theirs]
        finally:
            slave.shutdown()
    finally:
        for running in children:
            if running.poll() is None:
                running.kill()
                running.wait(10)
        replication.stop()
        master.shutdown()
    assert PutMessageStatus.PUT_OK.is_stored
