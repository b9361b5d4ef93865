"""The export's bulk body-CRC check (log_reader._crc_prefix, ISA-L's CRC) against the CRC the
broker writes (store.record: zlib's, RocketMQ's), over windows of records built in memory."""

from __future__ import annotations

import hypothesis.strategies as st
import numpy as np
from hypothesis import given, settings

from store.record import HEADER_SIZE, Message, body_crc, encode_message, stamp_offsets
from store.snapshot.log_reader import RecordWindow, _crc_prefix, _headers

BASE_OFFSET = 1 << 30  # a window somewhere inside a file: positions are not offsets
HOST = bytes(8)


def _window(bodies: list[bytes]) -> tuple[RecordWindow, bytearray]:
    """The records of `bodies` back to back, framed as iter_windows frames them."""
    data = bytearray()
    starts = []
    for index, body in enumerate(bodies):
        record = encode_message(Message("CrcTopic", body), 0, 1, HOST, 1 << 20)
        assert isinstance(record, bytes)
        starts.append(len(data))
        data += record
        stamp_offsets(data, starts[-1], index, BASE_OFFSET + starts[-1])
    positions = np.array(starts, dtype=np.int64)
    array = np.frombuffer(data, dtype=np.uint8)  # a view: corrupting `data` shows in it
    return RecordWindow(array, BASE_OFFSET, positions, _headers(data, positions)), data


_bodies = st.lists(st.one_of(st.binary(max_size=300),
                             st.integers(0, 20_000).map(lambda size: bytes(range(256)) * (
                                 size // 256) + bytes(size % 256))),
                   min_size=1, max_size=40)


@settings(max_examples=150, deadline=None)
@given(bodies=_bodies, data=st.data())
def test_crc_check_accepts_the_brokers_crc_and_stops_at_the_first_bad_body(
        bodies: list[bytes], data: st.DataObject) -> None:
    """Every body whose CRC field holds RocketMQ's CRC (zlib crc32 & 0x7FFFFFFF) passes,
    whatever its size (empty, under and over the SIMD fold sizes); a body changed after it
    was written fails, and the check counts exactly the records before it."""
    window, raw = _window(bodies)
    assert window.header["body_crc"].tolist() == [body_crc(body) for body in bodies]
    assert _crc_prefix(window, memoryview(raw), window.count) == window.count
    candidates = [index for index, body in enumerate(bodies) if body]
    if not candidates:
        return
    victim = data.draw(st.sampled_from(candidates))
    at = data.draw(st.integers(0, len(bodies[victim]) - 1))
    raw[int(window.starts[victim]) + HEADER_SIZE + at] ^= 0x01
    assert _crc_prefix(window, memoryview(raw), window.count) == victim
    assert _crc_prefix(window, memoryview(raw), victim) == victim  # `count` bounds the check


def test_a_bad_body_in_the_middle_of_a_large_window_is_where_the_check_stops() -> None:
    """In a window of 5,000 records (one numpy comparison), a bad body at 2,345 leaves
    exactly 2,345 verified: no record after it counts, even though they are all valid."""
    bodies = [bytes([index % 251]) * (index % 1500) for index in range(5000)]
    window, raw = _window(bodies)
    raw[int(window.starts[2345]) + HEADER_SIZE + 7] ^= 0x80
    assert _crc_prefix(window, memoryview(raw), window.count) == 2345
