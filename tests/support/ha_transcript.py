"""Recorded HA sessions: the bytes a master and a slave put on the wire, made deterministic
(fixed nonces, node ids, store timestamps and records), so that what one build sends can be
compared byte for byte with what another build sent (tests/ha/classic/test_wire.py).

It uses only what every build of the classic HA link has (HAService, HAClient, the auth and
frame formats, the scripted peers), so the same functions record a reference from another
checkout:

    git archive REV ha store | tar -x -C /tmp/ref     # the other build's ha and store
    cd /tmp && PYTHONPATH=/tmp/ref:$REPO \
        python -m tests.support.ha_transcript $REPO/tests/ha/classic/recorded
"""

from __future__ import annotations

import socket
import sys
import tempfile
import time
import types
from contextlib import ExitStack
from pathlib import Path
from typing import Any
from unittest import mock

from ha import HAConfig
from ha.auth import SLAVE_ID_SIZE
from ha.client import HAClient
from ha.protocol import encode_header
from ha.service import HAService
from store import BrokerRole, Message, MessageStore
from store.paths import StorePaths
from tests.support.ha_peer import ScriptedSlave, scripted_master_handshake
from tests.support.store import small_config

SECRET = "transcript-secret"
MASTER_NONCE = bytes(range(16))
SLAVE_NONCE = bytes(range(100, 116))
MASTER_ID = b"M" * SLAVE_ID_SIZE
SLAVE_ID = b"S" * SLAVE_ID_SIZE
STORE_TIME_NS = 1_700_000_000_000 * 1_000_000
MESSAGE_COUNT = 40
BATCH_SIZE_BYTES = 4096
QUIET: dict[str, Any] = {  # no heartbeat or housekeeping within a test's time
    "ha_send_heartbeat_interval_ms": 600_000,
    "ha_housekeeping_interval_ms": 1_200_000,
}


def _fixed(stack: ExitStack) -> None:
    """Fixed nonces on both sides and a fixed store clock for the records' timestamps."""
    clock = types.SimpleNamespace(time_ns=lambda: STORE_TIME_NS, monotonic=time.monotonic)
    stack.enter_context(mock.patch("store.commit_log.time", clock))
    stack.enter_context(mock.patch("ha.connection.new_nonce", lambda: MASTER_NONCE))
    stack.enter_context(mock.patch("ha.client.new_nonce", lambda: SLAVE_NONCE))
    stack.enter_context(mock.patch("tests.support.ha_peer.new_nonce", lambda: SLAVE_NONCE))


def _store(data_dir: Path, node_id: bytes, role: BrokerRole) -> MessageStore:
    data_dir.mkdir(parents=True)
    StorePaths(data_dir).ha_node_id.write_text(node_id.hex() + "\n")
    store = MessageStore(small_config(data_dir, broker_role=role))
    store.start()
    return store


def _filled_master(stack: ExitStack, data_dir: Path, keyed: bool) -> MessageStore:
    """A master's store holding MESSAGE_COUNT records of growing sizes over three queues."""
    store = _store(data_dir, MASTER_ID, BrokerRole.ASYNC_MASTER)
    stack.callback(store.shutdown)
    for index in range(MESSAGE_COUNT):
        properties = {"KEYS": f"k{index}"} if keyed else {}
        store.put_message(Message("Wire", bytes([index]) * (100 + 37 * index), properties,
                                  queue_id=index % 3))
    return store


def master_transcript(root: Path) -> tuple[bytes, bytes]:
    """(what the master sent, what the slave sent): a scripted slave (empty, no epochs)
    takes a master's whole log of MESSAGE_COUNT records, then acks its end."""
    with ExitStack() as stack:
        _fixed(stack)
        store = _filled_master(stack, root / "master", keyed=True)
        end = store.max_offset
        service = HAService(HAConfig(broker_role=BrokerRole.ASYNC_MASTER, ha_listen_port=0,
                                     ha_secret=SECRET,
                                     ha_transfer_batch_size_bytes=BATCH_SIZE_BYTES, **QUIET),
                            store)
        service.start()
        stack.callback(service.stop)
        slave = ScriptedSlave(service.listen_address[1], SECRET, slave_id=SLAVE_ID)
        stack.callback(slave.close)
        recorder = _Recorder(slave.sock)
        slave.sock = recorder  # type: ignore[assignment]
        slave.handshake()
        slave.report(0)
        slave.receive_until(end)
        slave.report(end)
        deadline_s = time.monotonic() + 10
        while service.replicated_offset() != end:
            assert time.monotonic() < deadline_s, "the master never took the ack"
            time.sleep(0.01)
        return bytes(recorder.bytes_received), bytes(recorder.bytes_sent)


def slave_transcript(root: Path) -> bytes:
    """What a slave sent: an empty slave (no epochs) meets a scripted master that agrees at 0
    and sends a log of MESSAGE_COUNT records in one frame; the slave reports 0, applies the
    frame and reports its end."""
    with ExitStack() as stack:
        _fixed(stack)
        source = _filled_master(stack, root / "source", keyed=False)
        body = source.commit_log.read_bytes(0, source.max_offset)
        slave_store = _store(root / "slave", SLAVE_ID, BrokerRole.SLAVE)
        stack.callback(slave_store.shutdown)
        listener = socket.create_server(("127.0.0.1", 0))
        stack.callback(listener.close)
        client = HAClient(HAConfig(broker_role=BrokerRole.SLAVE, ha_secret=SECRET,
                                   ha_master_address=f"127.0.0.1:{listener.getsockname()[1]}",
                                   **QUIET), slave_store)
        client.start()
        stack.callback(client.stop)
        peer, _ = listener.accept()
        stack.callback(peer.close)
        recorder = _Recorder(peer)
        send_tags = scripted_master_handshake(recorder, SECRET)  # type: ignore[arg-type]
        report_size = 8 + send_tags.tag_size
        _read_exactly(recorder, report_size)  # the first report
        header = encode_header(0, len(body))
        peer.sendall(header + body + send_tags.tag(header, body))
        _read_exactly(recorder, report_size)  # the report after the frame
        return bytes(recorder.bytes_received)


def _read_exactly(recorder: _Recorder, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = recorder.recv(size - len(data))
        assert chunk, "the slave closed the connection"
        data += chunk
    return data


class _Recorder:
    """A socket that keeps every byte it sends and receives (what tests compare)."""

    def __init__(self, inner: socket.socket) -> None:
        self.inner = inner
        self.bytes_received = bytearray()
        self.bytes_sent = bytearray()

    def recv(self, size: int) -> bytes:
        data = self.inner.recv(size)
        self.bytes_received += data
        return data

    def recv_into(self, buffer: memoryview) -> int:
        size = self.inner.recv_into(buffer)
        self.bytes_received += buffer[:size]
        return size

    def sendall(self, data: bytes) -> None:
        self.bytes_sent += data
        self.inner.sendall(data)

    def settimeout(self, timeout_s: float | None) -> None:
        self.inner.settimeout(timeout_s)

    def close(self) -> None:
        self.inner.close()


def main(argv: list[str]) -> None:
    """Write the reference transcripts of the build on PYTHONPATH into a folder."""
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        master_sent, scripted_slave_sent = master_transcript(Path(tmp) / "m")
        slave_sent = slave_transcript(Path(tmp) / "s")
    (out / "master_sent.bin").write_bytes(master_sent)
    (out / "scripted_slave_sent.bin").write_bytes(scripted_slave_sent)
    (out / "slave_sent.bin").write_bytes(slave_sent)


if __name__ == "__main__":
    main(sys.argv[1:])
