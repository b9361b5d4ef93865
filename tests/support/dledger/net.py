"""Loopback sockets and the shared settings of the DLedger transport and cluster tests."""

from __future__ import annotations

import socket

SECRET = b"dledger-test-secret"
WAIT_S = 30.0  # generous: the suite shares two cores with other work


def bound_listener(port: int = 0) -> socket.socket:
    """A loopback listener for one member; SO_REUSEADDR so that a restart binds the same port
    while connections of the previous run wind down."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    return listener
