"""The two small files of a store-backed DLedger log, each replaced atomically and fsynced
(temp file, fsync, rename, directory fsync) before the call returns.

`hard_state`: the node's current term and vote (Raft's hard state), written before any vote
or answer leaves. Layout (big-endian): magic u32 | term i64 | vote length u16 | vote (UTF-8)
| crc u32 over everything before it.

`log_base`: the entry before the first retained one, after a compaction or a reset. Layout:
magic u32 | base index i64 | base term i64 | base end position i64 (the commit-log offset
after the base entry's record; -1 when not known, after a reset) | crc u32.

A file that is missing means the initial value (term 0, no vote; base 0, term 0, end 0); a
file that is present but damaged stops the start with `StoreCorruptError`: it was written
atomically, so damage is not a torn write a crash can cause, and guessing would risk a
second vote in a term.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

from ha.dledger.core.member import HardState
from store.checkpoint import write_file_atomically
from store.errors import StoreCorruptError
from store.files.disk import REAL_DISK, Disk

_HARD_STATE_MAGIC = 0x444C4853  # "DLHS"
_BASE_MAGIC = 0x444C4253  # "DLBS"
_HARD_STATE_HEAD = struct.Struct(">IqH")
_BASE = struct.Struct(">Iqqq")
_CRC = struct.Struct(">I")
VOTE_ID_BYTES_MAX = 255


@dataclass(frozen=True, slots=True)
class LogBase:
    index: int = 0
    term: int = 0
    end_position: int = 0  # -1: unknown (after a reset, until the first record arrives)


def _with_crc(body: bytes) -> bytes:
    return body + _CRC.pack(zlib.crc32(body))


def _checked_body(path: Path, raw: bytes, size_min: int) -> bytes:
    if len(raw) < size_min + _CRC.size:
        raise StoreCorruptError(f"{path}: {len(raw)} bytes, too short")
    body = raw[: -_CRC.size]
    (crc,) = _CRC.unpack(raw[-_CRC.size :])
    if zlib.crc32(body) != crc:
        raise StoreCorruptError(f"{path}: CRC does not match")
    return body


def encode_hard_state(state: HardState) -> bytes:
    vote = (state.voted_for or "").encode("utf-8")
    assert len(vote) <= VOTE_ID_BYTES_MAX, state.voted_for
    return _with_crc(_HARD_STATE_HEAD.pack(_HARD_STATE_MAGIC, state.term, len(vote)) + vote)


def read_hard_state(path: Path) -> HardState:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return HardState()
    body = _checked_body(path, raw, _HARD_STATE_HEAD.size)
    magic, term, vote_size = _HARD_STATE_HEAD.unpack_from(body)
    if magic != _HARD_STATE_MAGIC or term < 0 or len(body) != _HARD_STATE_HEAD.size + vote_size:
        raise StoreCorruptError(f"{path}: not a DLedger hard-state file")
    vote = body[_HARD_STATE_HEAD.size :].decode("utf-8")
    return HardState(term, vote or None)


def write_hard_state(path: Path, state: HardState, disk: Disk = REAL_DISK) -> None:
    write_file_atomically(path, encode_hard_state(state), disk)


def read_log_base(path: Path) -> LogBase:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return LogBase()
    body = _checked_body(path, raw, _BASE.size)
    magic, index, term, end_position = _BASE.unpack(body)
    if magic != _BASE_MAGIC or index < 0 or term < 0 or end_position < -1:
        raise StoreCorruptError(f"{path}: not a DLedger log-base file")
    return LogBase(index, term, end_position)


def write_log_base(path: Path, base: LogBase, disk: Disk = REAL_DISK) -> None:
    write_file_atomically(
        path, _with_crc(_BASE.pack(_BASE_MAGIC, base.index, base.term, base.end_position)), disk)
