"""The replication sender holds the commit-log file it sends from: retention cannot close
its descriptor under it (and hand the number to the next open())."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from pathlib import Path

from ha.protocol import HEADER
from store import BrokerRole, Message
from store.commit_log import TransferSource
from store.retention import RetentionService
from tests.support.fds import open_fds_of
from tests.support.ha import Node
from tests.support.ha_peer import ScriptedSlave
from tests.support.store import SMALL_FILE_BYTES, wait_dispatched, wait_until

StartNode = Callable[..., Node]
FDS_TO_TAKE_MAX = 256


def _recv_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        assert chunk, f"connection closed after {len(data)} of {size} bytes"
        data += chunk
    return data


def test_retention_under_a_sender_never_streams_another_files_bytes(
        start_node: StartNode, tmp_path: Path) -> None:
    """Retention removes the file a sender is about to sendfile from and the next open()s take
    the lowest free descriptors: the slave still receives the commit log's own bytes, then
    the sender stops cleanly (the offset is gone), and the file goes once it is released."""
    # An open link: the sender streams with os.sendfile from the file's descriptor (an
    # authenticated link reads the held file with pread to tag it; the same hold covers both).
    master = start_node("master", BrokerRole.ASYNC_MASTER, ha_secret=None,
                        ha_allow_unauthenticated=True)
    store = master.store
    for index in range(150):
        store.put_message(Message("F", bytes([index % 251]) * 1500))
    wait_dispatched(store)
    first = store.commit_log.files.first_file()
    assert first is not None and len(store.commit_log.files.files) >= 3
    expected = store.commit_log.read_bytes(0, SMALL_FILE_BYTES)
    foreign_path = tmp_path / "foreign"
    foreign_path.write_bytes(b"F" * SMALL_FILE_BYTES)
    foreign_fds: list[int] = []
    retention = RetentionService(store.config, store.commit_log, store.queues, store.dispatch,
                                 used_ratio=lambda _: 0.99)

    def retention_then_open(source: TransferSource) -> None:
        if source.offset != 0 or foreign_fds:
            return
        fd = source.fd
        assert retention.delete_expired() >= 2
        # Any open() in the broker now gets the lowest free number: take numbers until the
        # sender's is one of them (it never is while the sender holds its file).
        for _ in range(FDS_TO_TAKE_MAX):
            foreign_fds.append(os.open(foreign_path, os.O_RDONLY))
            if foreign_fds[-1] == fd:
                break

    service = master.replication.service
    assert service is not None
    slave = ScriptedSlave(master.ha_port, secret=None).handshake()
    try:
        wait_until(lambda: len(service.connections) == 1)
        service.connections[0].before_send = retention_then_open
        slave.report(0)  # an empty slave: stream from the master's min
        offset, size = HEADER.unpack(_recv_exactly(slave.sock, HEADER.size))
        body = _recv_exactly(slave.sock, size)
        assert foreign_fds, "the seam did not run"
        assert offset == 0 and size > 0
        assert body == expected[:size]
        wait_until(lambda: not service.connections)  # the next offset is gone: it stops
        assert not first.path.exists() and not open_fds_of(first.path)
    finally:
        slave.close()
        for fd in foreign_fds:
            os.close(fd)
