"""A forked member in the simulation: one that led a group of its own, then rejoined.

DLedger's membership file refuses a start with another peer list; with the override, a
member started alone elects itself and commits on its own. Here: a healthy group; its leader
is killed; once the others elected a new leader, the killed member starts *alone* (the links
between it and the group cut, as its transport would refuse them) and takes client appends;
then it is stopped and started again with the group's peer list. The member's term after its
lone election is often the group's own new term, so both logs hold entries of one (index,
term) with other payloads, which Raft's term check cannot tell apart (`fork_term_equal`).

What the lone member did is checked against its own `Invariants` (it is a group of one); the
group's invariants hold for everything else, the rejoined member included: it must end
holding the group's log, never commit one of its forked entries again, and apply the group's
metadata (its tables are rebuilt from its log at the rejoin, as a store's cut rebuilds them).

    python -m ha.dledger.simulation.fork --seeds 50   # how many forks were of equal term
"""

from __future__ import annotations

import argparse

from ha.dledger.core.actions import Action, AppendStatus, CompleteAppend
from ha.dledger.core.config import DLedgerConfig
from ha.dledger.core.member import Role
from ha.dledger.simulation.invariants import Invariants
from ha.dledger.simulation.metadata import MetadataTables
from ha.dledger.simulation.sim import Faults, SimResult, Simulation
from ha.dledger.simulation.timers import MemberTimers


class ForkSimulation(Simulation):
    replay_command = ("python -c 'from ha.dledger.simulation.fork import ForkSimulation; "
                      "ForkSimulation({seed}).run()'")

    def __init__(self, seed: int, node_count: int = 3, settle_ticks: int = 200,
                 alone_ticks: int = 150, config: DLedgerConfig | None = None) -> None:
        config = config or DLedgerConfig(election_timeout_ticks=10, heartbeat_ticks=2,
                                         push_timeout_ticks=6, quorum_deadline_ticks=40)
        self.kill_tick = settle_ticks
        self.fork_tick = settle_ticks + 8 * config.election_timeout_ticks
        self.rejoin_tick = self.fork_tick + alone_ticks
        # Faults stay "on" through the rejoin so that the cut links hold; none are drawn.
        super().__init__(seed, node_count, fault_ticks=self.rejoin_tick + 1, heal_ticks=500,
                         faults=Faults.healthy(), config=config)
        self.forked_id: str | None = None
        self.alone = False
        self.alone_invariants = Invariants()
        self.group_term = 0  # the group's leader term when the forked member started alone
        self.alone_term = 0  # the term the forked member led alone

    @property
    def fork_term_equal(self) -> bool:
        return self.alone_term == self.group_term > 0

    def run(self) -> SimResult:
        self._schedule(self.kill_tick, "kill", ())
        self._schedule(self.fork_tick, "fork", ())
        self._schedule(self.rejoin_tick, "rejoin", ())
        return super().run()

    def _member_ids_of(self, node_id: str) -> list[str]:
        return [node_id] if self.alone and node_id == self.forked_id else self.ids

    def _handle(self, kind: str, payload: tuple[object, ...]) -> None:
        if kind == "kill":
            leaders = self._leaders()
            assert len(leaders) == 1, f"seed {self.seed}: no single leader to kill"
            self.forked_id = leaders[0]
            self._crash(self.forked_id, restart=False)
        elif kind == "fork":
            self._start_alone()
        elif kind == "rejoin":
            self._rejoin()
        else:
            super()._handle(kind, payload)

    def _leaders(self) -> list[str]:
        return [i for i in self.ids if self.members[i].node is not None
                and self.members[i].node.role is Role.LEADER]  # type: ignore[union-attr]

    def _start_alone(self) -> None:
        forked_id = self.forked_id
        assert forked_id is not None
        group_leaders = self._leaders()
        assert group_leaders, f"seed {self.seed}: the group elected no leader"
        self.group_term = self.members[group_leaders[0]].node.term  # type: ignore[union-attr]
        self.cut_links = {(a, b) for a in self.ids for b in self.ids
                          if a != b and forked_id in (a, b)}
        self.alone = True
        self._start(forked_id)

    def _rejoin(self) -> None:
        forked_id = self.forked_id
        assert forked_id is not None
        node = self.members[forked_id].node
        assert node is not None
        self.alone_term = node.term
        self._crash(forked_id, restart=False)
        self.alone = False
        self.cut_links.clear()
        self.members[forked_id].tables = MetadataTables()
        # Its timer state too: the delayed puts it took alone are cut with its forked entries.
        self.members[forked_id].timers = MemberTimers()
        self._start(forked_id)

    def _run(self, node_id: str, actions: list[Action]) -> None:
        if not (self.alone and node_id == self.forked_id):
            super()._run(node_id, actions)
            return
        group_invariants, self.invariants = self.invariants, self.alone_invariants
        try:
            super()._run(node_id, actions)
        finally:
            self.invariants = group_invariants


class ElectedForkSimulation(ForkSimulation):
    """The forked member rejoins while the group has no live leader: the group's leader is
    stopped at the rejoin and started again `leader_down_ticks` later, so the forked member
    campaigns before any leader contacts it. Checked after every event: the forked member
    never leads while its log contradicts a live member's committed prefix (it lacks a
    committed entry, or holds another at its index); and at the end, the group took client
    appends again once its leader was back."""

    replay_command = ("python -c 'from ha.dledger.simulation.fork import "
                      "ElectedForkSimulation; ElectedForkSimulation({seed}).run()'")

    def __init__(self, seed: int, leader_down_ticks: int = 60) -> None:
        super().__init__(seed)
        self.leader_back_tick = self.rejoin_tick + leader_down_ticks
        self.stopped_leader_id: str | None = None
        self.forked_leader_terms: list[int] = []
        self.acknowledged_after_back = 0

    def run(self) -> SimResult:
        self._schedule(self.leader_back_tick, "leader_back", ())
        return super().run()

    def _handle(self, kind: str, payload: tuple[object, ...]) -> None:
        if kind == "rejoin":
            leaders = [i for i in self._leaders() if i != self.forked_id]
            if leaders:
                self.stopped_leader_id = leaders[0]
                self._crash(leaders[0], restart=False)
            super()._handle(kind, payload)
        elif kind == "leader_back":
            if self.stopped_leader_id is not None:
                self._start(self.stopped_leader_id)
        else:
            super()._handle(kind, payload)

    def _on_heal(self) -> None:
        """The heal (right after the rejoin) starts every member but the stopped leader."""
        self.cut_links.clear()
        for node_id in self.ids:
            if node_id != self.stopped_leader_id or self.now >= self.leader_back_tick:
                self._start(node_id)

    def _run(self, node_id: str, actions: list[Action]) -> None:
        super()._run(node_id, actions)
        if node_id == self.forked_id and not self.alone:
            self._check_forked_leader()

    def _check_forked_leader(self) -> None:
        node = self.members[self.forked_id or ""].node
        if node is None or node.role is not Role.LEADER \
                or node.term in self.forked_leader_terms:
            return
        self.forked_leader_terms.append(node.term)
        for other_id in self.ids:
            other = self.members[other_id].node
            if other_id == self.forked_id or other is None:
                continue
            index = other.commit_index
            if index <= max(node.log.base_index, other.log.base_index):
                continue
            held = node.log.entry(index) if index <= node.log.last_index else None
            committed = other.log.entry(index)
            assert held is not None and (held.term, held.payload) == (
                committed.term, committed.payload), (
                f"forked member {self.forked_id} leads term {node.term} with a log that "
                f"contradicts {other_id}'s committed entry {index}")

    def _complete(self, node_id: str, action: CompleteAppend) -> None:
        super()._complete(node_id, action)
        if action.status is AppendStatus.OK and self.now >= self.leader_back_tick:
            self.acknowledged_after_back += 1

    def _check_converged(self) -> None:
        super()._check_converged()
        assert self.acknowledged_after_back > 0, (
            "liveness: no client append was acknowledged once the group's leader was back")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="forked members on the simulation")
    parser.add_argument("--seeds", type=int, default=50)
    args = parser.parse_args(argv)
    equal = 0
    for seed in range(args.seeds):
        simulation = ForkSimulation(seed)
        simulation.run()
        equal += simulation.fork_term_equal
    print(f"{args.seeds} forks rejoined their group, {equal} of them of the group's term")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
