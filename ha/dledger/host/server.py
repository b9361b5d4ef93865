"""One DLedger member in a process: its host loop and its peer transport, started and stopped
in order. The host's thread is the transport's I/O thread (it waits in `transport.poll`), so
a message goes from the socket to the node and back out without a thread switch. Start: the
transport (its accept and dialing threads; connections wait for the host to adopt them), then
the host. Stop in reverse: the host first (it answers every pending append and polls no
more), then the transport (links, connections and the port closed, threads joined)."""

from __future__ import annotations

import random
import socket
import time

from ha.dledger.core.config import DLedgerConfig
from ha.dledger.core.messages import Message
from ha.dledger.core.storage import DLedgerStorage
from ha.dledger.host.host import DLedgerHost
from ha.dledger.host.host_config import HostConfig
from ha.dledger.host.transport import PeerTransport
from ha.dledger.host.transport_config import TransportConfig
from ha.dledger.host.wire import push_frame_bytes_needed
from store.errors import ConfigError


def monotonic_ms() -> float:
    return time.monotonic() * 1000


class DLedgerServer:
    def __init__(self, transport_config: TransportConfig, host_config: HostConfig,
                 storage: DLedgerStorage, listener: socket.socket,
                 rng: random.Random | None = None,
                 node_base_config: DLedgerConfig | None = None,
                 entry_payload_bytes_max: int | None = None) -> None:
        """`listener` is a bound socket for the member's own port (tests bind port 0).
        `entry_payload_bytes_max` is the largest entry the log may hold (the broker's largest
        record; by default push_bytes_max): the frame bound must let the largest push pass."""
        node_config = host_config.node_config(node_base_config)
        frame_bytes_needed = push_frame_bytes_needed(
            node_config.push_bytes_max, node_config.push_entries_max,
            entry_payload_bytes_max or node_config.push_bytes_max)
        if transport_config.frame_bytes_max < frame_bytes_needed:
            raise ConfigError(f"dledger frame_bytes_max: a push may need {frame_bytes_needed} "
                              f"bytes (got {transport_config.frame_bytes_max})")
        member_ids = [peer.node_id for peer in transport_config.peers]
        self.host = DLedgerHost(transport_config.self_id, member_ids, host_config, storage,
                                self._send, monotonic_ms, rng, node_base_config)
        self.transport = PeerTransport(transport_config, listener, self.host.receive)
        self.host.use_io(self.transport)

    def start(self) -> None:
        self.transport.start(poll_thread=False)
        self.host.start()

    def stop(self) -> None:
        self.host.stop()
        self.transport.stop()

    def _send(self, target_id: str, message: Message) -> None:
        self.transport.send(target_id, message)
