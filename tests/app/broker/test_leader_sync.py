"""LeaderSync, driven by hand (no thread): the metadata sync follows whichever member leads,
stops when this member takes over, and the broker's cache is dropped once per take-over."""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.broker.leader_sync import LeaderSync
from app.broker.slave_sync import SlaveSync
from store.metadata import MetadataStore, sqlite_database_url

HUNG_TIMEOUT_S = 4.0
URLS = {"n0": "http://127.0.0.1:1", "n1": "http://127.0.0.1:2", "n2": "http://127.0.0.1:3"}


@dataclass
class FakeStatus:
    role: str
    leader_id: str | None
    self_id: str = "n0"
    term: int = 1
    committed_index: int = 0
    end_index: int = 0


@dataclass
class FakeMember:
    status_now: FakeStatus = field(default_factory=lambda: FakeStatus("FOLLOWER", None))

    def status(self) -> FakeStatus:
        return self.status_now


@dataclass
class FakeSync:
    master_http_address: str
    stopped: bool = False
    has_exited: bool = True

    def retire(self) -> None:
        self.stopped = True

    def stop(self) -> None:
        self.stopped = True


class Rig:
    def __init__(self) -> None:
        self.member = FakeMember()
        self.syncs: list[FakeSync] = []
        self.takeovers = 0
        self.caught_up_terms: list[int] = []
        self.dispatched = True  # what caught_up answers (False: dispatch behind the commit)
        self.step_downs = 0
        fake: Any = self.member
        self.leader_sync = LeaderSync(fake, URLS.get, self._start, self._took_over,
                                      self._caught_up, stepped_down=self._stepped_down)

    def _caught_up(self, term: int) -> bool:
        self.caught_up_terms.append(term)
        return self.dispatched

    def _stepped_down(self) -> None:
        self.step_downs += 1

    def _start(self, url: str) -> Any:
        self.syncs.append(FakeSync(url))
        return self.syncs[-1]

    def _took_over(self) -> None:
        self.takeovers += 1

    def step(self, role: str, leader_id: str | None, term: int = 1, committed_index: int = 0,
             end_index: int = 0) -> None:
        self.member.status_now = FakeStatus(role, leader_id, term=term,
                                            committed_index=committed_index,
                                            end_index=end_index)
        self.leader_sync.run_once()


def test_the_sync_follows_the_leader_and_stops_on_taking_over() -> None:
    """No leader: no sync; a leader elsewhere: a sync from it (once, not per check); a new
    leader: the old sync stopped, a new one from it; this member leads: the sync stopped and
    the take-over reported once; no leader known afterwards: nothing started."""
    rig = Rig()
    rig.step("FOLLOWER", None)
    assert rig.syncs == []
    rig.step("FOLLOWER", "n1")
    rig.step("FOLLOWER", "n1")
    assert [s.master_http_address for s in rig.syncs] == [URLS["n1"]]
    rig.step("FOLLOWER", "n2")
    assert [(s.master_http_address, s.stopped) for s in rig.syncs] == [
        (URLS["n1"], True), (URLS["n2"], False)]
    rig.step("LEADER", "n0")
    rig.step("LEADER", "n0")
    assert rig.syncs[-1].stopped and rig.leader_sync.sync is None and rig.takeovers == 1
    rig.step("CANDIDATE", None)
    assert len(rig.syncs) == 2
    rig.step("LEADER", "n0")
    assert rig.takeovers == 2
    rig.leader_sync.stop()


def test_stop_stops_the_running_sync() -> None:
    """Stopping the watcher stops the metadata sync it runs."""
    rig = Rig()
    rig.step("FOLLOWER", "n1")
    rig.leader_sync.stop()
    assert rig.syncs[0].stopped and rig.leader_sync.sync is None


def test_caught_up_once_the_commit_reaches_the_log_end_at_the_take_over() -> None:
    """A new leader is reported caught up (with its term) only when its commit reaches the end
    its log had as it took over, once; losing the lead before that reports nothing."""
    rig = Rig()
    rig.step("LEADER", "n0", term=2, committed_index=5, end_index=8)
    rig.step("LEADER", "n0", term=2, committed_index=7, end_index=9)
    assert rig.caught_up_terms == []
    rig.step("LEADER", "n0", term=2, committed_index=8, end_index=9)
    rig.step("LEADER", "n0", term=2, committed_index=9, end_index=9)
    assert rig.caught_up_terms == [2]
    rig.step("FOLLOWER", "n1", term=3)
    rig.step("LEADER", "n0", term=4, committed_index=9, end_index=12)
    rig.step("FOLLOWER", "n2", term=5, committed_index=12, end_index=12)
    assert rig.caught_up_terms == [2]
    rig.leader_sync.stop()


def test_caught_up_is_asked_again_until_the_broker_takes_writes() -> None:
    """A broker whose dispatch is still behind the commit takes no writes yet (caught_up
    answers False): the next check asks again, and none after it answered True."""
    rig = Rig()
    rig.dispatched = False
    rig.step("LEADER", "n0", term=3, committed_index=4, end_index=4)
    rig.step("LEADER", "n0", term=3, committed_index=4, end_index=5)
    assert rig.caught_up_terms == [3, 3]
    rig.dispatched = True
    rig.step("LEADER", "n0", term=3, committed_index=5, end_index=5)
    rig.step("LEADER", "n0", term=3, committed_index=6, end_index=6)
    assert rig.caught_up_terms == [3, 3, 3]
    rig.leader_sync.stop()


def test_a_member_leading_again_in_a_later_term_between_two_checks_takes_over_again() -> None:
    """Leader of term 2, then (unseen by the checks) follower, then leader of term 4: the
    check that sees term 4 reports the step-down, the take-over and, once the commit reaches
    term 4's take-over end, term 4 caught up (the broker's writes and its timer scheduler
    belong to one term: nothing of term 2 may go on in term 4). Losing the lead reports one
    step-down."""
    rig = Rig()
    rig.step("LEADER", "n0", term=2, committed_index=5, end_index=5)
    assert (rig.caught_up_terms, rig.takeovers, rig.step_downs) == ([2], 1, 0)
    rig.step("LEADER", "n0", term=4, committed_index=5, end_index=7)
    assert (rig.takeovers, rig.step_downs) == (2, 1)
    rig.step("LEADER", "n0", term=4, committed_index=7, end_index=8)
    assert rig.caught_up_terms == [2, 4]
    rig.step("FOLLOWER", "n1", term=5)
    rig.step("FOLLOWER", "n1", term=5)
    assert (rig.takeovers, rig.step_downs) == (2, 2)
    rig.leader_sync.stop()


def test_a_take_over_does_not_wait_for_a_sync_hung_on_the_dead_leader(tmp_path: Path) -> None:
    """The follower's metadata sync is in a request to the old leader, which died holding the
    connection open (no answer until the sync's timeout): on taking over, the check returns at
    once and reports the take-over caught up, rather than joining the sync for its timeout."""
    rig = Rig()
    metadata = MetadataStore(sqlite_database_url(tmp_path / "metadata.sqlite3"))
    # A listener that never accepts: the kernel completes the connection, nobody answers.
    dead_leader = socket.socket()
    try:
        dead_leader.bind(("127.0.0.1", 0))
        dead_leader.listen(8)
        url = f"http://127.0.0.1:{dead_leader.getsockname()[1]}"
        hung = SlaveSync(url, metadata, interval_s=60, timeout_s=HUNG_TIMEOUT_S,
                         auth_token=None)
        rig.leader_sync._start_sync = lambda _url: hung
        hung.start()
        rig.step("FOLLOWER", "n1")
        assert rig.leader_sync.sync is hung
        started = time.monotonic()
        rig.step("LEADER", "n0", term=2, committed_index=5, end_index=5)
        took_s = time.monotonic() - started
        assert rig.caught_up_terms == [2] and rig.leader_sync.sync is None
        assert took_s < HUNG_TIMEOUT_S / 2, f"the take-over waited {took_s:.1f} s"
    finally:
        # Closed before the join: the kernel resets the connection it completed, so the
        # retired sync's request fails now rather than at its timeout.
        dead_leader.close()
        rig.leader_sync.stop()  # joins the retired sync (at most its timeout)
        metadata.stop()
    assert hung.has_exited
