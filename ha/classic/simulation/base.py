"""The classic-replication simulation's state: the run's configuration drawn from its seed
(swarm testing: ha/classic/simulation/sim.py), its brokers, the clock and the event heap.

One `random.Random(seed)` draws the configuration and fault mix, then every event; events sit in
one heap ordered by (time, sequence), so a seed replays exactly.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable

from ha.classic.core.epochs import Epoch
from ha.classic.simulation.brokers import SimBroker
from ha.classic.simulation.disk import SimDisk
from ha.classic.simulation.invariants import Invariants
from ha.classic.simulation.network import Faults
from ha.config import HAConfig
from store.status import BrokerRole


class SimulationBase:
    def __init__(self, seed: int, fault_ms: int = 3500, heal_ms: int = 2500,
                 strict_metadata: bool = False, timers: bool = True) -> None:
        """`timers`: delayed messages in the mix (without them, a seed runs as it did before
        they were added: the tests that pin a finding to a seed keep it)."""
        self.seed = seed
        self.timers = timers
        self.rng = random.Random(seed)
        rng = self.rng
        self.faults = Faults.draw(rng)
        self.fault_ms, self.end_ms = fault_ms, fault_ms + heal_ms
        slave_count = rng.choice([1, 2, 2, 3])
        in_sync_replicas = rng.choice([2, 2, 3])
        self.master_role = rng.choice([BrokerRole.SYNC_MASTER] * 4 + [BrokerRole.ASYNC_MASTER])
        self.base_config = HAConfig(
            broker_role=self.master_role, ha_send_heartbeat_interval_ms=100,
            ha_housekeeping_interval_ms=rng.choice([300, 1000]), ha_reconnect_interval_ms=100,
            ha_handshake_timeout_ms=500, slave_timeout_ms=rng.choice([200, 600, 2000]),
            in_sync_replicas=in_sync_replicas,
            ha_slave_fall_behind_bytes_max=rng.choice([2048, 64 * 1024, 1 << 30]),
            # As few slots as slaves at times: the foreign broker takes one while it is
            # refused, so a slave may be refused a slot for a while, never for good.
            ha_connections_max=rng.choice([max(slave_count, in_sync_replicas - 1),
                                           slave_count + 1, 16]),
            ha_handshakes_max=rng.choice([1, 8]))
        self.batch_size_bytes = rng.choice([700, 4096])
        self.metadata_share = rng.choice([0.05, 0.2, 0.4])  # of the puts: metadata records
        self.persist_every_ms = rng.choice([100, 1000, 5000])  # consumer offsets' flush
        self.metadata_records = 0
        self.invariants = Invariants(self.base_config.in_sync_replicas,
                                     strict_metadata=strict_metadata)
        self.now_ms = 0
        self._heap: list[tuple[int, int, str, Callable[[], None]]] = []
        self._sequence = 0
        self._events = 0
        self._last_label = "start"
        self._connection_ids = 0
        self._message_ids = 0
        self.brokers: dict[str, SimBroker] = {}
        for index in range(slave_count + 1):
            name = f"b{index}"
            self.brokers[name] = SimBroker(name, name.encode().ljust(16, b"."), SimDisk(),
                                           sync_flush=rng.random() < 0.4)
        if rng.random() < 0.15 and slave_count > 1:
            self.brokers[f"b{slave_count}"].liar = True
        if rng.random() < 0.2:
            self.brokers["f"] = self._foreign_broker()
        self.leader = "b0"
        self.promotions = self.forced_promotions = self.rejoins = 0

    def _foreign_broker(self) -> SimBroker:
        """A broker whose log another master wrote: the master must refuse it (diverged)."""
        disk = SimDisk()
        for message_id in range(1, self.rng.randint(2, 6)):
            disk.append_record(10_000_000 + message_id, 1, 0, self.rng.randint(10, 300))
            disk.dispatch()
        disk.flush()
        disk.epochs = [Epoch(1, 0, b"foreign-master.."), Epoch(2, 100, b"foreign-master..")]
        return SimBroker("f", b"f".ljust(16, b"."), disk, sync_flush=False, foreign=True)

    def schedule(self, delay_ms: int, label: str, action: Callable[[], None]) -> None:
        assert delay_ms >= 0
        self._sequence += 1
        heapq.heappush(self._heap, (self.now_ms + delay_ms, self._sequence, label, action))

    def _faulty(self) -> bool:
        return self.now_ms < self.fault_ms
    def next_message_id(self) -> int:
        self._message_ids += 1
        return self._message_ids
