from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from store.paths import name_to_offset, offset_to_name


@given(st.integers(0, 10**20 - 1))
def test_offset_names_round_trip(offset: int) -> None:
    """A file name parses back to the start offset it was made from."""
    name = offset_to_name(offset)
    assert len(name) == 20
    assert name_to_offset(name) == offset


def test_foreign_names_are_not_offsets() -> None:
    """Names that are not exactly 20 ASCII digits are not ours."""
    for name in ["", "123", "0000000000000000000a", "000000000000000000000", "٠" * 20]:
        assert name_to_offset(name) is None
