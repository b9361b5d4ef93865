"""The seeded simulation's forked member (ha/dledger/simulation/fork.py)."""

from __future__ import annotations

from ha.dledger.simulation.fork import ForkSimulation


def test_a_member_that_led_alone_rejoins_with_the_groups_log_and_commits_none_of_its_own(
) -> None:
    """Seeds 0-19: the killed leader starts alone, commits appends of its own, and rejoins.
    Every invariant holds for the group, the rejoined member included (it never commits one
    of its forked entries, and ends with every acknowledged append); most forks are of the
    group's own term, which only the payload check tells apart."""
    equal_term_count = 0
    for seed in range(20):
        simulation = ForkSimulation(seed)
        simulation.run()
        assert simulation.alone_invariants.acknowledged, f"seed {seed}: nothing led alone"
        equal_term_count += simulation.fork_term_equal
    assert equal_term_count >= 10, equal_term_count
