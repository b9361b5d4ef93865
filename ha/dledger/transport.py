"""The peer transport of a DLedger member: one listening port, one outbound link per peer.

Each member sends on its own outbound connection to each peer and reads on the connections its
peers opened to it, so every connection carries one direction only (handshake apart:
ha/dledger/handshake.py). Delivered messages go to `deliver`, the host's inbox; it is called
on the reading threads and must not block.

Bounds:
- Outbound: a queue of `outbound_queue_max` messages per peer. When it is full the OLDEST
  message is dropped: Raft tolerates loss, the newest message carries the latest term, commit
  and log position, and the leader re-sends what a lost push held (push timeout, COMPARE), so
  a stale push or vote answer is the one worth losing. A message that encodes to more than
  `frame_bytes_max` is dropped too (and counted): a peer would refuse it anyway.
- Reconnects back off from `reconnect_backoff_min_ms` doubling to `reconnect_backoff_max_ms`.
- Inbound: at most `handshakes_max` connections in the handshake; a new one past that closes
  the oldest (so idle sockets cannot starve a member), and each has `handshake_timeout_ms`.
  After the handshake, one reading connection per peer: a newer one replaces the older.
- Garbage, an oversize frame, a bad tag or a message naming another sender closes that one
  connection (logged and counted); every other connection goes on.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from ha.dledger.handshake import Identity, accept, dial
from ha.dledger.messages import Message
from ha.dledger.peers import Peer
from ha.dledger.wire import FrameReader, WireError, decode_message, encode_frame, encode_message
from ha.protocol import ProtocolError
from store.config import ConfigError

log = logging.getLogger(__name__)

_RECV_SIZE_BYTES = 64 * 1024
_ACCEPT_POLL_S = 0.2
_JOIN_TIMEOUT_S = 5.0


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


class OutboundLink:
    """The connection this member sends on to one peer, with its bounded queue and thread."""

    def __init__(self, peer: Peer, config: TransportConfig, stopping: threading.Event) -> None:
        self.peer = peer
        self._config = config
        self._stopping = stopping
        self._queue: deque[Message] = deque()
        self._ready = threading.Condition()
        self._sock: socket.socket | None = None
        self.connected = False
        self.sent_count = 0
        self.dropped_count = 0
        self.oversize_count = 0
        self.connect_count = 0
        self.last_error = ""
        self._thread = threading.Thread(target=self._run, name=f"dledger-send-{peer.node_id}",
                                        daemon=True)

    def start(self) -> None:
        self._thread.start()

    def offer(self, message: Message) -> None:
        with self._ready:
            if len(self._queue) >= self._config.outbound_queue_max:
                self._queue.popleft()
                self.dropped_count += 1
            self._queue.append(message)
            self._ready.notify()

    def stop(self) -> None:
        with self._ready:
            self._ready.notify()
        _close(self._sock)
        self._thread.join(_JOIN_TIMEOUT_S)

    def _run(self) -> None:
        backoff_ms = self._config.reconnect_backoff_min_ms
        while not self._stopping.is_set():
            try:
                self._connect_and_send()
            except (OSError, ProtocolError) as error:
                self.last_error = f"{type(error).__name__}: {error}"
                if self.connected:
                    backoff_ms = self._config.reconnect_backoff_min_ms
                log.info("dledger: link to %s: %s", self.peer.node_id, self.last_error)
            finally:
                self.connected = False
                _close(self._sock)
                self._sock = None
            self._stopping.wait(backoff_ms / 1000)
            backoff_ms = min(2 * backoff_ms, self._config.reconnect_backoff_max_ms)

    def _connect_and_send(self) -> None:
        config = self._config
        sock = socket.create_connection((self.peer.connect_host, self.peer.port),
                                        timeout=config.connect_timeout_ms / 1000)
        self._sock = sock
        if self._stopping.is_set():
            return
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        deadline_s = time.monotonic() + config.handshake_timeout_ms / 1000
        tagger = dial(sock, config.identity, self.peer.node_id, deadline_s)
        sock.settimeout(config.send_timeout_ms / 1000)
        self.connected = True
        self.connect_count += 1
        while not self._stopping.is_set():
            batch = self._take_batch()
            frames = []
            for message in batch:
                body = encode_message(message)
                if len(body) > config.frame_bytes_max:
                    self.oversize_count += 1
                    log.warning("dledger: dropped a %d byte message to %s (over "
                                "frame_bytes_max)", len(body), self.peer.node_id)
                    continue
                frames.append(encode_frame(body, tagger.tag(body)))
            if frames:
                sock.sendall(b"".join(frames))
                self.sent_count += len(frames)

    def _take_batch(self) -> list[Message]:
        with self._ready:
            if not self._queue and not self._stopping.is_set():
                # Woken by offer() or stop(); the timeout only bounds a missed wake-up.
                self._ready.wait(1.0)
            batch = list(self._queue)
            self._queue.clear()
            return batch


class _Inbound:
    """One accepted connection: handshake, then frames read and delivered."""

    def __init__(self, transport: PeerTransport, sock: socket.socket, address: str) -> None:
        self.sock = sock
        self.address = address
        self.peer_id = ""
        self._transport = transport
        self.thread = threading.Thread(target=self._run, name=f"dledger-read-{address}",
                                       daemon=True)

    def _run(self) -> None:
        transport = self._transport
        config = transport.config
        try:
            deadline_s = time.monotonic() + config.handshake_timeout_ms / 1000
            self.peer_id, tagger, proof = accept(self.sock, config.identity,
                                                 transport.member_ids, deadline_s)
            # Kept first, proof second: once the dialer has the proof it sends; a connection
            # evicted in between would swallow those messages (a seen flake: a vote lost).
            if not transport.handshake_done(self):
                return
            self.sock.sendall(proof)
            self.sock.settimeout(None)
            reader = FrameReader(config.frame_bytes_max, tagger.tag_size, tagger.check)
            while True:
                data = self.sock.recv(_RECV_SIZE_BYTES)
                if not data:
                    return
                for body in reader.feed(data):
                    self._deliver(decode_message(body))
        except ProtocolError as error:
            transport.refused(self, error)
        except OSError:
            pass  # closed by us (stop, replaced, evicted) or reset by the peer
        finally:
            transport.closed(self)

    def _deliver(self, message: Message) -> None:
        if message.source_id != self.peer_id:
            raise WireError(f"a message from {message.source_id!r} on {self.peer_id!r}'s "
                            "connection")
        self._transport.deliver(message)


class PeerTransport:
    def __init__(self, config: TransportConfig, listener: socket.socket,
                 deliver: Callable[[Message], None]) -> None:
        """`listener` is bound (tests bind port 0); the transport listens and closes it."""
        self.config = config
        self.deliver = deliver
        self.member_ids = frozenset(peer.node_id for peer in config.peers)
        self._listener = listener
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._handshaking: deque[_Inbound] = deque()
        self._inbound: dict[str, _Inbound] = {}
        self._threads: list[threading.Thread] = []
        self.links = {peer.node_id: OutboundLink(peer, config, self._stopping)
                      for peer in config.peers if peer.node_id != config.self_id}
        self.refused_count = 0
        self.evicted_count = 0
        self._accept_thread = threading.Thread(target=self._accept_loop,
                                               name=f"dledger-accept-{config.self_id}",
                                               daemon=True)

    @property
    def listen_port(self) -> int:
        return int(self._listener.getsockname()[1])

    def start(self) -> None:
        self._listener.listen(len(self.links) + self.config.handshakes_max)
        self._listener.settimeout(_ACCEPT_POLL_S)
        self._accept_thread.start()
        for link in self.links.values():
            link.start()

    def send(self, target_id: str, message: Message) -> None:
        self.links[target_id].offer(message)

    def stop(self) -> None:
        self._stopping.set()
        self._accept_thread.join(_JOIN_TIMEOUT_S)
        self._listener.close()
        for link in self.links.values():
            link.stop()
        with self._lock:
            inbound = list(self._handshaking) + list(self._inbound.values())
        for connection in inbound:
            _close(connection.sock)
        for thread in self._threads:
            thread.join(_JOIN_TIMEOUT_S)

    def connected_peer_ids(self) -> set[str]:
        with self._lock:
            return set(self._inbound)

    # ----- inbound bookkeeping (called on the reading threads) -----

    def _accept_loop(self) -> None:
        while not self._stopping.is_set():
            try:
                sock, address = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            connection = _Inbound(self, sock, f"{address[0]}:{address[1]}")
            with self._lock:
                if len(self._handshaking) >= self.config.handshakes_max:
                    oldest = self._handshaking.popleft()
                    self.evicted_count += 1
                    _close(oldest.sock)
                self._handshaking.append(connection)
                self._threads = [t for t in self._threads if t.is_alive()]
                self._threads.append(connection.thread)
            connection.thread.start()

    def handshake_done(self, connection: _Inbound) -> bool:
        with self._lock:
            if connection not in self._handshaking:
                return False  # evicted while it finished
            self._handshaking.remove(connection)
            older = self._inbound.get(connection.peer_id)
            self._inbound[connection.peer_id] = connection
        if older is not None:
            _close(older.sock)
        log.info("dledger: %s connected from %s", connection.peer_id, connection.address)
        return True

    def refused(self, connection: _Inbound, error: ProtocolError) -> None:
        with self._lock:
            self.refused_count += 1
        log.warning("dledger: closed the connection from %s%s: %s", connection.address,
                    f" ({connection.peer_id})" if connection.peer_id else "", error)

    def closed(self, connection: _Inbound) -> None:
        with self._lock:
            if connection in self._handshaking:
                self._handshaking.remove(connection)
            if self._inbound.get(connection.peer_id) is connection:
                del self._inbound[connection.peer_id]
        _close(connection.sock)


def _close(sock: socket.socket | None) -> None:
    if sock is None:
        return
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()
