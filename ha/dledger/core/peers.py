"""DLedger's peer string: `n0-127.0.0.1:20911;n1-127.0.0.1:20912;n2-127.0.0.1:20913`.

Each member is `<id>-<host>:<port>`, members joined by `;` (a trailing `;` is accepted, as
DLedger's Java `split(";")` drops it). An id is 1 to 32 ASCII letters, digits or `_`: it never
holds `-`, so the first `-` ends it and a host name may contain dashes. An IPv6 host is written
in brackets (`n0-[::1]:20911`). Ids and addresses are unique within a group.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from store.errors import ConfigError

PEER_ID_SIZE_MAX = 32
_ID = re.compile(r"[A-Za-z0-9_]{1,32}")
_HOST = re.compile(r"\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.\-]+")
_PORT = re.compile(r"[0-9]{1,5}")


@dataclass(frozen=True, slots=True)
class Peer:
    node_id: str
    host: str  # as written, brackets included for IPv6
    port: int

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def connect_host(self) -> str:
        """The host for socket.connect (no brackets)."""
        return self.host[1:-1] if self.host.startswith("[") else self.host


def is_valid_id(node_id: str) -> bool:
    return _ID.fullmatch(node_id) is not None


def parse_peer(text: str) -> Peer:
    node_id, dash, address = text.partition("-")
    if not dash:
        raise ConfigError(f"dledger peers: {text!r} is not <id>-<host>:<port>")
    if not is_valid_id(node_id):
        raise ConfigError(f"dledger peers: id {node_id!r} in {text!r} must be 1 to "
                          f"{PEER_ID_SIZE_MAX} letters, digits or '_'")
    host, colon, port_text = address.rpartition(":")
    if not colon or _HOST.fullmatch(host) is None:
        raise ConfigError(f"dledger peers: address {address!r} of {node_id} is not host:port")
    if _PORT.fullmatch(port_text) is None or not 0 < int(port_text) < 65536:
        raise ConfigError(f"dledger peers: port {port_text!r} of {node_id} must be in "
                          "[1, 65535]")
    return Peer(node_id, host, int(port_text))


def parse_peers(text: str) -> tuple[Peer, ...]:
    """Every member of the group, in the order written; ConfigError names what is wrong."""
    parts = text.split(";")
    if parts and parts[-1] == "":
        parts.pop()
    if parts in ([], [""]):
        raise ConfigError("dledger peers: empty (expected n0-host:port;n1-host:port;...)")
    peers = tuple(parse_peer(part) for part in parts)
    _check_unique([peer.node_id for peer in peers], "id")
    _check_unique([peer.address for peer in peers], "address")
    return peers


def format_peers(peers: tuple[Peer, ...]) -> str:
    return ";".join(f"{peer.node_id}-{peer.address}" for peer in peers)


def _check_unique(values: list[str], what: str) -> None:
    seen: set[str] = set()
    for value in values:
        if value in seen:
            raise ConfigError(f"dledger peers: {what} {value!r} appears twice")
        seen.add(value)
