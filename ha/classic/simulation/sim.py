"""A seeded deterministic simulation of classic replication driving the real cores.

One master and one to three slaves (sometimes a lying slave that acks more than it was sent,
and a foreign broker whose log is another master's), with producers, consumers and the
metadata records of the log (topics created, changed, deleted and created again, groups,
offset commits: ha/classic/simulation/clients.py, applied as metadata.py says), over a
simulated network (latency, stalls, cuts seen by one side or none, frames whose tags fail) and
simulated disks (a kill keeps the page cache, a power cut loses what was not flushed). An
operator fails over by hand: promotes the most advanced slave when the master is down, or
forces a promotion while it is up, and brings the old master back as a slave (ha/classic/
simulation/brokers.py is the glue; MasterCore, SlaveLink, SlaveCore, OffsetWaits and
PutCompletion are the real ones).

One `random.Random(seed)` draws the run's configuration and fault mix (swarm testing), then
every event; events sit in one heap ordered by (time, sequence), so a seed replays exactly:

    python -m ha.classic.simulation.sim --seed 1234         # replay one run
    python -m ha.classic.simulation.sim --seeds 10000 --workers 2   # many, prints count and time

The run's state is ha/classic/simulation/base.py, the network world.py, the brokers'
starts and stops lifecycle.py, the faults and the operator nemesis.py. The invariants
(ha/classic/simulation/invariants.py) are checked after every event; then the
faults stop, every broker comes back as the last master's slave, and the group must converge.
"""

from __future__ import annotations

import heapq

from ha.classic.simulation.clients import next_write, timer_write
from ha.classic.simulation.disk import METADATA_TOPIC
from ha.classic.simulation.invariants import InvariantViolation
from ha.classic.simulation.nemesis import Nemesis
from ha.classic.simulation.results import SimResult, summary
from ha.seeded_runs import main as seeded_main
from ha.seeded_runs import run_pooled
from ha.sim_timers import DELAY_TICKS_MAX, SIM_PLAN, delayed_put

EVENTS_MAX = 300_000  # a bound on one run, whatever the seed draws
CHUNK_SEEDS = 25  # seeds at most per task handed to a worker process
TIMER_SHARE = 0.1  # of the puts while faults last: a delayed message (ha/sim_timers.py)


class SimulationFailure(AssertionError):
    """An invariant or an assertion broke; the message names the seed and the event."""


class Simulation(Nemesis):
    # -- the event loop --------------------------------------------------------------------

    def run(self) -> SimResult:
        self._start_master(self.brokers["b0"])
        for broker in self.brokers.values():
            if broker.name != "b0":
                self._start_slave(broker)
        self.schedule(1, "put", self._put)
        self.schedule(5, "consume", self._consume)
        self.schedule(self.persist_every_ms, "persist", self._persist)
        self.schedule(self.faults.nemesis_every_ms, "nemesis", self._nemesis)
        self.schedule(self.fault_ms, "heal", self._heal)
        while self._heap and self._events < EVENTS_MAX:
            self.now_ms, _, label, action = heapq.heappop(self._heap)
            if self.now_ms > self.end_ms:
                break
            self._events += 1
            self._last_label = label
            try:
                action()
                self.invariants.after_event(self)
            except AssertionError as error:
                raise self._failure(error) from error
        try:
            self.invariants.converged(self)
        except AssertionError as error:
            raise self._failure(error) from error
        return SimResult(self.seed, self._events, self.invariants.put_ok_count, self.promotions,
                         self.forced_promotions, self.rejoins,
                         sum(self.invariants.cut_bytes.values()), self.metadata_records,
                         self.invariants.metadata_lost, self.invariants.metadata_checks_on,
                         self.invariants.promotions_metadata_checked,
                         len(self.brokers[self.leader].disk.timers.delivered))

    def _failure(self, error: AssertionError) -> SimulationFailure:
        kind = "invariant" if isinstance(error, InvariantViolation) else "assertion"
        return SimulationFailure(
            f"seed={self.seed} {kind} broke at event #{self._events} t={self.now_ms} ms "
            f"{self._last_label}: {error}\n"
            f"replay: python -m ha.classic.simulation.sim --seed {self.seed}")

    # -- clients ---------------------------------------------------------------------------

    def _put(self) -> None:
        masters = [b for b in self.brokers.values() if b.is_master]
        if masters:
            broker = self.rng.choice(masters)
            assert broker.master is not None
            message_id = self.next_message_id()
            if self.timers and self._faulty() and self.rng.random() < TIMER_SHARE:
                level = self.rng.choice((None, None, None, 1, SIM_PLAN.level_count))
                write = timer_write(delayed_put(message_id, self.now_ms,
                                                self.rng.randint(1, DELAY_TICKS_MAX), level))
            else:
                write = next_write(self.rng, broker.disk, self.now_ms, self.metadata_share)
            put = broker.master.put(message_id, write.topic, write.queue_id,
                                    write.payload_size, write.op, write.body)
            self.invariants.put_taken(broker.name, put)
            self.metadata_records += write.topic == METADATA_TOPIC
        if self.now_ms < self.end_ms - 1500:
            self.schedule(self.rng.randint(1, self.faults.put_every_ms_max), "put", self._put)

    def _consume(self) -> None:
        """A consumer reads a queue on any running broker: every entry names a whole record
        of that queue in its log."""
        up = [b for b in self.brokers.values() if b.up]
        if up:
            broker = self.rng.choice(up)
            self.invariants.queues_readable(broker.name, broker.disk)
        self.schedule(self.rng.randint(5, 50), "consume", self._consume)

    def _persist(self) -> None:
        """Every running broker's periodic flush of consumer offsets and its log position."""
        for broker in self.brokers.values():
            if broker.up:
                broker.disk.metadata.persist()
        self.schedule(self.persist_every_ms, "persist", self._persist)


def run_seeds(first_seed: int, count: int) -> list[SimResult]:
    return [Simulation(seed).run() for seed in range(first_seed, first_seed + count)]


def run_seeds_pooled(first_seed: int, count: int, workers: int) -> list[SimResult]:
    """The same seeds over at most `workers` processes; the first failure, in seed order, is
    raised as in `run_seeds`."""
    return run_pooled(run_seeds, first_seed, count, workers, CHUNK_SEEDS)


def main(argv: list[str] | None = None) -> int:
    description = __doc__.splitlines()[0] if __doc__ else None
    return seeded_main(argv, description, run_seeds_pooled, summary, SimulationFailure)


if __name__ == "__main__":
    raise SystemExit(main())
