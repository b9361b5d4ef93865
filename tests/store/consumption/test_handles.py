"""Receipt handles round-trip; garbage, edited handles and another group's handles are refused."""

from __future__ import annotations

import base64

import hypothesis.strategies as st
import pytest
from hypothesis import given

from store.consumption.handles import NAMES_KEPT_MAX, HandleCodec, HandleError, ReceiptHandle

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


# Handles written by the version-1 codec as first released: the bytes of a handle are a
# contract with the clients holding them (and with a broker of another build after a failover).
GOLDEN = [(HandleCodec(), "AYAAAAMAAAAAB1vNFQADAAAABwAAACoABm9yZGVycwAIUGF5bWVudHNKRePp-HLc6Q",
           ReceiptHandle("orders", "Payments", 2**31 + 3, 123_456_789, 3, (7 << 32) + 42)),
          (HandleCodec(b"cluster-key"), "AQAAAAAAAAAAAAAAAAABAAAAAAAAAAEAA2fDqQABdHI75NiKaIW1",
           ReceiptHandle("g\u00e9", "t", 0, 0, 1, 1))]


@pytest.mark.parametrize(("codec", "text", "handle"), GOLDEN)
def test_the_handles_of_the_first_release_decode_and_are_encoded_alike(
        codec: HandleCodec, text: str, handle: ReceiptHandle) -> None:
    assert codec.encode(handle) == text
    assert codec.decode(text) == handle
    assert codec.decode_for(text, group=handle.group, topic=handle.topic) == handle


@given(handles, names, names)
def test_decode_for_answers_what_decode_does_or_refuses_another_group_or_topic(
        handle: ReceiptHandle, group: str, topic: str) -> None:
    """decode_for's shortcut (the body's names compared with the expected ones as bytes)
    agrees with decode, whichever names it is given, and with a codec holding every pair's
    names already (their cache) or none."""
    text = CODEC.encode(handle)
    for codec in (CODEC, HandleCodec()):
        for expected_group, expected_topic in ((group, topic), (handle.group, topic),
                                               (group, handle.topic)):
            if (expected_group, expected_topic) == (handle.group, handle.topic):
                assert codec.decode_for(text, group=expected_group,
                                        topic=expected_topic) == handle
                continue
            with pytest.raises(HandleError, match="belongs to group"):
                codec.decode_for(text, group=expected_group, topic=expected_topic)
        assert codec.decode_for(text, group=handle.group, topic=handle.topic) == handle


def test_names_that_run_into_each_other_are_not_taken_for_the_expected_ones() -> None:
    """The names' part carries each name's length: ("ab", "c") is not ("a", "bc")."""
    text = CODEC.encode(ReceiptHandle("ab", "c", 0, 1, 1, 1))
    with pytest.raises(HandleError, match="belongs to group 'ab', topic 'c'"):
        CODEC.decode_for(text, group="a", topic="bc")


def test_the_names_kept_are_bounded() -> None:
    codec = HandleCodec()
    for number in range(NAMES_KEPT_MAX + 5):
        text = codec.encode(ReceiptHandle(f"g{number}", "t", 0, number, 1, 1))
        assert codec.decode_for(text, group=f"g{number}", topic="t").queue_offset == number
        assert len(codec._names) <= NAMES_KEPT_MAX
