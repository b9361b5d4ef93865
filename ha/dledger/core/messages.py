"""Entries and the peer messages of a DLedger group (the Raft RPCs in DLedger's words).

A push is DLedger's append request: COMPARE sends it empty, TRUNCATE and APPEND carry entries,
COMMIT carries none and only the leader's commit index. Every message names its sender's term
so that a stale leader or candidate learns it is stale.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass


@dataclass(slots=True)
class Entry:
    """One log entry; an empty payload at the start of a term is the leader's no-op.

    Never changed once built, but not frozen like the messages: one is built per entry on
    every member (the leader's appends, each follower's decode), and a frozen dataclass's
    __init__ (object.__setattr__ a field) costs about four times a plain one's."""

    index: int
    term: int
    payload: bytes


def payload_crc(payload: bytes) -> int:
    """The CRC-32 of an entry's payload (the store's entry index keeps the same one)."""
    return zlib.crc32(payload)


def payload_bytes(entries: tuple[Entry, ...]) -> int:
    return sum(len(entry.payload) for entry in entries)


def within_bytes(entries: tuple[Entry, ...], bytes_max: int) -> tuple[Entry, ...]:
    """The longest prefix of `entries` whose payloads fit in `bytes_max`, and at least one
    entry: a push must make progress whatever the size of one message."""
    total_bytes = 0
    for count, entry in enumerate(entries):
        total_bytes += len(entry.payload)
        if total_bytes > bytes_max and count > 0:
            return entries[:count]
    return entries


@dataclass(frozen=True, slots=True)
class VoteRequest:
    """A (pre-)vote request; a pre-vote asks for `term` without anyone raising their term.
    `transfer` marks the election a leader asked for (TimeoutNow): voters grant it even within
    their leader lease, which would otherwise ignore it (the log check still applies)."""

    source_id: str
    term: int
    last_index: int
    last_term: int
    pre_vote: bool
    transfer: bool = False


@dataclass(frozen=True, slots=True)
class VoteResponse:
    """A grant carries the voter's commit mark: its commit index and that entry's term and
    payload CRC (0, 0, None: at or below its base, nothing to compare). A candidate whose log
    lacks that entry or holds another there forks from the committed prefix and does not
    count the grant (DLedgerNode `_forks_from_commit`)."""

    source_id: str
    term: int
    granted: bool
    pre_vote: bool
    commit_index: int = 0
    commit_term: int = 0
    commit_crc: int | None = None


@dataclass(frozen=True, slots=True)
class PushRequest:
    """Entries after (prev_index, prev_term); `from_base` marks a catch-up from the leader's
    first retained entry, which lets a follower without that prefix drop its whole log.
    `prev_crc` is the CRC-32 of the payload at `prev_index` (None: not known, at a base): two
    members that led the same term apart (a member started alone, DLedger's forked peer list)
    can hold different entries of one (index, term), which the term alone cannot tell."""

    source_id: str
    term: int
    prev_index: int
    prev_term: int
    entries: tuple[Entry, ...]
    commit_index: int
    from_base: bool = False
    prev_crc: int | None = None


@dataclass(frozen=True, slots=True)
class PushResponse:
    """On success `match_index` is the durable end of the matching prefix; on a mismatch
    (hint_index, hint_term) is the follower's best guess for fast back-up (etcd's RejectHint)."""

    source_id: str
    term: int
    success: bool
    prev_index: int
    match_index: int
    hint_index: int
    hint_term: int
    last_index: int


@dataclass(frozen=True, slots=True)
class TimeoutNow:
    """Leadership transfer (Raft thesis 3.10, etcd's MsgTimeoutNow): the leader of `term`, whose
    log the target holds in full, asks the target to start a real election at once, without
    pre-vote or waiting for its timeout."""

    source_id: str
    term: int


Message = VoteRequest | VoteResponse | PushRequest | PushResponse | TimeoutNow
