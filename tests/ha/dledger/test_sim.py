"""The seeded simulation: a fixed seed set passes, a run replays exactly, a broken node is
caught and named by seed."""

from __future__ import annotations

import pytest

from ha.dledger import node as node_module
from ha.dledger.actions import Send
from ha.dledger.messages import Message
from ha.dledger.node import DLedgerNode
from ha.dledger.sim import Simulation, SimulationFailure, main

SEEDS = range(40)


@pytest.mark.parametrize("seed", SEEDS)
def test_seed_keeps_every_invariant_and_loses_no_acknowledged_append(seed: int) -> None:
    """Under this seed's faults every invariant holds after every event, and after healing
    every node commits every acknowledged append."""
    result = Simulation(seed).run()
    assert result.acknowledged > 0 and result.committed >= result.acknowledged


def test_a_seed_replays_exactly() -> None:
    """Two runs of one seed see the same events and outcomes."""
    assert Simulation(3).run() == Simulation(3).run()


def test_a_node_answering_before_its_vote_is_durable_is_caught_with_its_seed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """With votes sent before the term+vote write is durable, a crash lets a node vote twice in
    a term; the simulation reports the broken invariant, the seed and how to replay it."""

    def send_at_once(self: DLedgerNode, target_id: str, message: Message) -> None:
        self._out.append(Send(target_id, message))

    monkeypatch.setattr(node_module.DLedgerNode, "_send_after_writes", send_at_once)
    messages = []
    for _ in range(2):
        with pytest.raises(SimulationFailure) as failure:
            for seed in range(100):
                Simulation(seed).run()
        messages.append(str(failure.value))
    assert messages[0].startswith("seed=30 invariant broke at event #")
    assert "election safety" in messages[0]
    assert "replay: python -m ha.dledger.sim --seed 30" in messages[0]
    assert messages[0] == messages[1]


def test_the_command_line_prints_how_many_seeds_passed(capsys: pytest.CaptureFixture[str]) -> None:
    """`python -m ha.dledger.sim --seeds 2` runs two seeds and says so."""
    assert main(["--seeds", "2", "--first-seed", "5"]) == 0
    assert capsys.readouterr().out.startswith("2 seeds from 5 passed in ")
