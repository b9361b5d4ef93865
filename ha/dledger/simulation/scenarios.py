"""Timing scenarios on the simulation, for the failover timing model (docs/dledger.md):

- a healthy group (no faults, delivery jitter of 0-3 ticks, steady appends) must elect once
  and then never start another (pre-)vote;
- failover: the leader of such a group dies (no restart); how many ticks until a client's
  append is answered OK by the next leader (the client learns the leader at once here, so a
  real client's redirect comes on top).

    python -m ha.dledger.simulation.scenarios --seeds 200   # failover p50/max, quiet group
"""

from __future__ import annotations

import argparse
import statistics
from dataclasses import dataclass

from ha.dledger.core.actions import AppendStatus, CompleteAppend
from ha.dledger.core.config import DLedgerConfig
from ha.dledger.core.member import Role
from ha.dledger.simulation.sim import Faults, Simulation


@dataclass(frozen=True)
class QuietRun:
    seed: int
    ticks: int
    terms: int  # leaders elected (one per term)
    pre_votes_after_first_leader: int


def healthy_run(seed: int, node_count: int = 3, ticks: int = 6000,
                config: DLedgerConfig | None = None) -> QuietRun:
    """A healthy group for `ticks` ticks, every invariant checked."""
    sim = Simulation(seed, node_count, fault_ticks=ticks, heal_ticks=200,
                     faults=Faults.healthy(), config=config or DLedgerConfig())
    sim.run()
    return QuietRun(seed, ticks, len(sim.invariants.leader_by_term),
                    sim.pre_votes_after_first_leader)


class FailoverSimulation(Simulation):
    """A healthy group whose leader is killed at a random tick past `settle_ticks`; a client
    appends every tick to the leader it sees."""

    def __init__(self, seed: int, node_count: int, config: DLedgerConfig,
                 delay_ticks_max: int = 3, settle_ticks: int = 300) -> None:
        limit_ticks = settle_ticks + 40 * config.election_timeout_ticks
        super().__init__(seed, node_count, fault_ticks=limit_ticks, heal_ticks=0,
                         faults=Faults.healthy(delay_ticks_max), config=config,
                         client_every_ticks_max=1)
        self.kill_tick = settle_ticks + self.rng.randrange(config.heartbeat_ticks * 4)
        self.killed_term = 0
        self.failover_ticks: int | None = None

    def run_failover(self) -> int:
        self._schedule(self.kill_tick, "kill", ())
        self.run()
        assert self.failover_ticks is not None, f"seed {self.seed}: no new leader answered OK"
        return self.failover_ticks

    def _handle(self, kind: str, payload: tuple[object, ...]) -> None:
        if kind != "kill":
            super()._handle(kind, payload)
            return
        leaders = [i for i in self.ids if self.members[i].node is not None
                   and self.members[i].node.role is Role.LEADER]  # type: ignore[union-attr]
        assert len(leaders) == 1, f"seed {self.seed}: no single leader to kill"
        self.killed_term = self.members[leaders[0]].node.term  # type: ignore[union-attr]
        self._crash(leaders[0], restart=False)

    def _complete(self, node_id: str, action: CompleteAppend) -> None:
        super()._complete(node_id, action)
        if self.killed_term and self.failover_ticks is None \
                and action.status is AppendStatus.OK and action.term > self.killed_term:
            self.failover_ticks = self.now - self.kill_tick
            self.end_tick = self.now  # enough: stop the run here

    def _check_converged(self) -> None:
        """The dead leader stays dead: convergence is the other runs' business."""


def failover_ticks(seeds: range, node_count: int, config: DLedgerConfig,
                   delay_ticks_max: int = 3) -> list[int]:
    return [FailoverSimulation(seed, node_count, config, delay_ticks_max).run_failover()
            for seed in seeds]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="DLedger failover timing on the simulation")
    parser.add_argument("--seeds", type=int, default=200)
    parser.add_argument("--quiet-ticks", type=int, default=6000)
    args = parser.parse_args(argv)
    config = DLedgerConfig()
    for node_count in (3, 5):
        ticks = sorted(failover_ticks(range(args.seeds), node_count, config))
        p50_ms = statistics.median(ticks) * config.tick_ms
        print(f"{node_count} nodes, {args.seeds} kills: failover p50 {p50_ms:.0f} ms, "
              f"p90 {ticks[int(len(ticks) * 0.9)] * config.tick_ms} ms, "
              f"max {ticks[-1] * config.tick_ms} ms (tick {config.tick_ms} ms)")
        quiet = [healthy_run(seed, node_count, args.quiet_ticks) for seed in range(5)]
        extra = sum(q.terms - 1 for q in quiet)
        pre_votes = sum(q.pre_votes_after_first_leader for q in quiet)
        print(f"{node_count} nodes, 5 healthy runs of {args.quiet_ticks} ticks: {extra} extra "
              f"elections, {pre_votes} pre-vote requests after the first leader")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
