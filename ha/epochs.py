"""Epochs: which master wrote which range of the commit log (RocketMQ 5's epoch file).

An epoch is (number, start offset, leader id): the broker `leader id` was master from `start
offset` on, until the next epoch's start. A broker begins a new epoch every time it starts as
master (after recovery, which may have cleared bytes) and when a slave is promoted. Histories
only grow at the end, except that a restarting master first drops the epochs that start past
its recovered max offset (it no longer holds any of their bytes).

A slave keeps a copy of its master's history. On connect, master and slave compare histories:
the last epoch both hold (same number, start and leader) tells how far their logs agree,
and the slave cuts its log back to that offset before it is streamed anything. So a slave
that holds bytes its master lost, or bytes of a deposed master, is repaired instead of
diverging silently. Ranges are half-open: epoch i covers [start_i, start_(i+1)).
"""

from __future__ import annotations

import enum
import struct
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ha.auth import SLAVE_ID_SIZE as NODE_ID_SIZE
from ha.protocol import ProtocolError
from store.checkpoint import write_file_atomically

EPOCHS_MAX = 4096  # a history longer than this drops its oldest epochs
_ENTRY = struct.Struct(f">QQ{NODE_ID_SIZE}s")
_COUNT = struct.Struct(">H")
_OFFSET = struct.Struct(">q")
_FILE_MAGIC = b"TWEP"
_CRC = struct.Struct(">I")


@dataclass(frozen=True, slots=True)
class Epoch:
    number: int
    start_offset: int
    leader_id: bytes

    def view(self) -> dict[str, int | str]:
        return {"epoch": self.number, "start_offset": self.start_offset,
                "leader_id": self.leader_id.hex()}


class Agreement(enum.Enum):
    AGREED = 0  # stream from the agreed offset (after the slave cut its log back to it)
    NEEDS_RESET = 1  # the agreed offset is below what the master still holds
    DIVERGED = 2  # no epoch in common: the slave's bytes are not this master's history


@dataclass(frozen=True, slots=True)
class Decision:
    agreement: Agreement
    agreed_offset: int


def begin_epoch(history: Sequence[Epoch], max_offset: int, leader_id: bytes) -> list[Epoch]:
    """The history of a broker that becomes master with `max_offset` bytes."""
    kept = [epoch for epoch in history if epoch.start_offset <= max_offset]
    number = max((epoch.number for epoch in history), default=0) + 1
    return [*kept, Epoch(number, max_offset, leader_id)][-EPOCHS_MAX:]


def decide(master: Sequence[Epoch], master_max: int, master_min: int,
           slave: Sequence[Epoch], slave_max: int) -> Decision:
    """Where a slave's log stops agreeing with its master's, and whether it can be streamed."""
    if slave_max == 0:
        return Decision(Agreement.AGREED, 0)
    agreed = _agreed_offset(master, master_max, slave, slave_max)
    if agreed is None:
        return Decision(Agreement.DIVERGED, -1)
    if agreed < master_min:
        return Decision(Agreement.NEEDS_RESET, agreed)
    return Decision(Agreement.AGREED, agreed)


def _agreed_offset(master: Sequence[Epoch], master_max: int, slave: Sequence[Epoch],
                   slave_max: int) -> int | None:
    master_index = {epoch: index for index, epoch in enumerate(master)}
    for slave_index in range(len(slave) - 1, -1, -1):
        index = master_index.get(slave[slave_index])
        if index is not None:
            return min(_end(slave, slave_index, slave_max), _end(master, index, master_max))
    return None


def _end(history: Sequence[Epoch], index: int, max_offset: int) -> int:
    following = history[index + 1].start_offset if index + 1 < len(history) else max_offset
    return min(following, max_offset)


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
