"""The handshake of a DLedger peer connection, built on ha/auth.py's primitives.

The dialer (the member that sends on this connection) proves itself first:

    acceptor -> dialer    HELLO  = "TWD1" + flags (1) + acceptor nonce (16) + acceptor id (32)
    dialer   -> acceptor  ANSWER = flags (1) + dialer nonce (16) + dialer id (32) + proof (32)
    acceptor -> dialer    acceptor proof (32)

Ids are ASCII, zero-padded to 32 bytes. flags bit 0 says "authenticated". The proofs are
ha/auth.py's HMAC-SHA256 over both nonces and a binding of the group name and both ids, with
the domain "twinlog-dledger", so a proof is valid for one connection between two named members
of one group and nowhere else (not on the classic HA port either). The secret never travels.
An open side and an authenticated side refuse each other by name, never downgrade. The dialer
checks that it reached the member it meant to; the acceptor that the dialer is a member.

Afterwards only the dialer sends frames (ha/dledger/host/wire.py), each tagged with the
dialer-to-acceptor session key; the acceptor only reads.

Which frames the acceptor can read: builds from the fork checks on end their acceptor nonce
with FORK_MARKS_SIGN (12 random bytes, then the sign), and a dialer sends the fork marks
(a push's prev_crc, a vote grant's commit mark: wire.py) only to an acceptor whose nonce
carries it. An older build refuses those flags and ignores what its nonce holds, so each side
talks to it as it did. As TLS 1.3 signs its version in the server random: the nonce is inside
both proofs, so on an authenticated link no one between can strip the sign. An older build's
random nonce carries the sign once in 2^32 connections: its refusal of the first marked frame
closes the connection, and the next dial has a new nonce.
"""

from __future__ import annotations

import hashlib
import hmac
import socket
from dataclasses import dataclass

from ha.auth import (
    FLAG_AUTHENTICATED,
    NONCE_SIZE,
    PROOF_SIZE,
    FrameTagger,
    Handshake,
    new_nonce,
    recv_exactly,
)
from ha.dledger.core.peers import PEER_ID_SIZE_MAX, is_valid_id
from ha.protocol import ProtocolError

MAGIC = b"TWD1"
DOMAIN = b"twinlog-dledger"
HELLO_SIZE = len(MAGIC) + 1 + NONCE_SIZE + PEER_ID_SIZE_MAX
FORK_MARKS_SIGN = b"TWF1"  # the end of an acceptor nonce: it reads the fork marks
ANSWER_SIZE = 1 + NONCE_SIZE + PEER_ID_SIZE_MAX + PROOF_SIZE


class HandshakeError(ProtocolError):
    """The other side is not a member we may talk to (wrong secret, group, id or mode)."""


@dataclass(frozen=True, slots=True)
class Identity:
    """What one side brings to a handshake."""

    group: str
    self_id: str
    secret: bytes | None


def dial(sock: socket.socket, identity: Identity, expected_id: str,
         deadline_s: float) -> tuple[FrameTagger, bool]:
    """Run the dialer's side; returns the tagger for the frames it sends, and whether the
    acceptor reads the fork marks (its nonce ends with FORK_MARKS_SIGN)."""
    hello = recv_exactly(sock, HELLO_SIZE, deadline_s)
    if not hello.startswith(MAGIC):
        raise HandshakeError("the peer did not open with the twinlog DLedger handshake")
    acceptor_authenticated = _authenticated(hello[len(MAGIC)])
    acceptor_nonce = hello[len(MAGIC) + 1:len(MAGIC) + 1 + NONCE_SIZE]
    acceptor_id = _decode_id(hello[len(MAGIC) + 1 + NONCE_SIZE:])
    if acceptor_id != expected_id:
        raise HandshakeError(f"reached member {acceptor_id!r}, expected {expected_id!r}")
    _check_modes(identity, acceptor_authenticated)
    dialer_nonce = new_nonce()
    handshake = _handshake(identity, acceptor_nonce, dialer_nonce, identity.self_id,
                           acceptor_id)
    sock.sendall(bytes([_flags(identity)]) + dialer_nonce + _encode_id(identity.self_id)
                 + handshake.slave_proof())
    proof = recv_exactly(sock, PROOF_SIZE, deadline_s)
    if not hmac.compare_digest(handshake.master_proof(), proof):
        raise HandshakeError(f"member {acceptor_id!r} did not prove the group secret")
    return handshake.slave_to_master(), acceptor_nonce.endswith(FORK_MARKS_SIGN)


def accept(sock: socket.socket, identity: Identity, member_ids: frozenset[str],
           deadline_s: float) -> tuple[str, FrameTagger, bytes]:
    """Run the acceptor's side up to its last step; returns the dialer's id, the tagger
    checking its frames, and the acceptor's proof, which the caller sends once it keeps the
    connection: the dialer counts itself connected only when the proof arrives, so a
    connection dropped before that loses none of the dialer's messages (they stay queued)."""
    acceptor_nonce = acceptor_nonce_signed()
    sock.sendall(MAGIC + bytes([_flags(identity)]) + acceptor_nonce
                 + _encode_id(identity.self_id))
    answer = recv_exactly(sock, ANSWER_SIZE, deadline_s)
    dialer_authenticated = _authenticated(answer[0])
    dialer_nonce = answer[1:1 + NONCE_SIZE]
    dialer_id = _decode_id(answer[1 + NONCE_SIZE:1 + NONCE_SIZE + PEER_ID_SIZE_MAX])
    if dialer_id not in member_ids or dialer_id == identity.self_id:
        raise HandshakeError(f"{dialer_id!r} is not a peer in this group")
    _check_modes(identity, dialer_authenticated)
    handshake = _handshake(identity, acceptor_nonce, dialer_nonce, dialer_id, identity.self_id)
    if not hmac.compare_digest(handshake.slave_proof(), answer[-PROOF_SIZE:]):
        raise HandshakeError(f"member {dialer_id!r} did not prove the group secret "
                             "(wrong secret or group)")
    return dialer_id, handshake.slave_to_master(), handshake.master_proof()


def acceptor_nonce_signed() -> bytes:
    """An acceptor's nonce: random, then FORK_MARKS_SIGN."""
    return new_nonce()[len(FORK_MARKS_SIGN):] + FORK_MARKS_SIGN


def _handshake(identity: Identity, acceptor_nonce: bytes, dialer_nonce: bytes, dialer_id: str,
               acceptor_id: str) -> Handshake:
    binding = hashlib.sha256(b"\0".join((identity.group.encode(), dialer_id.encode(),
                                         acceptor_id.encode()))).digest()[:16]
    return Handshake(identity.secret, acceptor_nonce, dialer_nonce, binding, DOMAIN)


def _check_modes(identity: Identity, peer_authenticated: bool) -> None:
    if peer_authenticated != (identity.secret is not None):
        ours = "authenticated" if identity.secret is not None else "open"
        theirs = "authenticated" if peer_authenticated else "open"
        raise HandshakeError(f"the peer runs an {theirs} link, this member an {ours} one")


def _flags(identity: Identity) -> int:
    return FLAG_AUTHENTICATED if identity.secret is not None else 0


def _authenticated(flags: int) -> bool:
    if flags & ~FLAG_AUTHENTICATED:
        raise HandshakeError(f"unknown handshake flags {flags:#x}")
    return bool(flags & FLAG_AUTHENTICATED)


def _encode_id(node_id: str) -> bytes:
    return node_id.encode("ascii").ljust(PEER_ID_SIZE_MAX, b"\0")


def _decode_id(raw: bytes) -> str:
    trimmed = raw.rstrip(b"\0")
    if not trimmed.isascii() or not is_valid_id(trimmed.decode("ascii")):
        raise HandshakeError(f"invalid member id {trimmed!r} in the handshake")
    return trimmed.decode("ascii")
