"""DLedger's peer string: members parsed with ids, hosts and ports; bad input named."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ha.dledger.core.peers import Peer, format_peers, parse_peers
from store.errors import ConfigError


def test_parses_dledger_peer_string() -> None:
    """The string DLedger writes gives each member's id, host and port in order."""
    peers = parse_peers("n0-127.0.0.1:20911;n1-127.0.0.1:20912;n2-my-host.example:20913;")
    assert peers == (Peer("n0", "127.0.0.1", 20911), Peer("n1", "127.0.0.1", 20912),
                     Peer("n2", "my-host.example", 20913))
    assert peers[2].address == "my-host.example:20913"


def test_ipv6_host_in_brackets() -> None:
    """An IPv6 host is written in brackets and connected to without them."""
    (peer,) = parse_peers("n0-[::1]:20911")
    assert (peer.host, peer.port, peer.connect_host) == ("[::1]", 20911, "::1")


@pytest.mark.parametrize(("text", "names"), [
    ("", "empty"),
    (";", "empty"),
    ("n0", "is not <id>-<host>:<port>"),
    ("-127.0.0.1:1", "id ''"),
    ("n 0-127.0.0.1:1", "id 'n 0'"),
    ("n0-127.0.0.1", "is not host:port"),
    ("n0-:20911", "is not host:port"),
    ("n0-127.0.0.1:0", "port '0'"),
    ("n0-127.0.0.1:65536", "port '65536'"),
    ("n0-127.0.0.1:http", "port 'http'"),
    ("n0-127.0.0.1:1;;n1-127.0.0.1:2", "is not <id>-<host>:<port>"),
    ("n0-127.0.0.1:1;n0-127.0.0.1:2", "id 'n0' appears twice"),
    ("n0-127.0.0.1:1;n1-127.0.0.1:1", "address '127.0.0.1:1' appears twice"),
    ("n0-a b:1", "is not host:port"),
    ("x" * 33 + "-127.0.0.1:1", "must be 1 to 32"),
])
def test_bad_peer_strings_are_named(text: str, names: str) -> None:
    """Each malformed peer string is refused with a message naming the bad part."""
    with pytest.raises(ConfigError, match="dledger peers") as error:
        parse_peers(text)
    assert names in str(error.value)


_ids = st.text("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_",
               min_size=1, max_size=32)
_hosts = st.one_of(
    st.from_regex(r"[a-z0-9]([a-z0-9\-]{0,20}[a-z0-9])?(\.[a-z0-9]{1,10}){0,3}", fullmatch=True),
    st.ip_addresses(v=4).map(str),
    st.ip_addresses(v=6).map(lambda address: f"[{address}]"),
)
_peers = st.lists(st.tuples(_ids, _hosts, st.integers(1, 65535)), min_size=1, max_size=9,
                  unique_by=(lambda peer: peer[0], lambda peer: (peer[1], peer[2])))


@given(_peers)
def test_round_trip(members: list[tuple[str, str, int]]) -> None:
    """Any valid group formats to a string that parses back to the same members."""
    peers = tuple(Peer(node_id, host, port) for node_id, host, port in members)
    assert parse_peers(format_peers(peers)) == peers
