"""The master/slave diff: what `/admin/diff` shows, logged every `ha_diff_log_interval_s` as
the seed's printMasterAndSlaveDiff, and sampled into a bounded ring for snapshots."""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from dataclasses import dataclass, field

from ha.client import HAClient, SlaveLinkView
from ha.connection import SlaveView
from ha.service import HAService, RejectedSlave
from store.service import ServiceThread

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class MasterDiff:
    master_max_offset: int
    slaves: list[SlaveView]
    max_diff_bytes: int
    in_sync_slave_count: int
    slaves_needed: int
    epoch: int = 0
    rejected: list[RejectedSlave] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class DiffSample:
    """One slave's diff at a moment. `slave` is the link's address (a new ephemeral port on
    every reconnect), `slave_id` the slave's stable id (ha/identity.py, hex; empty while a
    connection is still in its handshake): reports key a slave's history by the id."""

    timestamp_ms: int
    slave: str
    ack_offset: int
    diff_bytes: int
    slave_id: str = ""


def master_diff(service: HAService) -> MasterDiff:
    slaves = service.slave_views()
    return MasterDiff(
        master_max_offset=service.store.max_offset,
        slaves=slaves,
        max_diff_bytes=max((s.diff_bytes for s in slaves), default=0),
        in_sync_slave_count=sum(1 for s in slaves if s.in_sync),
        slaves_needed=service.config.slaves_needed,
        epoch=service.epochs[-1].number if service.epochs else 0,
        rejected=list(service.rejected),
    )


class DiffSampler(ServiceThread):
    """Logs the diff and keeps the last `samples_max` samples (oldest dropped first)."""

    name = "ha-diff"

    def __init__(self, source: HAService | HAClient, interval_s: float, samples_max: int,
                 sample_interval_s: float = 1.0) -> None:
        super().__init__()
        self._source = source
        self._log_interval_s = interval_s
        self._sample_interval_s = min(sample_interval_s, interval_s)
        self._last_log_s = time.monotonic()
        self._samples: deque[DiffSample] = deque(maxlen=samples_max)
        self._samples_lock = threading.Lock()

    def run_once(self) -> float:
        now_ms = int(time.time() * 1000)
        if isinstance(self._source, HAService):
            diff = master_diff(self._source)
            # A connection still in its handshake has no id (nor an ack) yet: not sampled.
            rows = [(s.address, s.ack_offset, s.diff_bytes, s.slave_id) for s in diff.slaves
                    if s.slave_id]
            text = f"master max offset {diff.master_max_offset}: " + (", ".join(
                f"{a} acked {o} diff {d} B" for a, o, d, _ in rows) or "no slave")
        else:
            # A slave samples its own link: the id is its own.
            view: SlaveLinkView = self._source.view()
            rows = [(view.master_address, view.local_max_offset, view.diff_bytes,
                     self._source.slave_id.hex())]
            text = (f"slave max offset {view.local_max_offset}, master seen "
                    f"{view.master_offset_seen}, connected {view.connected}")
        with self._samples_lock:
            self._samples.extend(DiffSample(now_ms, a, o, d, i) for a, o, d, i in rows)
        if time.monotonic() - self._last_log_s >= self._log_interval_s:
            self._last_log_s = time.monotonic()
            log.info("ha diff: %s", text)
        return self._sample_interval_s

    def peek_samples(self) -> list[DiffSample]:
        """The samples kept now, oldest first, without removing them."""
        with self._samples_lock:
            return list(self._samples)

    def drop_samples(self, count: int) -> None:
        """Remove the `count` oldest samples (those a finished snapshot took)."""
        with self._samples_lock:
            for _ in range(min(count, len(self._samples))):
                self._samples.popleft()

    def drain_samples(self) -> list[DiffSample]:
        """The samples kept since the last drain (a snapshot takes them)."""
        with self._samples_lock:
            samples = list(self._samples)
            self._samples.clear()
        return samples
