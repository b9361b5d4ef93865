"""A scripted HA slave: speaks the real handshake and frames over a real socket, and lets a
test choose every report it sends (to lag, to lie, to go silent)."""

from __future__ import annotations

import secrets
import socket
import time
from collections.abc import Sequence
from typing import Any

from ha import HAConfig
from ha.auth import (
    ANSWER_SIZE,
    HELLO_SIZE,
    PROOF_SIZE,
    SLAVE_ID_SIZE,
    Answer,
    FrameTagger,
    Handshake,
    Hello,
    new_nonce,
    recv_exactly,
)
from ha.epochs import (
    DECISION_SIZE,
    OFFSET_SIZE,
    Agreement,
    Decision,
    Epoch,
    decode_decision,
    decode_offset,
    encode_decision,
    encode_history,
    encode_offset,
    read_history,
)
from ha.protocol import FrameParser, encode_report
from ha.service import HAService
from store import MessageStore


class ScriptedSlave:
    def __init__(self, port: int, secret: str | None, slave_id: bytes | None = None,
                 timeout_s: float = 5.0, epochs: Sequence[Epoch] = (),
                 max_offset: int = 0) -> None:
        self.slave_id = slave_id or secrets.token_bytes(SLAVE_ID_SIZE)
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout_s)
        self._timeout_s = timeout_s
        self._secret = secret.encode() if secret is not None else None
        self._send_tags = FrameTagger(None)
        self.parser = FrameParser()
        self.epochs = list(epochs)
        self.max_offset = max_offset
        self.decision: Decision | None = None
        self.master_epochs: list[Epoch] = []

    def handshake(self) -> ScriptedSlave:
        deadline_s = time.monotonic() + self._timeout_s
        hello = Hello.decode(recv_exactly(self.sock, HELLO_SIZE, deadline_s))
        nonce = new_nonce()
        handshake = Handshake(self._secret, hello.master_nonce, nonce, self.slave_id)
        self.sock.sendall(Answer(self.slave_id, self._secret is not None, nonce,
                                 handshake.slave_proof()).encode())
        handshake.check_master_proof(recv_exactly(self.sock, PROOF_SIZE, deadline_s))
        self._send_tags = handshake.slave_to_master()
        tags = handshake.master_to_slave()
        message = encode_history(self.epochs) + encode_offset(self.max_offset)
        self.sock.sendall(message + self._send_tags.tag(message))

        def read(size: int) -> bytes:
            return recv_exactly(self.sock, size, deadline_s)

        decision_bytes = read(DECISION_SIZE)
        history_bytes, self.master_epochs = read_history(read)
        tags.check(read(tags.tag_size), decision_bytes, history_bytes)
        self.decision = decode_decision(decision_bytes)
        if tags.tag_size:
            self.parser = FrameParser(tag_size=tags.tag_size, check=tags.check)
        self.sock.settimeout(self._timeout_s)
        return self

    def report(self, offset: int) -> None:
        report = encode_report(offset)
        self.sock.sendall(report + self._send_tags.tag(report))

    def receive_until(self, end_offset: int, timeout_s: float = 10.0) -> bytes:
        """Commit-log bytes from the stream until `end_offset` is reached (heartbeats skipped)."""
        received = bytearray()
        reached = -1
        deadline_s = time.monotonic() + timeout_s
        while reached < end_offset:
            if time.monotonic() > deadline_s:
                raise AssertionError(f"stream stopped at {reached}, wanted {end_offset}")
            size = self.sock.recv_into(self.parser.free_view())
            if size == 0:
                raise ConnectionError("master closed the connection")
            for offset, body in self.parser.received(size):
                received += body
                reached = max(reached, offset + len(body))
        return bytes(received)

    def closed_by_peer(self, timeout_s: float = 5.0) -> bool:
        """Whether the master closes this connection within `timeout_s` (heartbeats and
        frames that keep arriving do not extend the deadline)."""
        deadline_s = time.monotonic() + timeout_s
        try:
            while (remaining_s := deadline_s - time.monotonic()) > 0:
                self.sock.settimeout(remaining_s)
                if not self.sock.recv(65536):
                    return True
            return False
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False

    def close(self) -> None:
        self.sock.close()


def scripted_master_handshake(peer: socket.socket, secret: str | None,
                              timeout_s: float = 5.0) -> FrameTagger:
    """The master's side of a real handshake on an accepted socket; returns the tagger for
    frames the scripted master then sends."""
    deadline_s = time.monotonic() + timeout_s
    key = secret.encode() if secret is not None else None
    hello = Hello(key is not None, new_nonce())
    peer.sendall(hello.encode())
    answer = Answer.decode(recv_exactly(peer, ANSWER_SIZE, deadline_s))
    handshake = Handshake(key, hello.master_nonce, answer.slave_nonce, answer.slave_id)
    handshake.check_slave_proof(answer.proof)
    peer.sendall(handshake.master_proof())
    receive_tags, send_tags = handshake.slave_to_master(), handshake.master_to_slave()

    def read(size: int) -> bytes:
        return recv_exactly(peer, size, deadline_s)

    history_bytes, _ = read_history(read)
    max_bytes = read(OFFSET_SIZE)
    receive_tags.check(read(receive_tags.tag_size), history_bytes, max_bytes)
    message = encode_decision(Decision(Agreement.AGREED, decode_offset(max_bytes)))
    message += encode_history([])
    peer.sendall(message + send_tags.tag(message))
    return send_tags


def started_master_service(store: MessageStore, secret: str, **config: Any) -> HAService:
    """A master's HAService on a kernel-chosen port, with a quick heartbeat and a slow
    housekeeping (so a test's scripted slave is not timed out), started."""
    settings: dict[str, Any] = {"broker_role": store.config.broker_role, "ha_listen_port": 0,
                                "ha_secret": secret, "ha_send_heartbeat_interval_ms": 100,
                                "ha_housekeeping_interval_ms": 5000, **config}
    service = HAService(HAConfig(**settings), store)
    service.start()
    return service
