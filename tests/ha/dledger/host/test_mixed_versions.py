"""A DLedger group of members of two builds: the one before the fork marks (a push's prev_crc,
a vote grant's commit mark), whose decoder refuses their flags, and this one. A member sends
the marks only to a peer whose handshake nonce carries the sign (handshake.py), so the older
member reads every message of the newer one, and the newer reads the older's as ever.

The older build is reproduced by its rules: its decoder is this one with the flags it knew
(`OLD_FLAGS_ALLOWED`, wire.py before the marks), and its acceptor is this one with a nonce of
16 random bytes (its handshake was this one otherwise)."""

from __future__ import annotations

import zlib
from collections.abc import Iterator

import pytest

from ha.auth import new_nonce
from ha.dledger.core.messages import Entry, Message, PushRequest, VoteResponse
from ha.dledger.host import handshake, wire
from ha.dledger.host.wire import (
    FLAG_FROM_BASE,
    FLAG_GRANTED,
    FLAG_PRE_VOTE,
    FLAG_SUCCESS,
    FLAG_TRANSFER,
    TYPE_PUSH_REQUEST,
    TYPE_PUSH_RESPONSE,
    TYPE_TIMEOUT_NOW,
    TYPE_VOTE_REQUEST,
    TYPE_VOTE_RESPONSE,
    WireError,
    decode_message,
    encode_message,
)
from tests.ha.dledger.host.test_transport import Pair
from tests.support.dledger.net import WAIT_S
from tests.support.store import wait_until

# The flags the build before the fork marks allowed (wire.py before 49f4837, which added
# FLAG_PREV_CRC, and e7d68e5, FLAG_COMMIT and FLAG_COMMIT_CRC); its decoders read no other.
OLD_FLAGS_ALLOWED = {
    TYPE_VOTE_REQUEST: FLAG_PRE_VOTE | FLAG_TRANSFER,
    TYPE_VOTE_RESPONSE: FLAG_PRE_VOTE | FLAG_GRANTED,
    TYPE_PUSH_REQUEST: FLAG_FROM_BASE,
    TYPE_PUSH_RESPONSE: FLAG_SUCCESS,
    TYPE_TIMEOUT_NOW: 0,
}

GRANT = VoteResponse("n0", 4, True, False, 7, 3, 0x1234_5678)
PAYLOAD = b"entry 8"
PUSH = PushRequest("n0", 4, 7, 3, (Entry(8, 4, PAYLOAD),), 7, False,
                   zlib.crc32(b"entry 7"))


@pytest.fixture
def old_rules(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every decoder and acceptor of this process follows the older build's rules."""
    monkeypatch.setattr(wire, "_FLAGS_ALLOWED", OLD_FLAGS_ALLOWED)
    monkeypatch.setattr(handshake, "acceptor_nonce_signed", new_nonce)
    yield


def test_the_older_build_refuses_the_marks_and_reads_what_is_sent_it_without_them(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """With the marks, the older decoder refuses a grant and a push (the vote lost, the
    connection closed); encoded for it, both read as the older build wrote them."""
    monkeypatch.setattr(wire, "_FLAGS_ALLOWED", OLD_FLAGS_ALLOWED)
    for message in (GRANT, PUSH):
        with pytest.raises(WireError, match="unknown flags"):
            decode_message(encode_message(message))
    assert decode_message(encode_message(GRANT, fork_marks=False)) == \
        VoteResponse("n0", 4, True, False)
    assert decode_message(encode_message(PUSH, fork_marks=False)) == \
        PushRequest("n0", 4, 7, 3, (Entry(8, 4, PAYLOAD),), 7, False, None)


def test_this_build_reads_the_older_builds_messages() -> None:
    """What the older build sends (no marks) decodes here: no commit mark, no prev_crc."""
    assert decode_message(encode_message(GRANT, fork_marks=False)).commit_index == 0
    push = decode_message(encode_message(PUSH, fork_marks=False))
    assert isinstance(push, PushRequest) and push.prev_crc is None


def _sent_through_a_pair() -> tuple[list[Message], bool, int, int]:
    """n0 sends n1 the grant and the push: what n1 received, whether n0's link carried the
    marks, how often it connected, and how many connections n1 refused."""
    pair = Pair()
    pair.start()
    try:
        pair.transports[0].send("n1", GRANT)
        pair.transports[0].send("n1", PUSH)
        wait_until(lambda: len(pair.inboxes[1].messages) == 2, WAIT_S)
        link = pair.transports[0].links["n1"]
        return (list(pair.inboxes[1].messages), link.fork_marks, link.connect_count,
                pair.transports[1].refused_count)
    finally:
        pair.stop()


def test_a_newer_member_talks_to_an_older_one_without_the_marks(old_rules: None) -> None:
    """n1 plays the older build (its acceptor's nonce unsigned, its decoder the older one):
    n0's grant with a commit mark and push with a prev_crc arrive, as the older build reads
    them, on the first connection (before: refused as unknown flags, the connection closed
    each time, the vote never counted)."""
    assert _sent_through_a_pair() == (
        [VoteResponse("n0", 4, True, False),
         PushRequest("n0", 4, 7, 3, (Entry(8, 4, PAYLOAD),), 7, False, None)], False, 1, 0)


def test_newer_members_send_each_other_the_marks() -> None:
    """Between members of this build the marks travel: the grant's commit mark and the push's
    prev_crc arrive whole."""
    received, fork_marks, _, _ = _sent_through_a_pair()
    assert received == [GRANT, PUSH] and fork_marks
