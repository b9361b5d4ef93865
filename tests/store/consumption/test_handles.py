"""Receipt handles round-trip; garbage, edited handles and another group's handles are refused."""

from __future__ import annotations

import base64

import hypothesis.strategies as st
import pytest
from hypothesis import given

from store.consumption.handles import HandleCodec, HandleError, ReceiptHandle

CODEC = HandleCodec()
names = st.text(min_size=1, max_size=40)
handles = st.builds(ReceiptHandle, names, names, st.integers(0, 2**32 - 1),
                    st.integers(0, 2**64 - 1), st.integers(1, 2**16 - 1),
                    st.integers(1, 2**64 - 1))


@given(handles)
def test_a_handle_round_trips_as_url_safe_text(handle: ReceiptHandle) -> None:
    text = CODEC.encode(handle)
    assert set(text) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
    assert CODEC.decode(text) == handle
    assert CODEC.decode_for(text, group=handle.group, topic=handle.topic) == handle


@given(handles, st.data())
def test_any_edited_byte_is_refused(handle: ReceiptHandle, data: st.DataObject) -> None:
    raw = bytearray(base64.urlsafe_b64decode(CODEC.encode(handle) + "=="))
    index = data.draw(st.integers(0, len(raw) - 1))
    raw[index] ^= data.draw(st.integers(1, 255))
    with pytest.raises(HandleError):
        CODEC.decode(base64.urlsafe_b64encode(bytes(raw)).rstrip(b"=").decode())


@given(st.text(max_size=200))
def test_garbage_is_refused_with_a_handle_error(text: str) -> None:
    with pytest.raises(HandleError):
        CODEC.decode(text)


@pytest.mark.parametrize("text", ["", "*", "a" * 5000, "AAAA", "not base64!", "=="])
def test_named_garbage_is_refused(text: str) -> None:
    with pytest.raises(HandleError):
        CODEC.decode(text)


def test_a_handle_of_another_group_or_topic_is_refused() -> None:
    text = CODEC.encode(ReceiptHandle("g1", "t1", 0, 5, 1, 9))
    with pytest.raises(HandleError, match="belongs to group 'g1'"):
        CODEC.decode_for(text, group="g2", topic="t1")
    with pytest.raises(HandleError, match="topic 't1'"):
        CODEC.decode_for(text, group="g1", topic="t2")


def test_a_handle_made_with_another_key_is_refused_and_the_same_key_accepts_it() -> None:
    handle = ReceiptHandle("g", "t", 1, 2, 3, 4)
    assert HandleCodec(b"cluster-key").decode(HandleCodec(b"cluster-key").encode(handle)) == handle
    with pytest.raises(HandleError, match="integrity"):
        CODEC.decode(HandleCodec(b"cluster-key").encode(handle))


def test_an_unknown_version_is_refused() -> None:
    raw = bytearray(base64.urlsafe_b64decode(CODEC.encode(ReceiptHandle("g", "t", 0, 0, 1, 1))
                                             + "=="))
    raw[0] = 2
    with pytest.raises(HandleError, match="version 2"):
        CODEC.decode(base64.urlsafe_b64encode(bytes(raw)).decode())


def test_fields_out_of_range_are_a_value_error_at_encode() -> None:
    with pytest.raises(ValueError, match="out of range"):
        CODEC.encode(ReceiptHandle("g", "t", -1, 0, 1, 1))
