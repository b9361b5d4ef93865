"""Authentication of the HA link: a mutual handshake, then a tag on every frame.

The handshake always runs, so a slave always names itself (its stable id), with or without a
secret:

    master -> slave   HELLO  = "TWH2" + flags (1) + master nonce (16)
    slave  -> master  ANSWER = slave id (16) + flags (1) + slave nonce (16) + slave proof (32)
    master -> slave   master proof (32)

flags bit 0 says "authenticated". With a secret, each proof is HMAC-SHA256(secret, label +
both nonces + slave id), with a different label per side, so neither proof can be reflected,
replayed on another connection or made without the secret; the master shows its proof only
after checking the slave's. Without a secret (an explicit opt-out) the proofs are zeros and
both sides must agree that the link is open: a mismatch is refused by name, never downgraded.

After an authenticated handshake every frame in both directions carries a 16-byte tag,
HMAC-SHA256 truncated, over a per-direction sequence number and the frame's bytes, keyed by
session keys derived from the secret and both nonces. A tag that does not match (a forged,
replayed, reordered or altered frame) is a ProtocolError and the connection closes.

Why tags rather than TLS: the classic stream is already framed, the keys come from the shared
secret with no certificates to manage, and HMAC-SHA256 runs at about 1.6 GB/s here, well above
what a slave can apply; the price is that the master copies each batch out of the mapped file
to tag it instead of using os.sendfile (32 KiB at a time). The bytes are not encrypted: the
commit log is not secret from the network path in this threat model, only its integrity and
the right to acknowledge are.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import socket
import struct
import time
from dataclasses import dataclass
from typing import Protocol

from ha.protocol import ProtocolError

HELLO_MAGIC = b"TWH2"
NONCE_SIZE = 16
SLAVE_ID_SIZE = 16
PROOF_SIZE = hashlib.sha256().digest_size
TAG_SIZE = 16
HELLO_SIZE = len(HELLO_MAGIC) + 1 + NONCE_SIZE
ANSWER_SIZE = SLAVE_ID_SIZE + 1 + NONCE_SIZE + PROOF_SIZE
FLAG_AUTHENTICATED = 0x01
_NO_PROOF = bytes(PROOF_SIZE)
_SEQUENCE = struct.Struct(">Q")
# hashlib gives up the interpreter lock while it hashes this many bytes or more at once.
_GIL_RELEASE_BYTES = 2048


class _Mac(Protocol):
    def copy(self) -> _Mac: ...

    def update(self, data: bytes | memoryview, /) -> None: ...

    def digest(self) -> bytes: ...


def _hmac_new(key: bytes, digestmod: str) -> _Mac:
    """OpenSSL's HMAC object itself (copy, update and digest in C, what hmac.new wraps), or
    hmac.new's on a Python built without OpenSSL."""
    try:
        from _hashlib import hmac_new
    except ImportError:  # pragma: no cover
        return hmac.new(key, digestmod=digestmod)
    return hmac_new(key, digestmod=digestmod)


@dataclass(frozen=True, slots=True)
class Hello:
    authenticated: bool
    master_nonce: bytes

    def encode(self) -> bytes:
        return HELLO_MAGIC + bytes([_flags(self.authenticated)]) + self.master_nonce

    @staticmethod
    def decode(data: bytes) -> Hello:
        assert len(data) == HELLO_SIZE
        if not data.startswith(HELLO_MAGIC):
            raise ProtocolError("the peer did not open with the twinlog HA handshake")
        return Hello(_authenticated(data[4]), data[5:])


@dataclass(frozen=True, slots=True)
class Answer:
    slave_id: bytes
    authenticated: bool
    slave_nonce: bytes
    proof: bytes

    def encode(self) -> bytes:
        return (self.slave_id + bytes([_flags(self.authenticated)]) + self.slave_nonce
                + self.proof)

    @staticmethod
    def decode(data: bytes) -> Answer:
        assert len(data) == ANSWER_SIZE
        nonce_start = SLAVE_ID_SIZE + 1
        return Answer(data[:SLAVE_ID_SIZE], _authenticated(data[SLAVE_ID_SIZE]),
                      data[nonce_start:nonce_start + NONCE_SIZE],
                      data[nonce_start + NONCE_SIZE:])


def new_nonce() -> bytes:
    return secrets.token_bytes(NONCE_SIZE)


class Handshake:
    """The secret-dependent half of the handshake for one connection (either side)."""

    def __init__(self, secret: bytes | None, master_nonce: bytes, slave_nonce: bytes,
                 slave_id: bytes, domain: bytes = b"twinlog-ha") -> None:
        assert len(master_nonce) == NONCE_SIZE and len(slave_nonce) == NONCE_SIZE
        assert len(slave_id) == SLAVE_ID_SIZE
        self._secret = secret
        self._context = master_nonce + slave_nonce + slave_id
        # Each protocol keyed by the same secret labels its proofs and keys with its own
        # domain, so a proof made for one (the HA link) is never valid in another (DLedger).
        self._domain = domain

    @property
    def authenticated(self) -> bool:
        return self._secret is not None

    def slave_proof(self) -> bytes:
        return self._proof(b"/slave-proof")

    def master_proof(self) -> bytes:
        return self._proof(b"/master-proof")

    def check_slave_proof(self, proof: bytes) -> None:
        if not hmac.compare_digest(self.slave_proof(), proof):
            raise ProtocolError("handshake failed: the slave did not prove the secret")

    def check_master_proof(self, proof: bytes) -> None:
        if not hmac.compare_digest(self.master_proof(), proof):
            raise ProtocolError("handshake failed: the master did not prove the secret")

    def master_to_slave(self) -> FrameTagger:
        return FrameTagger(self._session_key(b"master-to-slave"))

    def slave_to_master(self) -> FrameTagger:
        return FrameTagger(self._session_key(b"slave-to-master"))

    def _proof(self, label: bytes) -> bytes:
        if self._secret is None:
            return _NO_PROOF
        return hmac.digest(self._secret, self._domain + label + self._context, "sha256")

    def _session_key(self, direction: bytes) -> bytes | None:
        if self._secret is None:
            return None
        session = hmac.digest(self._secret, self._domain + b"/session" + self._context,
                              "sha256")
        return hmac.digest(session, direction, "sha256")


class FrameTagger:
    """Tags (sending side) or checks (receiving side) the frames of one direction, in order.

    Each direction has its own key and sequence counter, so a frame cannot be replayed,
    dropped, reordered or reflected without the next check failing. Without a key (an open
    link) tags are empty and every check passes.
    """

    def __init__(self, key: bytes | None) -> None:
        self._key = key
        self._sequence = 0
        # The keyed HMAC state, copied per frame rather than keyed again each time.
        self._keyed = None if key is None else _hmac_new(key, digestmod="sha256")

    @property
    def tag_size(self) -> int:
        return 0 if self._key is None else TAG_SIZE

    def tag(self, *parts: bytes | memoryview) -> bytes:
        if self._keyed is None:
            return b""
        mac = self._keyed.copy()
        mac.update(_SEQUENCE.pack(self._sequence))
        self._sequence += 1
        for part in parts:
            _update_holding_the_lock(mac, part)
        return mac.digest()[:TAG_SIZE]

    def check(self, tag: bytes | memoryview, *parts: bytes | memoryview) -> None:
        if self._key is None:
            return
        if not hmac.compare_digest(self.tag(*parts), bytes(tag)):
            raise ProtocolError(f"frame {self._sequence - 1} failed authentication")


def _update_holding_the_lock(mac: _Mac, data: bytes | memoryview) -> None:
    """Hash `data` in slices under hashlib's threshold for releasing the interpreter lock
    (2 KiB). A frame's MAC takes microseconds; given up for it, the lock goes to another
    thread of the broker and the peer I/O thread waits until that thread lets it go, once
    for every frame sent and every frame read."""
    if len(data) < _GIL_RELEASE_BYTES:
        mac.update(data)
        return
    view = memoryview(data)
    for start in range(0, len(view), _GIL_RELEASE_BYTES - 1):
        mac.update(view[start:start + _GIL_RELEASE_BYTES - 1])


def recv_exactly(sock: socket.socket, size: int, deadline_s: float) -> bytes:
    """Exactly `size` bytes by `deadline_s` (monotonic), or ProtocolError."""
    data = b""
    while len(data) < size:
        remaining_s = deadline_s - time.monotonic()
        if remaining_s <= 0:
            raise ProtocolError(f"handshake not finished in time ({len(data)} of {size} bytes)")
        sock.settimeout(remaining_s)
        try:
            chunk = sock.recv(size - len(data))
        except TimeoutError:
            continue
        if not chunk:
            raise ProtocolError("the peer closed the connection during the handshake")
        data += chunk
    return data


def _flags(authenticated: bool) -> int:
    return FLAG_AUTHENTICATED if authenticated else 0


def _authenticated(flags: int) -> bool:
    if flags & ~FLAG_AUTHENTICATED:
        raise ProtocolError(f"unknown handshake flags {flags:#x}")
    return bool(flags & FLAG_AUTHENTICATED)
