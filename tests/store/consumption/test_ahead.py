"""The records a master applied ahead are given back to dispatch only for their own bytes at
their own offset; the rest is decoded, as before."""

from __future__ import annotations

import pytest

from store.consumption.ahead import RecordsAhead
from store.consumption.events import Acked
from store.consumption.records import PopRecord, QueueKey, decode, encode

KEY = QueueKey("g", "t", 1)


def _record(offset: int) -> tuple[PopRecord, bytes]:
    record = PopRecord(KEY, (Acked(offset, 7),), 1_000)
    return record, encode(record)


def test_a_record_kept_is_taken_once_for_its_bytes_at_its_offset() -> None:
    ahead = RecordsAhead()
    record, body = _record(5)
    ahead.keep(100, body, record)
    assert ahead.take(100, body) is record
    assert decode(body) == record  # what dispatch would have applied
    assert ahead.take(100, body) is None  # taken: gone
    assert ahead.taken == 1 and len(ahead) == 0


def test_other_bytes_at_a_kept_offset_are_decoded() -> None:
    """A cut put another record where a kept one was: its own bytes are applied."""
    ahead = RecordsAhead()
    record, body = _record(5)
    _, other = _record(6)
    ahead.keep(100, body, record)
    assert ahead.take(100, other) is None
    assert ahead.taken == 0 and len(ahead) == 0


def test_an_unknown_offset_keeps_nothing() -> None:
    ahead = RecordsAhead()
    record, body = _record(5)
    ahead.keep(-1, body, record)  # a DLedger append does not tell its offset
    assert len(ahead) == 0 and ahead.take(-1, body) is None


def test_records_below_one_taken_are_dropped_and_the_kept_are_bounded() -> None:
    ahead = RecordsAhead(records_max=3)
    records = [_record(offset) for offset in range(5)]
    for number, (record, body) in enumerate(records):
        ahead.keep(number * 10, body, record)
    assert len(ahead) == 3  # 0 and 10 dropped, the oldest first
    assert ahead.take(0, records[0][1]) is None
    assert ahead.take(30, records[3][1]) is records[3][0]
    assert len(ahead) == 1  # 20 was passed
    assert ahead.take(40, records[4][1]) is records[4][0]


def test_an_offset_written_again_keeps_the_newest() -> None:
    ahead = RecordsAhead()
    old, old_body = _record(5)
    new, new_body = _record(6)
    ahead.keep(100, old_body, old)
    ahead.keep(100, new_body, new)
    assert len(ahead) == 1
    assert ahead.take(100, new_body) is new


def test_the_bound_is_at_least_one() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        RecordsAhead(records_max=0)
