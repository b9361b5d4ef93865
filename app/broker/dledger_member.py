"""A broker's DLedger member, built from its settings (replication_mode = "dledger").

The peer port: a bound socket inherited from the parent (`dledger_listen_fd`: a test or a
supervisor binds it first, so it knows every port before any member starts and no port is
ever guessed free), else this member's own address in `dledger_peers`. The store is built
commit-limited and as a SLAVE: the only writes it takes are entries written at their
position by the member, so a direct put (a bug) is refused rather than forked off the log.
The data dir's stored membership is checked first (ha/dledger/stored/membership.py): a start
with another peer list than the group's is refused, unless `dledger_membership_override`.
"""

from __future__ import annotations

import dataclasses
import socket

from app.settings import Settings
from ha.dledger.commit_log import DLedgerCommitLog
from ha.dledger.stored.membership import check_membership, membership_of
from store import BrokerRole, MessageStore


def build_dledger(settings: Settings) -> DLedgerCommitLog:
    store_config = dataclasses.replace(settings.to_store_config(), broker_role=BrokerRole.SLAVE)
    store = MessageStore(store_config, commit_limited=True)
    assert settings.dledger_self_id is not None
    check_membership(store.paths.dledger_membership,
                     membership_of(settings.dledger_group, settings.dledger_self_id,
                                   settings.dledger_peer_list),
                     override=settings.dledger_membership_override)
    listener = dledger_listener(settings)
    try:
        return DLedgerCommitLog(store, settings.to_dledger_transport_config(),
                                settings.to_dledger_host_config(), listener)
    except BaseException:
        listener.close()
        raise


def dledger_listener(settings: Settings) -> socket.socket:
    if settings.dledger_listen_fd is not None:
        # family and type come from the descriptor itself (Python >= 3.7)
        return socket.socket(fileno=settings.dledger_listen_fd)
    self_peer = next(peer for peer in settings.dledger_peer_list
                     if peer.node_id == settings.dledger_self_id)
    family = socket.AF_INET6 if ":" in self_peer.connect_host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((self_peer.connect_host, self_peer.port))
    except BaseException:
        listener.close()
        raise
    return listener


def leader_http_address(settings: Settings, leader_id: str | None) -> str | None:
    """The current leader's gateway URL (None while no leader is known)."""
    if leader_id is None:
        return None
    return settings.dledger_http_urls().get(leader_id)
