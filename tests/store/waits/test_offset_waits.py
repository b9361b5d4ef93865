"""Puts waiting for an offset: one advance completes every wait at or below it, a deadline
ends a wait, and waits that can no longer be reached are completed with the status given."""

from __future__ import annotations

from store.status import PutMessageStatus
from store.waits.offset_waits import OffsetWaits

OK = PutMessageStatus.PUT_OK
TIMEOUT = PutMessageStatus.FLUSH_SLAVE_TIMEOUT


def test_one_advance_completes_every_wait_at_or_below_it() -> None:
    """Waits complete by end offset, not in the order they came; one above stays."""
    waits = OffsetWaits(TIMEOUT)
    high, low, exact = waits.add(300, 10_000), waits.add(100, 10_000), waits.add(200, 10_000)
    assert waits.advance(200) == 2 and (low.value, exact.value, high.value) == (OK, OK, None)
    assert len(waits) == 1 and waits.add(150, 10_000).value is OK  # reached already


def test_expire_ends_overdue_waits_with_the_timeout_status() -> None:
    """A wait ends at its deadline, not before."""
    waits = OffsetWaits(TIMEOUT)
    early, late = waits.add(100, 50), waits.add(200, 80)
    assert waits.expire(49) == 0 and waits.expire(50) == 1
    assert (early.value, late.value, waits.next_deadline_ms()) == (TIMEOUT, None, 80)


def test_complete_through_ends_waits_at_or_below_an_offset_with_a_status() -> None:
    """Waits that can no longer be reached end with the status given; later ones stay, and
    the reached offset does not move (a later put at or below it still waits)."""
    waits = OffsetWaits(TIMEOUT)
    below, at, above = waits.add(100, 10_000), waits.add(200, 10_000), waits.add(201, 10_000)
    assert waits.complete_through(200, TIMEOUT) == 2
    assert (below.value, at.value, above.value) == (TIMEOUT, TIMEOUT, None)
    assert len(waits) == 1 and waits.reached_offset == 0
    assert waits.advance(201) == 1 and above.value is OK
