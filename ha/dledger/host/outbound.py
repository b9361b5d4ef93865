"""The connection a DLedger member sends on to one peer: a bounded queue of messages, a dialing
thread, and the bytes in flight, written by the transport's I/O thread.

Two threads, each with its own part:
- The dialing thread connects and runs the handshake (blocking, with its deadlines), then
  hands the connection to the I/O thread (`PeerTransport.adopt_outbound`) and waits until the
  connection is lost to dial again, backing off from `reconnect_backoff_min_ms` doubling to
  `reconnect_backoff_max_ms` while dials fail.
- The I/O thread (the host's thread in a broker) owns the connected socket: it turns queued
  messages into tagged frames and writes them without blocking (`flush`), and loses the
  connection on an error, an EOF or a write that made no progress for `send_timeout_ms`.

Bounds: `outbound_queue_max` messages wait per peer (when full the OLDEST is dropped: Raft
tolerates loss, the newest carries the latest term, commit and log position, and the leader
re-sends what a lost push held); frames are built only while fewer than `frame_bytes_max`
bytes wait to be written, so the bytes in flight stay under twice that; a message that
encodes to more than `frame_bytes_max` is dropped and counted (a peer would refuse it). The
bytes of a lost connection are lost with it (a push's answer never comes: the leader re-sends
after its push timeout).
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections import deque
from collections.abc import Callable

from ha.auth import FrameTagger
from ha.dledger.core.messages import Message
from ha.dledger.core.peers import Peer
from ha.dledger.host.handshake import dial
from ha.dledger.host.transport_config import TransportConfig
from ha.dledger.host.wire import encode_frame, encode_message
from ha.protocol import ProtocolError

log = logging.getLogger(__name__)

_JOIN_TIMEOUT_S = 5.0


class OutboundLink:
    def __init__(self, peer: Peer, config: TransportConfig, stopping: threading.Event,
                 adopt: Callable[[OutboundLink], None] = lambda link: None) -> None:
        """`adopt(link)` hands a freshly connected link to the I/O thread (any thread calls it)."""
        self.peer = peer
        self._config = config
        self._stopping = stopping
        self._adopt = adopt
        self._lock = threading.Lock()  # the queue (any thread) and the dial handover
        self._queue: deque[Message] = deque()
        self._lost = threading.Event()  # set: the dialing thread may dial (again)
        self._lost.set()
        # Not yet adopted: the socket, its tagger, whether the peer reads the fork marks.
        self._dialed: tuple[socket.socket, FrameTagger, bool] | None = None
        # The I/O thread's part.
        self.sock: socket.socket | None = None
        self._tagger: FrameTagger | None = None
        self.fork_marks = False  # the peer of this connection reads them (handshake.py)
        self._out = bytearray()
        self._progress_at_s = 0.0
        self.connected = False
        self.sent_count = 0
        self.dropped_count = 0
        self.oversize_count = 0
        self.connect_count = 0
        self.last_error = ""
        # Not a ServiceThread: blocks in connect and handshake, then waits for a loss (`_lost`).
        self._thread = threading.Thread(target=self._dial_loop,
                                        name=f"dledger-dial-{peer.node_id}", daemon=True)

    # ----- any thread -----

    def start(self) -> None:
        self._thread.start()

    def offer(self, message: Message) -> None:
        with self._lock:
            if len(self._queue) >= self._config.outbound_queue_max:
                self._queue.popleft()
                self.dropped_count += 1
            self._queue.append(message)

    def _take_batch(self) -> list[Message]:
        with self._lock:
            batch = list(self._queue)
            self._queue.clear()
            return batch

    def stop(self) -> None:
        """After the I/O thread has stopped (`stopping` is set): close whatever socket is
        left, join the dialer."""
        self._lost.set()
        with self._lock:
            dialed, self._dialed = self._dialed, None
        if dialed is not None:
            close_socket(dialed[0])
        self._thread.join(_JOIN_TIMEOUT_S)
        self._release()

    # ----- the I/O thread -----

    def take_dialed(self) -> bool:
        """Adopt the connection the dialer handed over; False when there is none (stopped)."""
        with self._lock:
            dialed, self._dialed = self._dialed, None
        if dialed is None:
            return False
        self.sock, self._tagger, self.fork_marks = dialed
        self.sock.setblocking(False)
        self._out.clear()
        self._progress_at_s = time.monotonic()
        self.connected = True
        self.connect_count += 1
        return True

    @property
    def wants_write(self) -> bool:
        return bool(self._out)

    def has_queued(self) -> bool:
        with self._lock:
            return bool(self._queue)

    def flush(self) -> str | None:
        """Frame what is queued and write what the socket takes now; the error that loses the
        connection, or None."""
        if self.sock is None:
            return None
        self._frame_queued()
        if not self._out:
            self._progress_at_s = time.monotonic()
            return None
        try:
            written = self.sock.send(self._out)
        except BlockingIOError:
            written = 0
        except OSError as error:
            return f"{type(error).__name__}: {error}"
        if written:
            del self._out[:written]
            self._progress_at_s = time.monotonic()
        return None

    def stalled(self, now_s: float) -> bool:
        """Bytes have waited `send_timeout_ms` without any being taken: the peer stopped
        reading (or the path is gone)."""
        return bool(self._out) and \
            now_s - self._progress_at_s > self._config.send_timeout_ms / 1000

    def lose(self, reason: str) -> None:
        """Drop the connection (its unwritten bytes with it) and let the dialer dial again;
        the transport has unregistered the socket."""
        self.last_error = reason
        log.info("dledger: link to %s: %s", self.peer.node_id, reason)
        self._release()
        self._lost.set()

    def _release(self) -> None:
        sock, self.sock = self.sock, None
        self.connected = False
        self._tagger = None
        self._out.clear()
        close_socket(sock)

    def _frame_queued(self) -> None:
        tagger = self._tagger
        assert tagger is not None
        bound = self._config.frame_bytes_max
        while len(self._out) < bound:
            with self._lock:
                if not self._queue:
                    return
                message = self._queue.popleft()
            body = encode_message(message, fork_marks=self.fork_marks)
            if len(body) > bound:
                self.oversize_count += 1
                log.warning("dledger: dropped a %d byte message to %s (over frame_bytes_max)",
                            len(body), self.peer.node_id)
                continue
            self._out += encode_frame(body, tagger.tag(body))
            self.sent_count += 1

    # ----- the dialing thread -----

    def _dial_loop(self) -> None:
        backoff_ms = self._config.reconnect_backoff_min_ms
        while not self._stopping.is_set():
            self._lost.wait()
            if self._stopping.is_set():
                return
            try:
                dialed = self._dial()
            except (OSError, ProtocolError) as error:
                self.last_error = f"{type(error).__name__}: {error}"
                log.info("dledger: link to %s: %s", self.peer.node_id, self.last_error)
                self._stopping.wait(backoff_ms / 1000)
                backoff_ms = min(2 * backoff_ms, self._config.reconnect_backoff_max_ms)
                continue
            backoff_ms = self._config.reconnect_backoff_min_ms
            with self._lock:
                if self._stopping.is_set():
                    close_socket(dialed[0])
                    return
                self._lost.clear()
                self._dialed = dialed
            self._adopt(self)
            # Wait for the loss of this connection before dialing again (no reconnect storm
            # when a peer drops every connection at once: the minimum backoff first).
            self._lost.wait()
            self._stopping.wait(backoff_ms / 1000)

    def _dial(self) -> tuple[socket.socket, FrameTagger, bool]:
        config = self._config
        sock = socket.create_connection((self.peer.connect_host, self.peer.port),
                                        timeout=config.connect_timeout_ms / 1000)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            deadline_s = time.monotonic() + config.handshake_timeout_ms / 1000
            tagger, fork_marks = dial(sock, config.identity, self.peer.node_id, deadline_s)
        except BaseException:
            close_socket(sock)
            raise
        return sock, tagger, fork_marks


def shutdown_socket(sock: socket.socket) -> None:
    """End both directions without releasing the descriptor: the thread that owns the socket
    sees the end and closes it (another thread must not close a socket it may be using)."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


def close_socket(sock: socket.socket | None) -> None:
    if sock is None:
        return
    shutdown_socket(sock)
    sock.close()
