"""Epochs in bytes: a history on the wire (after the handshake) and in the epoch file
(`<data_dir>/ha_epochs`, magic, count, entries, CRC, written atomically).

What an epoch is and how master and slave agree on where their logs match is pure logic, in
ha/classic/core/epochs.py; its names are re-exported here, where the rest of ha imports them.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path

from ha.auth import SLAVE_ID_SIZE as NODE_ID_SIZE
from ha.classic.core.epochs import EPOCHS_MAX as EPOCHS_MAX
from ha.classic.core.epochs import Agreement as Agreement
from ha.classic.core.epochs import Decision as Decision
from ha.classic.core.epochs import Epoch as Epoch
from ha.classic.core.epochs import begin_epoch as begin_epoch
from ha.classic.core.epochs import decide as decide
from ha.protocol import ProtocolError
from store.checkpoint import write_file_atomically

_ENTRY = struct.Struct(f">QQ{NODE_ID_SIZE}s")
_COUNT = struct.Struct(">H")
_OFFSET = struct.Struct(">q")
_FILE_MAGIC = b"TWEP"
_CRC = struct.Struct(">I")


# -- bytes: the wire and the file -------------------------------------------------------------


def encode_history(history: Sequence[Epoch]) -> bytes:
    assert len(history) <= EPOCHS_MAX
    return _COUNT.pack(len(history)) + b"".join(
        _ENTRY.pack(e.number, e.start_offset, e.leader_id) for e in history)


def history_size(count_prefix: bytes) -> int:
    """Bytes of entries that follow a history's 2-byte count; ProtocolError past the bound."""
    (count,) = _COUNT.unpack(count_prefix)
    if count > EPOCHS_MAX:
        raise ProtocolError(f"an epoch history of {count} entries (at most {EPOCHS_MAX})")
    return int(count) * _ENTRY.size


def decode_entries(data: bytes) -> list[Epoch]:
    history = [Epoch(number, start, leader) for number, start, leader in
               _ENTRY.iter_unpack(data)]
    for earlier, later in zip(history, history[1:], strict=False):
        if later.start_offset < earlier.start_offset or later.number <= earlier.number:
            raise ProtocolError("an epoch history that goes backwards")
    return history


HISTORY_COUNT_SIZE = _COUNT.size
OFFSET_SIZE = _OFFSET.size
DECISION_SIZE = 1 + _OFFSET.size


def encode_offset(offset: int) -> bytes:
    return _OFFSET.pack(offset)


def decode_offset(data: bytes) -> int:
    (offset,) = _OFFSET.unpack(data)
    return int(offset)


def encode_decision(decision: Decision) -> bytes:
    return bytes([decision.agreement.value]) + _OFFSET.pack(decision.agreed_offset)


def decode_decision(data: bytes) -> Decision:
    try:
        agreement = Agreement(data[0])
    except ValueError:
        raise ProtocolError(f"unknown agreement {data[0]}") from None
    return Decision(agreement, decode_offset(data[1:]))


def load_history(path: Path) -> list[Epoch]:
    """The history kept at `path` (empty when there is none); a damaged file is an error."""
    if not path.exists():
        return []
    data = path.read_bytes()
    body, crc = data[:-_CRC.size], data[-_CRC.size:]
    if (not body.startswith(_FILE_MAGIC) or len(data) < len(_FILE_MAGIC) + _CRC.size
            or _CRC.unpack(crc)[0] != zlib.crc32(body)):
        raise ValueError(f"{path}: damaged epoch file")
    entries = body[len(_FILE_MAGIC) + _COUNT.size:]
    if len(entries) != history_size(body[len(_FILE_MAGIC):len(_FILE_MAGIC) + _COUNT.size]):
        raise ValueError(f"{path}: damaged epoch file")
    return decode_entries(entries)


def save_history(path: Path, history: Sequence[Epoch]) -> None:
    body = _FILE_MAGIC + encode_history(history)
    write_file_atomically(path, body + _CRC.pack(zlib.crc32(body)))


def read_history(read: Callable[[int], bytes]) -> tuple[bytes, list[Epoch]]:
    """A history off the wire: its raw bytes (for the tag check) and its entries."""
    prefix = read(HISTORY_COUNT_SIZE)
    entries = read(history_size(prefix))
    return prefix + entries, decode_entries(entries)
