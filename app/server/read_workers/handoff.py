"""A connection handed between processes: its socket's descriptor and the bytes it sent that
nobody answered yet, in one message on a Unix socket (SOCK_SEQPACKET: a message arrives whole
or not at all, with its descriptor). Other messages carry no descriptor: the settings a
worker starts with, and a worker's counts.
"""

from __future__ import annotations

import os
import socket
from typing import NamedTuple

# Bytes a handed connection may carry along (a request head and what was pipelined behind
# it); a connection with more is not handed.
CARRIED_BYTES_MAX = 128 * 1024
MESSAGE_BYTES_MAX = CARRIED_BYTES_MAX + 64
CONNECTION = b"H"  # a connection: its descriptor and carried bytes
SETTINGS = b"S"  # main -> worker, first: the settings (JSON)
COUNTS = b"N"  # worker -> main: its counts (JSON)


class Message(NamedTuple):
    kind: bytes
    payload: bytes
    fd: int | None  # a connection's descriptor (the receiver owns it)


def control_pair() -> tuple[socket.socket, socket.socket]:
    """The two ends of a control channel (the broker's, the worker's)."""
    return socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)


def send_connection(channel: socket.socket, fd: int, carried: bytes) -> bool:
    """Send a connection (a copy of its descriptor goes; the caller closes its own). False
    when the channel is full or closed, or the bytes are too many: the connection stays."""
    if len(carried) > CARRIED_BYTES_MAX:
        return False
    try:
        socket.send_fds(channel, [CONNECTION + carried], [fd])
    except (BlockingIOError, InterruptedError, OSError):
        return False
    return True


def send_message(channel: socket.socket, kind: bytes, payload: bytes) -> bool:
    try:
        channel.send(kind + payload)
    except (BlockingIOError, InterruptedError, OSError):
        return False
    return True


def receive(channel: socket.socket) -> Message | None:
    """The next message; None when none waits (non-blocking channel). EOFError when the
    other end is gone."""
    try:
        data, fds, _, _ = socket.recv_fds(channel, MESSAGE_BYTES_MAX, 1)
    except (BlockingIOError, InterruptedError):
        return None
    if not data and not fds:
        raise EOFError("the other end of the channel closed")
    if data[:1] != CONNECTION:
        for fd in fds:
            os.close(fd)
        return Message(data[:1], data[1:], None)
    if not fds:
        return None  # (a connection whose descriptor did not come: nothing to serve)
    return Message(CONNECTION, data[1:], fds[0])
