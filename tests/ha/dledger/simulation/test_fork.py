"""The seeded simulation's forked member (ha/dledger/simulation/fork.py)."""

from __future__ import annotations

from ha.dledger.simulation.fork import ElectedForkSimulation, ForkSimulation


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


def test_a_forked_member_is_never_elected_while_the_groups_leader_is_down() -> None:
    """The group's leader is stopped as the forked member rejoins, so the member campaigns
    before any leader contacts it. Seeds 7, 47 and 51 elected it with the other member's
    vote (its last entry is of the group's term and further on) before the commit mark in
    vote grants; now it never leads with a log that contradicts a member's committed prefix,
    and the group takes appends again once its leader is back. Seeds 0-19 as well."""
    for seed in (7, 47, 51, *range(20)):
        simulation = ElectedForkSimulation(seed)
        simulation.run()
        assert simulation.stopped_leader_id is not None, f"seed {seed}: no leader stopped"
