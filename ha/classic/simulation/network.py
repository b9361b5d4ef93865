"""The simulated network of the classic-replication simulation: one `Pipe` per direction of
a TCP connection between a slave and its master.

A connection keeps TCP's promises: bytes arrive in order, once, or the connection breaks. So
the faults are the ones a TCP link shows to the program above it:
- delay: each message takes its own latency, but never arrives before the one sent before it;
- stall: a direction stops moving for a while (a full buffer, a paused peer), then goes on;
- cut: the connection breaks; each side hears of it on its own, or never (a half-open link,
  found only by housekeeping);
- drop, duplicate, reorder: on an authenticated link each shows as a frame whose tag fails
  (its sequence number is off), and the receiver closes with a protocol error.
The messages are the frames' contents (ha/protocol.py's and ha/auth.py's formats are tested
byte for byte apart from this).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from ha.classic.core.epochs import Decision, Epoch


@dataclass(frozen=True, slots=True)
class Hello:
    """master -> slave: the handshake begins."""


@dataclass(frozen=True, slots=True)
class Answer:
    """slave -> master: the slave's id and proof, then its epochs and max offset."""

    slave_id: str
    proves_secret: bool
    epochs: tuple[Epoch, ...]
    max_offset: int


@dataclass(frozen=True, slots=True)
class Agreed:
    """master -> slave: the master's proof, its decision and its history."""

    decision: Decision
    epochs: tuple[Epoch, ...]


@dataclass(frozen=True, slots=True)
class Frame:
    """master -> slave: commit-log bytes at an offset (a heartbeat when empty)."""

    offset: int
    body: bytes


@dataclass(frozen=True, slots=True)
class Report:
    """slave -> master: the slave's max offset."""

    offset: int


Message = Hello | Answer | Agreed | Frame | Report


@dataclass
class Pipe:
    """One direction of a connection: its last arrival time keeps the order, a stall holds
    everything until it ends."""

    last_arrival_ms: int = 0
    stalled_until_ms: int = 0

    def arrival_ms(self, now_ms: int, latency_ms: int) -> int:
        arrival = max(now_ms + latency_ms, self.last_arrival_ms, self.stalled_until_ms)
        self.last_arrival_ms = arrival
        return arrival


@dataclass
class Connection:
    """A TCP connection between a slave (its client end) and a master (the accepted end).
    `master_open` / `slave_open`: whether each end still uses it; `broken`: cut, nothing
    passes any more."""

    connection_id: int
    slave_name: str
    master_name: str
    master_incarnation: int
    slave_incarnation: int
    to_slave: Pipe = field(default_factory=Pipe)
    to_master: Pipe = field(default_factory=Pipe)
    master_open: bool = True
    slave_open: bool = True
    broken: bool = False


@dataclass(frozen=True)
class Faults:
    latency_ms_max: int
    corrupt_rate: float  # a frame whose tag fails (dropped, duplicated or reordered)
    nemesis_every_ms: int
    stall_ms_max: int
    put_every_ms_max: int
    flush_interval_ms: int  # ASYNC_FLUSH

    @classmethod
    def draw(cls, rng: random.Random) -> Faults:
        return cls(latency_ms_max=rng.choice([1, 3, 10, 40]),
                   corrupt_rate=rng.choice([0.0, 0.0, 0.002, 0.01]),
                   nemesis_every_ms=rng.choice([150, 400, 1000]),
                   stall_ms_max=rng.choice([50, 400, 1500]),
                   put_every_ms_max=rng.choice([4, 12, 30]),
                   flush_interval_ms=rng.choice([20, 200, 1000]))
