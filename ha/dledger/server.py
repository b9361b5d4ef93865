"""One DLedger member in a process: its host loop and its peer transport, started and stopped
in order. Start: the transport (messages that arrive early wait in the host's inbox), then
the host. Stop in reverse: the host first (it answers every pending append and sends no more),
then the transport (links, readers and the port closed, threads joined)."""

from __future__ import annotations

import random
import socket
import time

from ha.dledger.config import DLedgerConfig
from ha.dledger.host import DLedgerHost
from ha.dledger.host_config import HostConfig
from ha.dledger.messages import Message
from ha.dledger.storage import DLedgerStorage
from ha.dledger.transport import PeerTransport, TransportConfig


def monotonic_ms() -> float:
    return time.monotonic() * 1000


class DLedgerServer:
    def __init__(self, transport_config: TransportConfig, host_config: HostConfig,
                 storage: DLedgerStorage, listener: socket.socket,
                 rng: random.Random | None = None,
                 node_base_config: DLedgerConfig | None = None) -> None:
        """`listener` is a bound socket for the member's own port (tests bind port 0)."""
        member_ids = [peer.node_id for peer in transport_config.peers]
        self.host = DLedgerHost(transport_config.self_id, member_ids, host_config, storage,
                                self._send, monotonic_ms, rng, node_base_config)
        self.transport = PeerTransport(transport_config, listener, self.host.receive)

    def start(self) -> None:
        self.transport.start()
        self.host.start()

    def stop(self) -> None:
        self.host.stop()
        self.transport.stop()

    def _send(self, target_id: str, message: Message) -> None:
        self.transport.send(target_id, message)
