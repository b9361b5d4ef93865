"""Group consumption in the DLedger simulation (ha/dledger/simulation/pops.py): pop records
decided by each term's leader, applied ahead of the commit there and by every member on
commit; no message acked twice, none delivered after its ack or dead letter, all acked or
dead-lettered at the end, every member's states the committed log's. Two broken variants
of the product's rules are each caught and named by seed."""

from __future__ import annotations

import pytest

from ha.dledger.simulation.pops import MESSAGE_COUNT, MemberPops, is_pop
from ha.dledger.simulation.sim import Simulation, SimulationFailure


def test_every_message_ends_acked_or_dead_lettered_and_cuts_rebuild_the_states() -> None:
    cut_rebuilds = 0
    for seed in range(0, 40, 2):  # the seeds that carry group consumption
        simulation = Simulation(seed)
        simulation.run()
        truth = simulation.pop_truth
        assert truth.acked | truth.dead == set(range(MESSAGE_COUNT))
        assert not truth.acked & truth.dead
        records = sum(1 for _, payload in simulation.invariants.committed.values()
                      if is_pop(payload))
        assert records > MESSAGE_COUNT // 3, (seed, records)
        cut_rebuilds += sum(member.pops.cut_rebuilds for member in simulation.members.values())
    assert cut_rebuilds > 0  # the faults did cut records a leader had applied ahead


def _caught(seeds: int) -> str:
    with pytest.raises(SimulationFailure) as failure:
        for seed in range(seeds):
            Simulation(seed).run()
    return str(failure.value)


def test_a_member_keeping_what_a_cut_took_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """A member whose states keep a record it applied ahead of the commit after the next
    leader's log cut it: the records committed after it do not apply there."""
    monkeypatch.setattr(MemberPops, "rebuild_on_cut", False)
    message = _caught(40)
    assert "pops:" in message and "seed=" in message


def test_a_leader_deciding_before_its_take_over_is_committed_is_caught(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A leader deciding as soon as it leads, before the previous leader's tail it holds is
    committed and applied: its decisions conflict with that tail's."""
    monkeypatch.setattr(MemberPops, "decide_at_once", True)
    message = _caught(40)
    assert "pops:" in message and "seed=" in message
