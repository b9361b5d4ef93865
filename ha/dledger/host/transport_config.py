"""Settings of a DLedger member's peer transport: who it is, whom it talks to, and its bounds.

Apart from the transport (ha/dledger/host/transport.py) so that the outbound links, which the
transport owns, read their bounds without importing it.
"""

from __future__ import annotations

from dataclasses import dataclass

from ha.dledger.core.peers import Peer
from ha.dledger.host.handshake import Identity
from store.errors import ConfigError


@dataclass(frozen=True, slots=True)
class TransportConfig:
    group: str
    self_id: str
    peers: tuple[Peer, ...]  # every member, this one included
    secret: bytes | None = None
    # Without a secret anyone who reaches the port can vote and push entries: ask by name.
    allow_unauthenticated: bool = False
    frame_bytes_max: int = 8 << 20
    outbound_queue_max: int = 4096
    handshakes_max: int = 8
    handshake_timeout_ms: int = 2000
    connect_timeout_ms: int = 1000
    send_timeout_ms: int = 5000
    reconnect_backoff_min_ms: int = 20
    reconnect_backoff_max_ms: int = 1000

    def __post_init__(self) -> None:
        ids = {peer.node_id for peer in self.peers}
        checks = [
            (self.self_id in ids, "self_id", "must be one of the peers"),
            (self.secret is not None or self.allow_unauthenticated, "secret",
             "is required (or set allow_unauthenticated to run the DLedger port open)"),
            (self.secret is None or len(self.secret) >= 8, "secret", "must be >= 8 bytes"),
            (self.frame_bytes_max >= 1024, "frame_bytes_max", "must be >= 1024"),
            (self.outbound_queue_max >= 1, "outbound_queue_max", "must be >= 1"),
            (self.handshakes_max >= 1, "handshakes_max", "must be >= 1"),
            (self.handshake_timeout_ms > 0, "handshake_timeout_ms", "must be > 0"),
            (self.connect_timeout_ms > 0, "connect_timeout_ms", "must be > 0"),
            (self.send_timeout_ms > 0, "send_timeout_ms", "must be > 0"),
            (0 < self.reconnect_backoff_min_ms <= self.reconnect_backoff_max_ms,
             "reconnect_backoff_min_ms", "must be in (0, reconnect_backoff_max_ms]"),
        ]
        for ok, name, rule in checks:
            if not ok:
                raise ConfigError(f"dledger {name}: {rule} (got {getattr(self, name)!r})")

    @property
    def identity(self) -> Identity:
        return Identity(self.group, self.self_id, self.secret)
