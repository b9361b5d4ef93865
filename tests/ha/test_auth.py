"""Who may replicate: the mutual handshake, tagged frames, slots given after the handshake,
and slaves counted by identity rather than by connection."""

from __future__ import annotations

import hmac
import socket
import struct
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ha import ConnectionState, HAConfig
from ha.auth import (
    ANSWER_SIZE,
    PROOF_SIZE,
    SLAVE_ID_SIZE,
    FrameTagger,
    Handshake,
    Hello,
    recv_exactly,
)
from ha.identity import load_or_create_node_id
from ha.protocol import FrameParser, ProtocolError, encode_header
from store import BrokerRole, Message, MessageStore, PutMessageStatus
from store.errors import ConfigError
from tests.support.ha import FAST_HA, Node, same_bytes, wait_caught_up
from tests.support.ha_peer import ScriptedSlave, scripted_master_handshake
from tests.support.store import wait_until

StartNode = Callable[..., Node]
SECRET = FAST_HA["ha_secret"]
NONCE_M, NONCE_S, SLAVE_ID = b"m" * 16, b"s" * 16, b"i" * SLAVE_ID_SIZE


def _produce(store: MessageStore, count: int, size: int = 3000) -> None:
    for index in range(count):
        store.put_message(Message("A", bytes([index % 256]) * size))


# -- the handshake and the tags, as pure functions ------------------------------------------


def test_proofs_need_the_secret_and_differ_by_side() -> None:
    """A proof checks out only with the same secret, nonces and slave id, and the master's
    proof is not the slave's (a proof cannot be reflected back)."""
    handshake = Handshake(b"secret-one", NONCE_M, NONCE_S, SLAVE_ID)
    handshake.check_slave_proof(handshake.slave_proof())
    handshake.check_master_proof(handshake.master_proof())
    assert handshake.slave_proof() != handshake.master_proof()
    for other in (Handshake(b"secret-two", NONCE_M, NONCE_S, SLAVE_ID),
                  Handshake(b"secret-one", b"x" * 16, NONCE_S, SLAVE_ID),
                  Handshake(b"secret-one", NONCE_M, b"x" * 16, SLAVE_ID),
                  Handshake(b"secret-one", NONCE_M, NONCE_S, b"x" * SLAVE_ID_SIZE)):
        with pytest.raises(ProtocolError):
            other.check_slave_proof(handshake.slave_proof())
    with pytest.raises(ProtocolError):
        handshake.check_slave_proof(handshake.master_proof())


def _tagged_pair() -> tuple[FrameTagger, FrameTagger]:
    handshake = Handshake(b"secret-one", NONCE_M, NONCE_S, SLAVE_ID)
    return handshake.master_to_slave(), handshake.master_to_slave()


def test_tags_refuse_altered_replayed_and_reordered_frames() -> None:
    """Frames check in order; a changed byte, a replay or a swap fails the check."""
    sender, receiver = _tagged_pair()
    frames = [encode_header(0, 3) + b"abc", encode_header(3, 2) + b"de"]
    tags = [sender.tag(frame) for frame in frames]
    receiver.check(tags[0], frames[0])
    with pytest.raises(ProtocolError):
        receiver.check(tags[0], frames[0])  # a replay of frame 0 in place of frame 1
    sender, receiver = _tagged_pair()
    tags = [sender.tag(frame) for frame in frames]
    with pytest.raises(ProtocolError):
        receiver.check(tags[1], frames[1])  # frame 1 before frame 0
    sender, receiver = _tagged_pair()
    tag = sender.tag(frames[0])
    with pytest.raises(ProtocolError):
        receiver.check(tag, encode_header(0, 3) + b"abd")


@pytest.mark.parametrize("size_bytes", [0, 1, 2047, 2048, 4094, 4095, 70_000])
def test_a_tag_is_the_hmac_of_the_sequence_and_the_frame(size_bytes: int) -> None:
    """A tag is the first 16 bytes of HMAC-SHA256 over the 8-byte sequence number and the
    frame's parts, however the parts are cut and however large (hashed in slices under
    hashlib's 2 KiB lock-release threshold); a flipped last byte fails the check."""
    key = b"k" * 32
    sender, receiver = FrameTagger(key), FrameTagger(key)
    frame = bytes(range(256)) * (size_bytes // 256) + bytes(size_bytes % 256)
    for sequence in range(2):
        tag = sender.tag(frame[:7], memoryview(frame)[7:])
        expected = hmac.digest(key, struct.pack(">Q", sequence) + frame, "sha256")[:16]
        assert tag == expected
        receiver.check(tag, frame)
    if size_bytes:
        with pytest.raises(ProtocolError):
            receiver.check(sender.tag(frame), frame[:-1] + bytes([frame[-1] ^ 1]))


def test_frame_parser_checks_each_tag() -> None:
    """The slave's parser hands out a frame only after its tag checked out."""
    sender, receiver = _tagged_pair()
    header = encode_header(7, 4)
    stream = header + b"body" + sender.tag(header, b"body")
    parser = FrameParser(tag_size=receiver.tag_size, check=receiver.check)
    assert parser.feed(stream) == [(7, b"body")]
    forged = header + b"BODY" + sender.tag(header, b"body")
    with pytest.raises(ProtocolError, match="authentication"):
        parser.feed(forged)


def test_slave_id_is_kept_in_the_data_dir(tmp_path: Path) -> None:
    """A slave keeps one id across restarts; a damaged id file stops start-up by name."""
    first = load_or_create_node_id(tmp_path)
    assert load_or_create_node_id(tmp_path) == first and len(first) == SLAVE_ID_SIZE
    (tmp_path / "ha_node_id").write_text("not hex")
    with pytest.raises(ConfigError, match="ha_node_id"):
        load_or_create_node_id(tmp_path)


def test_an_open_link_must_be_asked_for() -> None:
    """Without a secret the HA config is refused, naming ha_secret, unless the operator opts
    out by name."""
    with pytest.raises(ConfigError, match="ha_secret"):
        HAConfig(broker_role=BrokerRole.SYNC_MASTER).check_authentication()
    HAConfig(broker_role=BrokerRole.SYNC_MASTER, ha_allow_unauthenticated=True
             ).check_authentication()


# -- item 1: only a real slave can acknowledge --------------------------------------------


def test_a_client_without_the_secret_gets_nothing_and_acks_nothing(
        start_node: StartNode) -> None:
    """A fake slave without the secret is closed in the handshake: it receives no byte of the
    log, and a SYNC_MASTER with only that fake answers SLAVE_NOT_AVAILABLE, not PUT_OK."""
    master = start_node("master", BrokerRole.SYNC_MASTER)
    _produce(master.store, 5)
    fake = ScriptedSlave(master.ha_port, secret=None)
    with pytest.raises(ProtocolError):
        fake.handshake()
        fake.report(master.store.max_offset)
        fake.receive_until(master.store.max_offset, timeout_s=2)
    _, done = master.store.put_message(Message("A", b"x"))
    assert done.result(5) is PutMessageStatus.SLAVE_NOT_AVAILABLE


def test_an_ack_above_what_was_sent_closes_the_connection(start_node: StartNode) -> None:
    """On an open link (opted out), a peer that acks bytes it was never sent is closed: acks
    are bounded by what this connection sent, not only by the master's max offset."""
    master = start_node("master", BrokerRole.SYNC_MASTER,
                        {"mapped_file_size_bytes": 16 << 20},
                        ha_secret=None, ha_allow_unauthenticated=True)
    _produce(master.store, 2500, size=4000)  # 10 MB: more than the socket buffers hold (4 MB)
    service = master.replication.service
    assert service is not None
    fake = ScriptedSlave(master.ha_port, secret=None, timeout_s=5)
    fake.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    fake.handshake()
    fake.report(0)  # an empty slave: the master streams from its min offset
    wait_until(lambda: any(c.sent_end_offset > 0 for c in service.connections))
    fake.report(master.store.max_offset)  # it reads nothing, yet claims everything
    wait_until(lambda: service.ack_beyond_max_count == 1 and service.connections == [])
    fake.close()
    _, done = master.store.put_message(Message("A", b"x"))
    assert done.result(5) is PutMessageStatus.SLAVE_NOT_AVAILABLE


# -- item 2: slots only after the handshake -----------------------------------------------


def test_idle_sockets_cannot_lock_the_slave_out(start_node: StartNode) -> None:
    """Sockets that never finish the handshake hold no slot: with more idle sockets than
    slots, the real slave still connects and replicates, and the idle ones are dropped."""
    master = start_node("master", BrokerRole.SYNC_MASTER, ha_connections_max=2,
                        ha_handshakes_max=4, ha_handshake_timeout_ms=60_000)
    idle = [socket.create_connection(("127.0.0.1", master.ha_port)) for _ in range(20)]
    service = master.replication.service
    assert service is not None
    wait_until(lambda: service.handshake_evicted_count >= 16)
    slave = start_node("slave", BrokerRole.SLAVE,
                       ha_master_address=f"127.0.0.1:{master.ha_port}")
    _produce(master.store, 10)
    wait_caught_up(master.store, slave.store)
    assert service.connection_count == 1
    _, done = master.store.put_message(Message("A", b"x"))
    assert done.result(5) is PutMessageStatus.PUT_OK
    for sock in idle:
        sock.close()


def test_a_silent_handshake_is_dropped_at_its_deadline(start_node: StartNode) -> None:
    """A socket that sends nothing is closed when the handshake deadline passes."""
    master = start_node("master", BrokerRole.SYNC_MASTER, ha_handshake_timeout_ms=300)
    sock = socket.create_connection(("127.0.0.1", master.ha_port), timeout=5)
    data = b""
    while chunk := sock.recv(4096):
        data += chunk
    assert data.startswith(b"TWH2")
    service = master.replication.service
    assert service is not None
    wait_until(lambda: service.connections == [])


# -- item 3: the slave checks the master too ----------------------------------------------


def test_a_slave_refuses_a_master_that_cannot_prove_the_secret(start_node: StartNode) -> None:
    """A fake master without the secret is refused by the slave, which applies nothing."""
    def guess_the_proof(peer: socket.socket) -> None:
        peer.sendall(Hello(True, b"n" * 16).encode())
        recv_exactly(peer, ANSWER_SIZE, time.monotonic() + 5)
        peer.sendall(b"\x00" * PROOF_SIZE)

    _slave_of_fake_master(start_node, guess_the_proof, "the master did not prove the secret")


def test_a_frame_with_a_bad_tag_is_never_applied(start_node: StartNode) -> None:
    """A master that knows the secret but sends a frame whose tag does not match (bytes
    changed on the way): the slave closes without applying it."""
    def send_an_altered_frame(peer: socket.socket) -> None:
        tags = scripted_master_handshake(peer, SECRET)
        header = encode_header(0, 8)
        peer.sendall(header + b"\xff" * 8 + tags.tag(header, b"\x00" * 8))

    _slave_of_fake_master(start_node, send_an_altered_frame, "failed authentication")


def _slave_of_fake_master(start_node: StartNode, play: Callable[[socket.socket], None],
                          expected_error: str) -> None:
    """A real slave whose master is `play` on a real socket: it ends with `expected_error`
    and an empty log."""
    fake = socket.create_server(("127.0.0.1", 0))
    fake.settimeout(5)
    slave = start_node("slave", BrokerRole.SLAVE,
                       ha_master_address=f"127.0.0.1:{fake.getsockname()[1]}")
    peer, _ = fake.accept()
    with peer:
        play(peer)
        client = slave.replication.client
        assert client is not None
        wait_until(lambda: client.last_error is not None
                   and expected_error in client.last_error)
    fake.close()
    assert slave.store.max_offset == 0


# -- item 4: a slave counts once ------------------------------------------------------------


def test_a_reconnected_slave_counts_once(start_node: StartNode) -> None:
    """Two connections with the same slave id are one slave: the newer replaces the older,
    so with in_sync_replicas=3 (two slaves needed) a put is not PUT_OK."""
    master = start_node("master", BrokerRole.SYNC_MASTER, in_sync_replicas=3,
                        ha_housekeeping_interval_ms=60_000)  # only the replacement closes
    _produce(master.store, 3)
    service = master.replication.service
    assert service is not None
    slave_id = b"\x01" * SLAVE_ID_SIZE
    claim: dict[str, Any] = {"epochs": service.epochs, "max_offset": master.store.max_offset}
    old = ScriptedSlave(master.ha_port, SECRET, slave_id, **claim).handshake()
    old.report(master.store.max_offset)
    wait_until(lambda: service.connection_count == 1)
    new = ScriptedSlave(master.ha_port, SECRET, slave_id, **claim).handshake()
    new.report(master.store.max_offset)
    assert old.closed_by_peer()
    wait_until(lambda: [c.state for c in service.connections]
               == [ConnectionState.TRANSFERRING])
    _, done = master.store.put_message(Message("A", b"x"))
    assert done.result(5) is PutMessageStatus.SLAVE_NOT_AVAILABLE
    new.close()


def test_authenticated_replication_is_byte_identical(start_node: StartNode) -> None:
    """Over an authenticated link (every frame tagged) the slave ends byte-identical."""
    master = start_node("master", BrokerRole.SYNC_MASTER)
    slave = start_node("slave", BrokerRole.SLAVE,
                       ha_master_address=f"127.0.0.1:{master.ha_port}")
    _produce(master.store, 300)
    wait_caught_up(master.store, slave.store)
    assert same_bytes(master.store, slave.store)
    _, done = master.store.put_message(Message("A", b"x"))
    assert done.result(5) is PutMessageStatus.PUT_OK
