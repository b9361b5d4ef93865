"""The peer transport of a DLedger member: one listening port, one outbound link per peer.

Each member sends on its own outbound connection to each peer and reads on the connections its
peers opened to it, so every connection carries one direction only (handshake apart:
ha/dledger/host/handshake.py).

Threads. One I/O thread does all the steady work, without blocking: it reads every inbound
connection, hands each message to `deliver` (the host's inbox) and writes every outbound one
(`poll`). In a broker that thread is the host's own (ha/dledger/host/server.py): a push, its
answer and the commit it brings pass no thread on their way, where a reading and a sending
thread per link cost two thread switches a hop (each a wait for a core on a busy machine).
Without a host (tests), `start(poll_thread=True)` runs a thread of its own. Only the blocking
and rare steps run elsewhere: the accept thread, one thread per handshake (its deadline
bounds it), one dialing thread per peer (ha/dledger/host/outbound.py). They hand the connections
they made to the I/O thread (`adopt_*`) and never close a socket it owns (they shut it down;
it sees the end and closes it).

Bounds:
- Outbound: ha/dledger/host/outbound.py (a bounded queue per peer dropping its oldest message,
  frames built only while little is unwritten, a write with no progress for
  `send_timeout_ms` loses the connection, reconnects backing off).
- Inbound: at most `handshakes_max` connections in the handshake; a new one past that drops
  the oldest (so idle sockets cannot starve a member), and each has `handshake_timeout_ms`.
  After the handshake, one reading connection per peer: a newer one replaces the older.
- Garbage, an oversize frame, a bad tag or a message naming another sender closes that one
  connection (logged and counted); every other connection goes on.
"""

from __future__ import annotations

import logging
import selectors
import socket
import threading
import time
from collections import deque
from collections.abc import Callable

from ha.dledger.core.messages import Message
from ha.dledger.host.handshake import accept
from ha.dledger.host.outbound import OutboundLink, close_socket, shutdown_socket
from ha.dledger.host.transport_config import TransportConfig
from ha.dledger.host.wire import FrameReader, WireError, decode_message
from ha.protocol import ProtocolError
from store.service import ServiceThread

log = logging.getLogger(__name__)

_RECV_SIZE_BYTES = 256 * 1024
_ACCEPT_POLL_S = 0.2
_JOIN_TIMEOUT_S = 5.0
_OWN_POLL_S = 1.0  # the own I/O thread's longest wait (it is woken for any work)


class InboundConnection:
    """One accepted connection: its handshake on a thread of its own, then its frames read by
    the I/O thread."""

    def __init__(self, transport: PeerTransport, sock: socket.socket, address: str) -> None:
        self.sock = sock
        self.address = address
        self.peer_id = ""
        self.reader: FrameReader | None = None
        self._transport = transport
        # Not a ServiceThread: one blocking handshake bounded by its deadline, not a loop.
        self.thread = threading.Thread(target=self._handshake,
                                       name=f"dledger-handshake-{address}", daemon=True)

    def _handshake(self) -> None:
        transport = self._transport
        config = transport.config
        try:
            deadline_s = time.monotonic() + config.handshake_timeout_ms / 1000
            self.peer_id, tagger, proof = accept(self.sock, config.identity,
                                                 transport.member_ids, deadline_s)
            # Kept first, proof second: once the dialer has the proof it sends; a connection
            # evicted in between would swallow those messages (a seen flake: a vote lost).
            if not transport.handshake_done(self):
                close_socket(self.sock)
                return
            self.sock.sendall(proof)
            self.reader = FrameReader(config.frame_bytes_max, tagger.tag_size, tagger.check)
        except ProtocolError as error:
            transport.refused(self, error)
            transport.closed(self)
            return
        except OSError:
            transport.closed(self)  # evicted, replaced, stopped, or reset by the peer
            return
        transport.adopt_inbound(self)

    def read(self) -> list[Message] | None:
        """On the I/O thread: the messages that arrived, or None at the end of the stream.
        Raises ProtocolError on garbage (the caller closes the connection)."""
        assert self.reader is not None
        try:
            data = self.sock.recv(_RECV_SIZE_BYTES)
        except BlockingIOError:
            return []
        if not data:
            return None
        messages = [decode_message(body) for body in self.reader.feed(data)]
        for message in messages:
            if message.source_id != self.peer_id:
                raise WireError(f"a message from {message.source_id!r} on {self.peer_id!r}'s "
                                "connection")
        return messages


class PeerTransport:
    def __init__(self, config: TransportConfig, listener: socket.socket,
                 deliver: Callable[[Message], None]) -> None:
        """`listener` is bound (tests bind port 0); the transport listens and closes it.
        `deliver(message)` runs on the I/O thread and must not block."""
        self.config = config
        self.deliver = deliver
        self.member_ids = frozenset(peer.node_id for peer in config.peers)
        self._listener = listener
        self._stopping = threading.Event()
        self._lock = threading.Lock()  # connections' bookkeeping and the adoptions
        self._handshaking: deque[InboundConnection] = deque()
        self._inbound: dict[str, InboundConnection] = {}
        self._threads: list[threading.Thread] = []
        self._adoptions: deque[InboundConnection | OutboundLink] = deque()
        self.links = {peer.node_id: OutboundLink(peer, config, self._stopping,
                                                 self.adopt_outbound)
                      for peer in config.peers if peer.node_id != config.self_id}
        self.refused_count = 0
        self.evicted_count = 0
        # The I/O thread's part: the selector, what each registered socket waits for, the
        # connections it reads.
        self._selector = selectors.DefaultSelector()
        self._wake_reader, self._wake_writer = socket.socketpair()
        self._wake_reader.setblocking(False)
        self._wake_writer.setblocking(False)
        self._wake_pending = False
        self._selector.register(self._wake_reader, selectors.EVENT_READ, None)
        self._masks: dict[OutboundLink, int] = {}
        self._reading: set[InboundConnection] = set()
        self._io_thread_id: int | None = None
        self._poll_thread: _PollThread | None = None
        self._accept_thread = _AcceptThread(self)

    @property
    def listen_port(self) -> int:
        return int(self._listener.getsockname()[1])

    def start(self, poll_thread: bool = True) -> None:
        """`poll_thread=False`: the caller's thread calls `poll` (the host's, in a broker)."""
        self._listener.listen(len(self.links) + self.config.handshakes_max)
        self._listener.settimeout(_ACCEPT_POLL_S)
        self._accept_thread.start()
        for link in self.links.values():
            link.start()
        if poll_thread:
            self._poll_thread = _PollThread(self)
            self._poll_thread.start()

    def send(self, target_id: str, message: Message) -> None:
        """Queue a message for a peer (any thread; the I/O thread writes it at its next poll)."""
        self.links[target_id].offer(message)
        if threading.get_ident() != self._io_thread_id:
            self.wake()

    def wake(self) -> None:
        """End the I/O thread's wait (any thread)."""
        if self._wake_pending or threading.get_ident() == self._io_thread_id:
            return
        self._wake_pending = True
        try:
            self._wake_writer.send(b"\0")
        except OSError:
            pass  # full (a wake is already there) or closed (stopped)

    def stop(self) -> None:
        """After the I/O thread stopped polling (or with the own thread, which this stops)."""
        self._stopping.set()
        if self._poll_thread is not None:
            self._poll_thread.stop()  # woken through `wake`, ends within its round
        self._accept_thread.stop()  # ends within one accept timeout
        self._listener.close()
        for link in self.links.values():
            link.stop()
        with self._lock:
            inbound = list(self._handshaking) + list(self._inbound.values())
            inbound += [item for item in self._adoptions if isinstance(item, InboundConnection)]
            self._adoptions.clear()
        for connection in inbound + list(self._reading):
            close_socket(connection.sock)
        for thread in self._threads:
            thread.join(_JOIN_TIMEOUT_S)
        self._selector.close()
        self._wake_reader.close()
        self._wake_writer.close()

    def connected_peer_ids(self) -> set[str]:
        with self._lock:
            return set(self._inbound)

    # ----- the I/O thread -----

    def poll(self, timeout_s: float) -> None:
        """Write what is queued, wait up to `timeout_s` for sockets or a wake, read what came
        (delivering each message), and lose connections that stalled. One thread only."""
        self._io_thread_id = threading.get_ident()
        self._adopt_handed_over()
        self._flush_links()
        for key, mask in self._selector.select(max(0.0, timeout_s)):
            target = key.data
            if target is None:
                self._drain_wake()
            elif isinstance(target, InboundConnection):
                self._read(target)
            elif mask & selectors.EVENT_READ:
                self._outbound_readable(target)
            elif mask & selectors.EVENT_WRITE:
                self._flush(target)
        self._adopt_handed_over()
        now_s = time.monotonic()
        for link in self.links.values():
            if link.sock is not None and link.stalled(now_s):
                self._lose(link, f"no bytes taken for {self.config.send_timeout_ms} ms")

    def flush(self) -> None:
        """Write what is queued on every link now (the I/O thread only, between polls)."""
        self._flush_links()

    def _drain_wake(self) -> None:
        """Drain first, clear the flag second: cleared first, a wake written meanwhile could be
        drained with the rest and leave the flag set with no byte behind it, and every later
        wake would be skipped (the host then ran only on socket events and ticks). Cleared
        after, a waker that saw the flag set had queued its work before: the round that
        follows this poll sees it."""
        try:
            while self._wake_reader.recv(4096):
                pass
        except OSError:
            pass  # BlockingIOError: drained
        self._wake_pending = False

    def _adopt_handed_over(self) -> None:
        while True:
            with self._lock:
                if not self._adoptions:
                    return
                item = self._adoptions.popleft()
            if isinstance(item, OutboundLink):
                if item.take_dialed():
                    assert item.sock is not None
                    self._selector.register(item.sock, selectors.EVENT_READ, item)
                    self._masks[item] = selectors.EVENT_READ
            else:
                item.sock.setblocking(False)
                self._selector.register(item.sock, selectors.EVENT_READ, item)
                self._reading.add(item)

    def _read(self, connection: InboundConnection) -> None:
        try:
            messages = connection.read()
        except ProtocolError as error:
            self.refused(connection, error)
            messages = None
        except OSError:
            messages = None
        if messages is None:
            self._selector.unregister(connection.sock)
            self._reading.discard(connection)
            self.closed(connection)
            return
        for message in messages:
            self.deliver(message)

    def _flush_links(self) -> None:
        for link in self.links.values():
            if link.sock is not None and (link.wants_write or link.has_queued()):
                self._flush(link)

    def _flush(self, link: OutboundLink) -> None:
        error = link.flush()
        if error is not None:
            self._lose(link, error)
            return
        mask = selectors.EVENT_READ | (selectors.EVENT_WRITE if link.wants_write else 0)
        if self._masks.get(link) != mask:
            assert link.sock is not None
            self._selector.modify(link.sock, mask, link)
            self._masks[link] = mask

    def _outbound_readable(self, link: OutboundLink) -> None:
        """The acceptor never sends after the handshake: an end or any byte loses the link."""
        assert link.sock is not None
        try:
            data = link.sock.recv(1024)
        except BlockingIOError:
            return
        except OSError as error:
            self._lose(link, f"{type(error).__name__}: {error}")
            return
        self._lose(link, "the peer closed the connection" if not data
                   else f"the peer sent {len(data)} bytes on a send-only connection")

    def _lose(self, link: OutboundLink, reason: str) -> None:
        if link.sock is not None:
            self._selector.unregister(link.sock)
        self._masks.pop(link, None)
        link.lose(reason)

    # ----- other threads: handovers and the inbound bookkeeping -----

    def adopt_outbound(self, link: OutboundLink) -> None:
        with self._lock:
            self._adoptions.append(link)
        self.wake()

    def adopt_inbound(self, connection: InboundConnection) -> None:
        with self._lock:
            self._adoptions.append(connection)
        self.wake()

    def accept_one(self) -> bool:
        """On the accept thread: wait up to the accept timeout for a connection and start its
        handshake; False once the listener failed (closed: the thread ends)."""
        try:
            sock, address = self._listener.accept()
        except TimeoutError:
            return True
        except OSError:
            return False
        connection = InboundConnection(self, sock, f"{address[0]}:{address[1]}")
        with self._lock:
            if len(self._handshaking) >= self.config.handshakes_max:
                oldest = self._handshaking.popleft()
                self.evicted_count += 1
                shutdown_socket(oldest.sock)  # its handshake thread ends and closes it
            self._handshaking.append(connection)
            self._threads = [t for t in self._threads if t.is_alive()]
            self._threads.append(connection.thread)
        connection.thread.start()
        return True

    def handshake_done(self, connection: InboundConnection) -> bool:
        with self._lock:
            if connection not in self._handshaking:
                return False  # evicted while it finished
            self._handshaking.remove(connection)
            older = self._inbound.get(connection.peer_id)
            self._inbound[connection.peer_id] = connection
        if older is not None:
            shutdown_socket(older.sock)  # its owner sees the end and closes it
        log.info("dledger: %s connected from %s", connection.peer_id, connection.address)
        return True

    def refused(self, connection: InboundConnection, error: ProtocolError) -> None:
        # Logged before it is counted: whoever sees the count can find the line.
        log.warning("dledger: closed the connection from %s%s: %s", connection.address,
                    f" ({connection.peer_id})" if connection.peer_id else "", error)
        with self._lock:
            self.refused_count += 1

    def closed(self, connection: InboundConnection) -> None:
        with self._lock:
            if connection in self._handshaking:
                self._handshaking.remove(connection)
            if self._inbound.get(connection.peer_id) is connection:
                del self._inbound[connection.peer_id]
        close_socket(connection.sock)


class _AcceptThread(ServiceThread):
    """Accepts peers' connections (as the HA service's `ha-accept`); each round is one accept,
    bounded by the listener's timeout. Ends when the listener fails (stop closes it)."""

    def __init__(self, transport: PeerTransport) -> None:
        super().__init__()
        self.name = f"dledger-accept-{transport.config.self_id}"
        self._transport = transport

    def run_once(self) -> float:
        if not self._transport.accept_one():
            self._stop_event.set()  # the listener is gone: no more rounds
        return 0.0  # the accept timeout is the loop's bound


class _PollThread(ServiceThread):
    """The I/O thread of a transport without a host (tests): each round is one `poll`, which
    waits in the selector and is woken through the transport's `wake`."""

    def __init__(self, transport: PeerTransport) -> None:
        super().__init__()
        self.name = f"dledger-io-{transport.config.self_id}"
        self._transport = transport

    def wake(self) -> None:
        self._transport.wake()

    def run_once(self) -> float:
        self._transport.poll(_OWN_POLL_S)
        return 0.0  # the poll's own wait is the loop's bound
