"""Epochs as the core decides them, beside tests/ha/test_epochs.py: the values that reach the
wire and the admin views, the first epoch, the bound on a history, a diverged decision."""

from __future__ import annotations

from ha.classic.core.epochs import EPOCHS_MAX, Agreement, Decision, Epoch, begin_epoch, decide

A, B = b"a" * 16, b"b" * 16


def test_agreements_are_numbered_as_on_the_wire() -> None:
    """The decision's first byte on the wire is the agreement's value (ha/epochs.py)."""
    assert [(a.name, a.value) for a in Agreement] == [
        ("AGREED", 0), ("NEEDS_RESET", 1), ("DIVERGED", 2)]


def test_an_epoch_viewed_as_the_admin_api_shows_it() -> None:
    assert Epoch(3, 700, A).view() == {"epoch": 3, "start_offset": 700, "leader_id": A.hex()}


def test_the_first_epoch_is_number_one_at_the_max_offset() -> None:
    """A broker with no history becomes master in epoch 1, from its max offset."""
    assert begin_epoch([], 0, A) == [Epoch(1, 0, A)]
    assert begin_epoch([], 900, B) == [Epoch(1, 900, B)]


def test_a_history_keeps_at_most_epochs_max_the_oldest_dropped() -> None:
    history = [Epoch(number, number * 10, A) for number in range(1, EPOCHS_MAX + 1)]
    grown = begin_epoch(history, EPOCHS_MAX * 10 + 5, B)
    assert len(grown) == EPOCHS_MAX == 4096
    assert grown[0] == history[1] and grown[-1] == Epoch(EPOCHS_MAX + 1, EPOCHS_MAX * 10 + 5, B)


def test_a_diverged_slave_agrees_at_no_offset() -> None:
    """No epoch in common: the decision says -1, the offset nothing agrees up to."""
    assert decide([Epoch(1, 0, A)], 500, 0, [Epoch(1, 0, B)], 300) == Decision(
        Agreement.DIVERGED, -1)
