"""DLedger mode: a follower's metadata bootstrap follows the leader.

Topics, groups and consumer offsets are records of the replicated log (app/broker/metadata_log.py):
every member applies the committed ones by dispatch, in log order, so a new leader holds the
tables its committed log holds. What each follower still pulls from the leader, with the
classic slave's metadata sync (app/broker/slave_sync.py, pointed at whichever member leads
now), is what the log does not carry (delay offsets) and the bootstrap of a member whose log
lacks metadata records the leader's log no longer holds (retention). This thread watches the
member's published status every `check_interval_s`: a new leader elsewhere restarts the sync
against it, becoming the leader stops it and, once this member's commit reaches the log's end
as it took over, lets it take writes (`caught_up`), and no known leader leaves the last sync
running (it fails and backs off, bounded, until a leader is known).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from app.broker.slave_sync import SlaveSync
from store import MessageStore
from store.service import ServiceThread

if TYPE_CHECKING:
    from ha.dledger.commit_log import DLedgerCommitLog  # loaded by a broker in DLedger mode only

log = logging.getLogger(__name__)

# A new leader takes writes only after a check has seen it caught up: this adds at most one
# interval to a failover.
CHECK_INTERVAL_S = 0.05


def dispatched_to_commit(store: MessageStore, wait_s: float) -> bool:
    """Whether `store` dispatched every committed record, waiting up to `wait_s` for it."""
    deadline_s = time.monotonic() + wait_s
    while store.dispatch.dispatched_offset < (store.commit_limit or 0):
        if time.monotonic() >= deadline_s:
            log.warning("dledger: dispatch is at %d, behind the commit at %d: this leader "
                        "takes no writes yet", store.dispatch.dispatched_offset,
                        store.commit_limit or 0)
            return False
        time.sleep(0.01)
    return True


class LeaderSync(ServiceThread):
    name = "dledger-leader-sync"

    def __init__(self, member: DLedgerCommitLog, leader_url: Callable[[str], str | None],
                 start_sync: Callable[[str], SlaveSync],
                 became_leader: Callable[[], None],
                 caught_up: Callable[[int], bool] = lambda term: True,
                 check_interval_s: float = CHECK_INTERVAL_S,
                 stepped_down: Callable[[], None] = lambda: None) -> None:
        """`start_sync(url)` starts a metadata sync from that leader; `became_leader()` runs
        once each time this member takes over, in each term it leads (the broker drops what
        it cached; `stepped_down()` runs first when it led another term before, and when it
        stops leading);
        `caught_up(term)` once its commit then reaches the log's end as it took over (every
        entry the previous leader may have answered is committed here: the broker refills its
        idempotency window from them, then takes writes in that term), until it answers True
        (False: its dispatch is still behind the commit; asked again at the next check)."""
        super().__init__()
        self._member = member
        self._leader_url = leader_url
        self._start_sync = start_sync
        self._became_leader = became_leader
        self._caught_up = caught_up
        self._stepped_down = stepped_down
        self._check_interval_s = check_interval_s
        self.sync: SlaveSync | None = None
        # Syncs told to stop whose thread may still wait on a request (joined once it ends).
        self._retired: list[SlaveSync] = []
        self._led_term: int | None = None  # the term this member led at the last check
        self._takeover_end_index: int | None = None  # waiting for the commit to reach it

    def stop(self) -> None:
        super().stop()
        self._stop_sync()
        for sync in self._retired:
            sync.stop()  # each waits at most its request timeout
        self._retired.clear()

    def run_once(self) -> float:
        self._reap_retired()
        status = self._member.status()
        is_leader = status.role == "LEADER"
        if self._led_term is not None and (not is_leader or status.term != self._led_term):
            self._stepped_down()  # also when it led again in a later term between two checks
        if is_leader:
            self._stop_sync()
            if self._led_term != status.term:
                log.warning("dledger: %s leads term %d: writes come here once caught up",
                            status.self_id, status.term)
                self._takeover_end_index = status.end_index
                self._became_leader()
            if self._takeover_end_index is not None \
                    and status.committed_index >= self._takeover_end_index \
                    and self._caught_up(status.term):
                self._takeover_end_index = None
        else:
            self._takeover_end_index = None
        self._led_term = status.term if is_leader else None
        url = self._leader_url(status.leader_id) if status.leader_id else None
        if not is_leader and url is not None and (
                self.sync is None or self.sync.master_http_address != url.rstrip("/")):
            self._stop_sync()
            log.info("dledger: metadata sync from the leader %s at %s", status.leader_id, url)
            self.sync = self._start_sync(url)
        return self._check_interval_s

    def _stop_sync(self) -> None:
        """Retire the running sync without waiting for it: a request to a leader that died
        can hang until its timeout, and a take-over must not wait for that (nothing it pulls
        is applied once retired)."""
        if self.sync is not None:
            self.sync.retire()
            self._retired.append(self.sync)
            self.sync = None

    def _reap_retired(self) -> None:
        for sync in [sync for sync in self._retired if sync.has_exited]:
            sync.stop()  # the thread is gone: closes the client at once
            self._retired.remove(sync)
