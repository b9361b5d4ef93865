"""Accept every waiting connection at once, not one per event-loop turn.

libuv (since 1.45, bundled by uvloop) accepts ONE connection each time the listening socket
polls readable. On a loop that is CPU-bound (batch produce: every ready request runs in each
turn, so a turn lasts tens of milliseconds), 64 connections opened together wait in the
kernel's accept queue for up to 64 turns: seconds. A client's request timeout then fires
before its connection is even accepted, it reconnects and queues again (bench/fair_batches.py
shows it on a bare app: a few connections answered once in 3 s, the rest a dozen times; the
asyncio loop, which accepts up to the backlog per readiness, answers each in turn).

`EagerAccept` watches a duplicate of the listening socket and, each time it is readable,
accepts up to ACCEPTS_PER_TURN_MAX connections and hands each to the loop as the server would
(`connect_accepted_socket`, TLS included). The server's own watcher still runs; whichever
accepts first wins, the other gets EAGAIN. The connection cap, deadlines and limits stay
where they are: in the protocol (app/server/http_protocol.py), which counts every connection.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import ssl
from collections.abc import Callable

log = logging.getLogger(__name__)

# Bounded: one readiness never accepts more than this (the rest wait for the next turn).
ACCEPTS_PER_TURN_MAX = 256
# Errors of one pending connection (it went away before it was accepted): accept the next.
_SKIPPED_ERRNOS = frozenset({errno.ECONNABORTED, errno.EPROTO, errno.EPERM})
# After any other accept error (out of descriptors: EMFILE, ENFILE, ENOBUFS) the listener stays
# readable, so watching it again at once would spin the loop and flood the log: pause first.
ACCEPT_ERROR_PAUSE_S = 0.1


class EagerAccept:
    def __init__(self, listener: socket.socket, protocol_factory: Callable[[], asyncio.Protocol],
                 ssl_context: ssl.SSLContext | None,
                 error_pause_s: float = ACCEPT_ERROR_PAUSE_S) -> None:
        # A duplicate descriptor of the same listening socket: the loop can watch it beside
        # the server's own registration of the original.
        self._socket = socket.socket(listener.family, listener.type, fileno=listener.dup().detach())
        self._socket.setblocking(False)
        self._protocol_factory = protocol_factory
        self._ssl_context = ssl_context
        self._loop: asyncio.AbstractEventLoop | None = None
        self._error_pause_s = error_pause_s
        self._paused: asyncio.TimerHandle | None = None
        # Connections being set up (TLS handshakes), each with its socket to close on failure.
        self._handshakes: dict[asyncio.Task[object], socket.socket] = {}

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        loop.add_reader(self._socket.fileno(), self._accept_waiting)

    def stop(self) -> None:
        """Stop accepting (shutdown: the server stops too); connections already made stay."""
        if self._paused is not None:
            self._paused.cancel()
            self._paused = None
        if self._loop is not None:
            self._loop.remove_reader(self._socket.fileno())
            self._loop = None
        self._socket.close()

    def _accept_waiting(self) -> None:
        for _ in range(ACCEPTS_PER_TURN_MAX):
            try:
                connection, _ = self._socket.accept()
            except (BlockingIOError, InterruptedError):
                return  # the queue is empty (or the server's watcher took the last one)
            except OSError as error:
                if error.errno in _SKIPPED_ERRNOS:
                    continue
                # Out of descriptors (EMFILE, ENFILE, ENOBUFS): the connection stays queued
                # and is retried after a pause; the fd budget keeps this rare.
                log.warning("accept failed: %s; retrying in %s s", error, self._error_pause_s)
                self._pause()
                return
            self._hand_over(connection)

    def _pause(self) -> None:
        assert self._loop is not None
        self._loop.remove_reader(self._socket.fileno())
        self._paused = self._loop.call_later(self._error_pause_s, self._resume)

    def _resume(self) -> None:
        self._paused = None
        if self._loop is not None:
            self._loop.add_reader(self._socket.fileno(), self._accept_waiting)

    def _hand_over(self, connection: socket.socket) -> None:
        assert self._loop is not None
        connection.setblocking(False)
        connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        task: asyncio.Task[object] = self._loop.create_task(self._loop.connect_accepted_socket(
            self._protocol_factory, connection, ssl=self._ssl_context))
        self._handshakes[task] = connection
        task.add_done_callback(self._handed_over)

    def _handed_over(self, task: asyncio.Task[object]) -> None:
        connection = self._handshakes.pop(task)
        if task.cancelled() or task.exception() is not None:
            # A TLS handshake that failed, or a peer gone before it was set up.
            log.debug("connection not set up: %s", None if task.cancelled() else task.exception())
            connection.close()
