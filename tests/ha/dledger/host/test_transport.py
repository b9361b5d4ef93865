"""The DLedger peer transport on real loopback sockets: authenticated delivery, refusals that
close one connection only, and its bounds."""

from __future__ import annotations

import logging
import select
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from ha.dledger.core.messages import (
    Entry,
    Message,
    PushRequest,
    PushResponse,
    VoteRequest,
    VoteResponse,
)
from ha.dledger.core.peers import Peer
from ha.dledger.host.handshake import HELLO_SIZE, MAGIC, Identity, accept
from ha.dledger.host.outbound import OutboundLink
from ha.dledger.host.transport import PeerTransport
from ha.dledger.host.transport_config import TransportConfig
from ha.dledger.host.wire import LENGTH, encode_frame, encode_message
from ha.protocol import ProtocolError
from store.errors import ConfigError
from tests.support.dledger.net import SECRET, WAIT_S, bound_listener
from tests.support.store import wait_until


class Inbox:
    def __init__(self) -> None:
        self.messages: list[Message] = []
        self._lock = threading.Lock()

    def __call__(self, message: Message) -> None:
        with self._lock:
            self.messages.append(message)

    def sources(self) -> set[str]:
        with self._lock:
            return {message.source_id for message in self.messages}


class Pair:
    """Members n0 and n1 (each a transport), and n2's address for scripted sockets."""

    def __init__(self, secrets: tuple[bytes | None, bytes | None] = (SECRET, SECRET),
                 **overrides: object) -> None:
        listeners = [bound_listener() for _ in range(3)]
        self.peers = tuple(Peer(f"n{i}", "127.0.0.1", listener.getsockname()[1])
                           for i, listener in enumerate(listeners))
        listeners[2].close()  # n2 is played by the test's own sockets
        self.inboxes = [Inbox(), Inbox()]
        self.transports = [
            PeerTransport(TransportConfig("g0", f"n{i}", self.peers, secrets[i],
                                          allow_unauthenticated=secrets[i] is None,
                                          reconnect_backoff_max_ms=50, **overrides),  # type: ignore[arg-type]
                          listeners[i], self.inboxes[i])
            for i in range(2)]

    def start(self) -> None:
        for transport in self.transports:
            transport.start()

    def stop(self) -> None:
        for transport in self.transports:
            transport.stop()

    def port(self, index: int) -> int:
        return self.peers[index].port


@pytest.fixture
def pair() -> Iterator[Pair]:
    pair = Pair()
    pair.start()
    yield pair
    pair.stop()


def vote(source_id: str, term: int) -> VoteRequest:
    return VoteRequest(source_id, term, 0, 0, False)


def test_messages_are_delivered_both_ways(pair: Pair) -> None:
    """Each member's messages reach the other over its own authenticated outbound link."""
    pair.transports[0].send("n1", vote("n0", 1))
    pair.transports[1].send("n0", VoteResponse("n1", 1, True, False))
    wait_until(lambda: pair.inboxes[1].messages == [vote("n0", 1)], WAIT_S)
    wait_until(lambda: pair.inboxes[0].messages == [VoteResponse("n1", 1, True, False)],
               WAIT_S)


def test_link_reconnects_after_the_peer_restarts() -> None:
    """A peer that goes away and comes back on its port is reached again (bounded backoff)."""
    pair = Pair()
    pair.start()
    try:
        pair.transports[0].send("n1", vote("n0", 1))
        wait_until(lambda: len(pair.inboxes[1].messages) == 1, WAIT_S)
        pair.transports[1].stop()
        listener = bound_listener(pair.port(1))
        inbox = Inbox()
        pair.transports[1] = PeerTransport(pair.transports[1].config, listener, inbox)
        pair.transports[1].start()
        link = pair.transports[0].links["n1"]

        def delivered_again() -> bool:
            # Sends into the dead connection are lost until the link notices; keep sending.
            pair.transports[0].send("n1", vote("n0", 2))
            return bool(inbox.messages)

        wait_until(delivered_again, WAIT_S)
        assert link.connect_count >= 2
    finally:
        pair.stop()


def test_wrong_secret_is_refused_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    """A member with another secret never gets a message through, and the refusal is logged."""
    caplog.set_level(logging.WARNING, logger="ha.dledger.host.transport")
    pair = Pair(secrets=(SECRET, b"another-secret"))
    pair.start()
    try:
        pair.transports[1].send("n0", vote("n1", 1))
        wait_until(lambda: pair.transports[0].refused_count >= 1, WAIT_S)
        assert "did not prove the group secret" in caplog.text
        assert pair.inboxes[0].messages == []
        assert not pair.transports[1].links["n0"].connected
    finally:
        pair.stop()


def test_open_member_and_authenticated_member_refuse_each_other() -> None:
    """An open link is never accepted by an authenticated member (no downgrade)."""
    pair = Pair(secrets=(SECRET, None))
    pair.start()
    try:
        pair.transports[1].send("n0", vote("n1", 1))
        wait_until(lambda: pair.transports[0].refused_count >= 1, WAIT_S)
        link = pair.transports[1].links["n0"]
        wait_until(lambda: "runs an authenticated link" in link.last_error, WAIT_S)
        assert pair.inboxes[0].messages == []
    finally:
        pair.stop()


def test_unauthenticated_needs_asking_by_name() -> None:
    """Without a secret the transport refuses to be built unless allow_unauthenticated."""
    peers = (Peer("n0", "127.0.0.1", 1), Peer("n1", "127.0.0.1", 2))
    with pytest.raises(ConfigError, match="secret: is required"):
        TransportConfig("g0", "n0", peers, None)
    assert TransportConfig("g0", "n0", peers, None, allow_unauthenticated=True).secret is None


def scripted_dial(port: int, node_id: str = "n2") -> socket.socket:
    """Connect to a member as `node_id` and finish the handshake (open link)."""
    from ha.dledger.host.handshake import Identity, dial

    sock = socket.create_connection(("127.0.0.1", port), timeout=WAIT_S)
    dial(sock, Identity("g0", node_id, None), "n0", time.monotonic() + WAIT_S)
    return sock


@pytest.fixture
def open_pair() -> Iterator[Pair]:
    pair = Pair(secrets=(None, None))
    pair.start()
    yield pair
    pair.stop()


def closed_by_peer(sock: socket.socket) -> bool:
    sock.settimeout(WAIT_S)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def test_garbage_closes_that_connection_only(open_pair: Pair) -> None:
    """A frame of garbage closes the connection that sent it; n1's link keeps delivering."""
    sock = scripted_dial(open_pair.port(0))
    sock.sendall(encode_frame(b"\x07garbage", b""))
    assert closed_by_peer(sock)
    sock.close()
    open_pair.transports[1].send("n0", vote("n1", 3))
    wait_until(lambda: vote("n1", 3) in open_pair.inboxes[0].messages, WAIT_S)
    assert open_pair.transports[0].refused_count == 1


def test_oversize_frame_closes_that_connection_only() -> None:
    """A length over frame_bytes_max closes the connection at once, before any body."""
    pair = Pair(secrets=(None, None), frame_bytes_max=4096)
    pair.start()
    try:
        sock = scripted_dial(pair.port(0))
        sock.sendall(LENGTH.pack(4097))
        assert closed_by_peer(sock)
        sock.close()
        pair.transports[1].send("n0", vote("n1", 4))
        wait_until(lambda: vote("n1", 4) in pair.inboxes[0].messages, WAIT_S)
    finally:
        pair.stop()


def test_a_message_naming_another_sender_closes_the_connection(open_pair: Pair) -> None:
    """n2 cannot speak for n1: a message whose source is not the connection's peer is refused."""
    sock = scripted_dial(open_pair.port(0))
    sock.sendall(encode_frame(encode_message(PushResponse("n1", 9, True, 0, 0, 0, 0, 0)), b""))
    assert closed_by_peer(sock)
    sock.close()
    assert all(message.source_id != "n1" or message.term != 9
               for message in open_pair.inboxes[0].messages)


def test_unknown_member_is_refused(open_pair: Pair, caplog: pytest.LogCaptureFixture) -> None:
    """A dialer naming an id outside the group is refused in the handshake, by name."""
    caplog.set_level(logging.WARNING, logger="ha.dledger.host.transport")
    with pytest.raises(ProtocolError, match="closed the connection during the handshake"):
        scripted_dial(open_pair.port(0), node_id="n9")
    wait_until(lambda: open_pair.transports[0].refused_count == 1, WAIT_S)
    assert "'n9' is not a peer in this group" in caplog.text


def test_pending_handshakes_are_bounded(caplog: pytest.LogCaptureFixture) -> None:
    """Past handshakes_max idle connections the oldest is closed, and a member still gets in."""
    # Idle sockets are closed by eviction here, not by the handshake timeout.
    pair = Pair(secrets=(None, None), handshakes_max=2, handshake_timeout_ms=60_000)
    pair.start()
    idle = []
    try:
        for _ in range(4):
            sock = socket.create_connection(("127.0.0.1", pair.port(0)), timeout=WAIT_S)
            assert sock.recv(HELLO_SIZE, socket.MSG_WAITALL)[:len(MAGIC)] == MAGIC
            idle.append(sock)
        # n1's own link may be evicted too while it dials: at least our two oldest are.
        wait_until(lambda: pair.transports[0].evicted_count >= 2, WAIT_S)
        assert closed_by_peer(idle[0]) and closed_by_peer(idle[1])
        pair.transports[1].send("n0", vote("n1", 5))
        wait_until(lambda: vote("n1", 5) in pair.inboxes[0].messages, WAIT_S)
    finally:
        for sock in idle:
            sock.close()
        pair.stop()


def test_outbound_queue_drops_the_oldest_when_full() -> None:
    """A full per-peer queue drops its oldest message and keeps the newest."""
    peers = (Peer("n0", "127.0.0.1", 1), Peer("n1", "127.0.0.1", 2))
    config = TransportConfig("g0", "n0", peers, SECRET, outbound_queue_max=3)
    link = OutboundLink(peers[1], config, threading.Event())  # never started: nothing drains
    for term in range(1, 6):
        link.offer(vote("n0", term))
    assert [message.term for message in link._take_batch()] == [3, 4, 5]
    assert link.dropped_count == 2


def test_a_connection_dropped_as_its_handshake_ends_loses_no_message(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """n0 drops n1's first connection at the last step of the handshake (as an eviction by
    newer connections can): the vote n1 had queued is not sent into that dead connection
    and lost; n1 sees the dial fail, dials again, and the vote arrives."""
    pair = Pair(secrets=(None, None))
    dropped: list[object] = []
    real_done = PeerTransport.handshake_done

    def drop_the_first(transport: PeerTransport, connection: Any) -> bool:
        if transport is pair.transports[0] and connection.peer_id == "n1" and not dropped:
            dropped.append(connection)
            with transport._lock:  # what the accept loop's eviction does, at this moment
                transport._handshaking.remove(connection)
            connection.sock.shutdown(socket.SHUT_RDWR)
            connection.sock.close()
        return real_done(transport, connection)

    monkeypatch.setattr(PeerTransport, "handshake_done", drop_the_first)
    pair.transports[1].send("n0", vote("n1", 7))  # queued before any connection
    pair.start()
    try:
        wait_until(lambda: vote("n1", 7) in pair.inboxes[0].messages, WAIT_S)
        assert len(dropped) == 1
    finally:
        pair.stop()


def test_messages_are_read_and_written_by_one_io_thread(pair: Pair) -> None:
    """Without a host, the transport's own I/O thread delivers every message; the sender's
    thread only queues."""
    names: list[str] = []
    inbox = pair.inboxes[1]

    def recording(message: Message) -> None:
        names.append(threading.current_thread().name)
        inbox(message)

    pair.transports[1].deliver = recording
    for term in range(1, 4):
        pair.transports[0].send("n1", vote("n0", term))
    wait_until(lambda: len(inbox.messages) == 3, WAIT_S)
    assert set(names) == {"dledger-io-n1"}


class ScriptedPeer:
    """Member n0 (a transport with its own I/O thread) whose peer n1 is the test's listener;
    `accept_link()` takes n0's connection and finishes the handshake as n1."""

    def __init__(self, **overrides: object) -> None:
        self.listener = bound_listener()
        self.listener.listen(4)
        self.listener.settimeout(WAIT_S)
        own = bound_listener()
        peers = (Peer("n0", "127.0.0.1", own.getsockname()[1]),
                 Peer("n1", "127.0.0.1", self.listener.getsockname()[1]))
        config = TransportConfig("g0", "n0", peers, None, allow_unauthenticated=True,
                                 reconnect_backoff_max_ms=50, **overrides)  # type: ignore[arg-type]
        self.transport = PeerTransport(config, own, Inbox())
        self.accepted: list[socket.socket] = []
        self.transport.start()

    def accept_link(self, after_proof: bytes = b"") -> socket.socket:
        sock, _ = self.listener.accept()
        self.accepted.append(sock)
        _, _, proof = accept(sock, Identity("g0", "n1", None), frozenset({"n0", "n1"}),
                             time.monotonic() + WAIT_S)
        sock.sendall(proof + after_proof)
        return sock

    def stop(self) -> None:
        self.transport.stop()
        for sock in self.accepted:
            sock.close()
        self.listener.close()


def test_a_peer_that_stops_reading_loses_the_link_which_dials_again() -> None:
    """Bytes that wait send_timeout_ms without the peer taking any lose the connection (its
    unsent messages with it) and the link dials again, rather than queueing without end."""
    peer = ScriptedPeer(send_timeout_ms=300)
    try:
        push = PushRequest("n0", 1, 0, 0, (Entry(1, 1, b"x" * (1 << 20)),), 0)
        for _ in range(64):  # 64 MiB: far more than the loopback buffers hold
            peer.transport.send("n1", push)
        peer.accept_link()  # and never read
        peer.accept_link()  # the link dialled again
        assert "no bytes taken for 300 ms" in peer.transport.links["n1"].last_error
    finally:
        peer.stop()


def test_a_peer_that_writes_on_a_send_only_connection_loses_the_link() -> None:
    """The acceptor never speaks after the handshake: bytes from it end the connection."""
    peer = ScriptedPeer()
    try:
        sock = peer.accept_link(after_proof=b"unexpected")
        assert closed_by_peer(sock)
        link = peer.transport.links["n1"]
        wait_until(lambda: "on a send-only connection" in link.last_error, WAIT_S)
    finally:
        peer.stop()


def test_a_wake_written_while_the_wake_socket_drains_is_not_lost() -> None:
    """A wake that lands while the I/O thread drains the wake socket must not leave the
    'wake pending' flag set with no byte behind it: every later wake would be skipped and the
    host would run only on socket events and ticks (a seen regression: 50 ms produces)."""
    listener = bound_listener()
    absent = bound_listener()  # n1's port, never listening: the link dials and backs off
    peers = (Peer("n0", "127.0.0.1", listener.getsockname()[1]),
             Peer("n1", "127.0.0.1", absent.getsockname()[1]))
    transport = PeerTransport(TransportConfig("g0", "n0", peers, None,
                                              allow_unauthenticated=True),
                              listener, Inbox())
    transport.start(poll_thread=False)  # this test's thread polls
    wake_reader = transport._wake_reader

    def wake_from_another_thread() -> None:
        thread = threading.Thread(target=transport.wake)
        thread.start()
        thread.join()

    class DrainSeam:
        """The wake socket, whose first recv lets another thread wake right then."""

        woken = False

        def recv(self, size: int) -> bytes:
            if not self.woken:
                self.woken = True
                wake_from_another_thread()
            return wake_reader.recv(size)

    try:
        transport.wake()  # before any poll, from this thread: a byte is written
        transport._wake_reader = DrainSeam()  # type: ignore[assignment]
        transport.poll(0)  # drains, with the other thread's wake in the middle
        wake_from_another_thread()
        assert select.select([wake_reader], [], [], 0)[0], "the wake was skipped"
    finally:
        transport._wake_reader = wake_reader
        transport.stop()
        absent.close()
