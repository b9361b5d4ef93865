from __future__ import annotations

import hypothesis.strategies as st
import pytest
from hypothesis import given

from ha.protocol import (
    READ_BUFFER_SIZE_BYTES,
    FrameParser,
    ProtocolError,
    ReportParser,
    encode_header,
    encode_report,
)

frames = st.lists(st.tuples(st.integers(0, 2**62), st.binary(max_size=300)), max_size=20)


@given(frames=frames, cuts=st.lists(st.integers(1, 64), max_size=50))
def test_frames_survive_any_split(frames: list[tuple[int, bytes]], cuts: list[int]) -> None:
    """Frames cut at arbitrary byte boundaries come out whole and in order."""
    stream = b"".join(encode_header(o, len(b)) + b for o, b in frames)
    parser = FrameParser()
    received: list[tuple[int, bytes]] = []
    position = 0
    for cut in cuts:
        received += parser.feed(stream[position : position + cut])
        position += cut
    received += parser.feed(stream[position:])
    assert received == frames
    assert parser.buffered_bytes == 0


def test_size_field_over_buffer_is_refused() -> None:
    """A frame size over the 4 MiB read buffer is a protocol error, never an allocation."""
    with pytest.raises(ProtocolError, match="outside"):
        FrameParser().feed(b"\x00" * 8 + (READ_BUFFER_SIZE_BYTES + 1).to_bytes(4, "big"))


def test_negative_size_and_offset_are_refused() -> None:
    """Negative sizes and offsets are protocol errors."""
    with pytest.raises(ProtocolError):
        FrameParser().feed(b"\x00" * 8 + b"\xff\xff\xff\xff")
    with pytest.raises(ProtocolError):
        FrameParser().feed(b"\xff" * 8 + b"\x00\x00\x00\x00")


@given(reports=st.lists(st.integers(0, 2**63 - 1), min_size=1, max_size=10),
       split=st.integers(0, 80))
def test_report_parser_takes_the_last_complete(reports: list[int], split: int) -> None:
    """Only the last complete 8-byte report counts, as in RocketMQ."""
    stream = b"".join(encode_report(r) for r in reports)
    parser = ReportParser()
    split = min(split, len(stream))
    first = parser.feed(stream[:split])
    last = parser.feed(stream[split:])
    assert last == reports[-1] or (last is None and first == reports[-1])


def test_negative_report_is_refused() -> None:
    """A negative offset report is garbage: a protocol error."""
    with pytest.raises(ProtocolError):
        ReportParser().feed(b"\xff" * 8)
