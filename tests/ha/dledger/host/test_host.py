"""The DLedger host driven by hand (no thread, a fake clock): ticks from the clock, group
commit, the client API's bounds, the quorum deadline in ms, and a clean stop."""

from __future__ import annotations

import random
import threading

import pytest

from ha.dledger.core.actions import AppendStatus, TransferStatus
from ha.dledger.core.member import Role
from ha.dledger.core.messages import (
    Entry,
    Message,
    PushRequest,
    PushResponse,
    VoteRequest,
    VoteResponse,
)
from ha.dledger.host.append_future import AppendFuture
from ha.dledger.host.host import AppendResult, DLedgerHost, HostState
from ha.dledger.host.host_config import HostConfig
from ha.dledger.host.memory_storage import MemoryStorage
from store.errors import ConfigError

CONFIG = HostConfig(tick_ms=10, election_timeout_ms=100, heartbeat_interval_ms=20,
                    push_timeout_ms=50, quorum_deadline_ms=205, pending_appends_max=4)


class FakeClock:
    def __init__(self) -> None:
        self.now_ms = 0.0

    def __call__(self) -> float:
        return self.now_ms


class Rig:
    def __init__(self, member_ids: tuple[str, ...], config: HostConfig = CONFIG) -> None:
        self.clock = FakeClock()
        self.storage = MemoryStorage()
        self.sent: list[tuple[str, Message]] = []
        self.host = DLedgerHost("n0", member_ids, config, self.storage,
                                lambda target, message: self.sent.append((target, message)),
                                self.clock, random.Random(1))
        self.host.open()

    def advance(self, duration_ms: float) -> None:
        """Move the clock in steps of one tick, running a round at each."""
        end_ms = self.clock.now_ms + duration_ms
        while self.clock.now_ms < end_ms:
            self.clock.now_ms = min(end_ms, self.clock.now_ms + self.host.config.tick_ms)
            self.host.run_once()

    def elect_alone(self) -> None:
        self.advance(2 * CONFIG.election_timeout_ms)
        assert self.host.status().role == Role.LEADER.value

    def elect_with_votes(self) -> None:
        """Become leader of a 3-member group on n1's (scripted) votes."""
        while not any(isinstance(m, VoteRequest) for _, m in self.sent):
            self.advance(CONFIG.tick_ms)
        self.host.receive(VoteResponse("n1", 1, True, True))
        self.host.run_once()
        self.host.receive(VoteResponse("n1", 1, True, False))
        self.host.run_once()
        assert self.host.status().role == Role.LEADER.value


def test_single_member_elects_itself_from_clock_ticks() -> None:
    """Ticks come from the injected clock: no leader before the election timeout, one after."""
    rig = Rig(("n0",))
    rig.advance(CONFIG.election_timeout_ms - CONFIG.tick_ms)
    assert rig.host.status().role == Role.FOLLOWER.value
    rig.advance(CONFIG.election_timeout_ms + CONFIG.tick_ms)
    status = rig.host.status()
    assert (status.role, status.term, status.leader_id) == (Role.LEADER.value, 1, "n0")
    assert rig.storage.hard_state.term == 1


def test_a_round_of_appends_is_one_group_commit() -> None:
    """Appends taken in one round are made durable by one sync, then all complete OK."""
    rig = Rig(("n0",), HostConfig(**{**_fields(CONFIG), "pending_appends_max": 64}))
    rig.elect_alone()
    syncs_before = rig.storage.sync_count
    futures = [rig.host.append(lambda i=i: b"m%d" % i) for i in range(10)]
    rig.host.run_once()
    assert rig.storage.sync_count == syncs_before + 1
    results = [future.result(0) for future in futures]
    assert [r.status for r in results] == [AppendStatus.OK] * 10
    assert [r.index for r in results] == list(range(2, 12))  # 1 is the leader's no-op
    assert [e.payload for e in rig.storage.durable_entries()][1:] == [b"m%d" % i
                                                                    for i in range(10)]
    assert rig.storage.committed_index == 11


def test_encode_runs_on_the_host_thread_only_when_leader() -> None:
    """A follower never calls encode (NOT_LEADER); a leader calls it on the host's thread."""
    rig = Rig(("n0", "n1", "n2"))
    calls: list[str] = []

    def encode() -> bytes:
        calls.append(threading.current_thread().name)
        return b"x"

    refused = rig.host.append(encode)
    caller = threading.Thread(target=rig.host.run_once, name="the-host")
    caller.start()
    caller.join()
    assert refused.result(0).status is AppendStatus.NOT_LEADER and calls == []
    rig.elect_with_votes()
    rig.host.append(encode)
    caller = threading.Thread(target=rig.host.run_once, name="the-host")
    caller.start()
    caller.join()
    assert calls == ["the-host"]


def test_an_encode_failure_fails_only_that_append() -> None:
    """An exception in encode reaches that caller's future; the host goes on."""
    rig = Rig(("n0",))
    rig.elect_alone()

    def broken() -> bytes:
        raise ValueError("bad record")

    failed = rig.host.append(broken)
    fine = rig.host.append(lambda: b"ok")
    rig.host.run_once()
    with pytest.raises(ValueError, match="bad record"):
        failed.result(0)
    assert fine.result(0).status is AppendStatus.OK


def test_an_append_fenced_by_a_term_is_refused_in_any_other_term() -> None:
    """An append naming the term it was decided in is appended while the node leads that term,
    and refused (NOT_LEADER, never encoded) once it leads a later one; an append after it in
    the same round that names the current term, or none, goes through."""
    rig = Rig(("n0",))
    rig.elect_alone()
    term = rig.host.leading_term()
    assert term is not None
    encoded: list[bytes] = []

    def encode(payload: bytes) -> bytes:
        encoded.append(payload)
        return payload

    current = rig.host.append(lambda: encode(b"current"), term)
    stale = rig.host.append(lambda: encode(b"stale"), term - 1)
    later = rig.host.append(lambda: encode(b"unfenced"))
    rig.host.run_once()
    assert current.result(0).status is AppendStatus.OK
    assert stale.result(0).status is AppendStatus.NOT_LEADER
    assert later.result(0).status is AppendStatus.OK
    assert encoded == [b"current", b"unfenced"]


def test_quorum_deadline_in_ms_maps_to_ticks() -> None:
    """205 ms with 10 ms ticks is 21 ticks: no answer after 200 ms, WAIT_QUORUM_ACK_TIMEOUT
    (indeterminate) by 220 ms."""
    # An election timeout well past the deadline: the leader keeps its lease meanwhile.
    rig = Rig(("n0", "n1", "n2"), HostConfig(**{**_fields(CONFIG), "election_timeout_ms": 1000}))
    rig.elect_with_votes()
    assert rig.host._node_config.quorum_deadline_ticks == 21
    future = rig.host.append(lambda: b"lonely")
    rig.host.run_once()
    rig.advance(200)
    assert not future.done()
    rig.advance(20)
    assert future.result(0).status is AppendStatus.WAIT_QUORUM_ACK_TIMEOUT


def test_pending_appends_are_bounded() -> None:
    """Past pending_appends_max unanswered appends, the next is LEADER_PENDING_FULL at once."""
    rig = Rig(("n0", "n1", "n2"))
    rig.elect_with_votes()
    waiting = [rig.host.append(lambda: b"w") for _ in range(CONFIG.pending_appends_max)]
    refused = rig.host.append(lambda: b"one too many")
    assert refused.result(0).status is AppendStatus.LEADER_PENDING_FULL
    rig.host.run_once()
    assert not any(future.done() for future in waiting)
    assert rig.host.status().pending_appends == CONFIG.pending_appends_max


def test_stop_answers_every_pending_append() -> None:
    """On stop an append the node holds is LEADERSHIP_LOST, one still in the inbox NOT_LEADER,
    and one after stop NOT_LEADER at once."""
    rig = Rig(("n0", "n1", "n2"))
    rig.elect_with_votes()
    in_node = rig.host.append(lambda: b"in the node")
    rig.host.run_once()
    in_inbox = rig.host.append(lambda: b"in the inbox")
    rig.host.stop()
    assert in_node.result(0).status is AppendStatus.LEADERSHIP_LOST
    assert in_inbox.result(0).status is AppendStatus.NOT_LEADER
    assert rig.host.append(lambda: b"late").result(0).status is AppendStatus.NOT_LEADER
    assert rig.host.state is HostState.STOPPED


def test_full_inbox_drops_peer_messages_and_refuses_appends() -> None:
    """A full inbox drops a peer message (counted) and answers an append LEADER_PENDING_FULL."""
    rig = Rig(("n0", "n1", "n2"), HostConfig(**{**_fields(CONFIG), "inbox_max": 2}))
    for _ in range(3):
        rig.host.receive(VoteResponse("n1", 0, False, True))
    assert rig.host.status().inbox_dropped_count == 1
    future: AppendFuture[AppendResult] = rig.host.append(lambda: b"x")
    assert future.result(0).status is AppendStatus.LEADER_PENDING_FULL


def test_status_reports_peers_for_the_admin_view() -> None:
    """The leader's status names each peer's match, lag, pushes in flight and last contact."""
    rig = Rig(("n0", "n1", "n2"))
    rig.elect_with_votes()
    rig.advance(30)
    status = rig.host.status()
    by_id = {peer.peer_id: peer for peer in status.peers}
    assert (status.self_id, status.term, status.leader_id) == ("n0", 1, "n0")
    assert status.end_index == 1 and status.committed_index == 0
    assert by_id["n1"].match_index == 0 and by_id["n1"].lag_entries == 1
    assert by_id["n1"].last_contact_ms_ago == 30
    assert by_id["n2"].last_contact_ms_ago is None
    assert (by_id["n2"].dispatcher_state, by_id["n2"].inflight_pushes) == ("COMPARE", 0)


def test_peer_figures_are_refreshed_once_a_tick_and_on_a_role_change() -> None:
    """Rounds between ticks publish the scalars (commit, end) but keep the peers' samples of
    the last tick; the next tick refreshes them, and so does winning an election."""
    rig = Rig(("n0", "n1", "n2"))
    while not any(isinstance(m, VoteRequest) for _, m in rig.sent):
        rig.advance(CONFIG.tick_ms)
    assert all(peer.match_index is None for peer in rig.host.status().peers)
    rig.host.receive(VoteResponse("n1", 1, True, True))
    rig.host.run_once()
    rig.host.receive(VoteResponse("n1", 1, True, False))
    rig.host.run_once()  # no tick is due: the role changed, so the peers are sampled
    status = rig.host.status()
    assert status.role == Role.LEADER.value
    by_id = {peer.peer_id: peer for peer in status.peers}
    assert (by_id["n1"].match_index, by_id["n1"].lag_entries) == (0, 1)
    for _ in range(3):  # answer n1's probe, then its push of the no-op (no tick due)
        pushes = [m for t, m in rig.sent if t == "n1" and isinstance(m, PushRequest)]
        rig.sent.clear()
        for push in pushes:
            match = push.prev_index + len(push.entries)
            rig.host.receive(PushResponse("n1", push.term, True, push.prev_index, match,
                                          0, 0, match))
        rig.host.run_once()
    status = rig.host.status()  # the commit moved at once, n1's sample waits for the tick
    assert status.committed_index == 1
    n1 = {p.peer_id: p for p in status.peers}["n1"]
    # Its lag is counted from this view's end, so a stale match never reads as caught up.
    assert (n1.match_index, n1.lag_entries) == (0, status.end_index)
    rig.advance(CONFIG.tick_ms)
    n1 = {p.peer_id: p for p in rig.host.status().peers}["n1"]
    assert (n1.match_index, n1.lag_entries) == (1, 0)


def test_a_round_that_commits_flushes_its_messages_then_ends_with_after_round() -> None:
    """A round that moves the commit writes the peers' queued messages (io.flush), then runs
    storage.after_round() once, after its answers; a round that commits nothing runs
    neither."""
    calls: list[str] = []

    class Storage(MemoryStorage):
        def set_committed(self, index: int) -> None:
            calls.append(f"commit {index}")
            super().set_committed(index)

        def after_round(self) -> None:
            calls.append("after_round")

    class IO:
        def poll(self, timeout_s: float) -> None:
            calls.append("poll")

        def flush(self) -> None:
            calls.append("flush")

        def wake(self) -> None:
            pass

    clock = FakeClock()
    host = DLedgerHost("n0", ("n0",), CONFIG, Storage(), lambda target, message: None, clock,
                       random.Random(1))
    host.use_io(IO())
    host.open()
    while host.status().role != Role.LEADER.value:
        clock.now_ms += CONFIG.tick_ms
        host.run_once()
    calls.clear()
    future = host.append(lambda: b"x")
    future.add_done_callback(lambda _: calls.append("answered"))
    host.run_once()
    assert calls == ["commit 2", "answered", "flush", "after_round"]
    calls.clear()
    host.run_once()  # nothing to commit
    assert calls == []


def test_times_must_fit_the_tick() -> None:
    """A heartbeat not shorter than the election timeout is refused by name."""
    with pytest.raises(ConfigError, match="heartbeat_interval_ms"):
        HostConfig(tick_ms=10, election_timeout_ms=100, heartbeat_interval_ms=100)


def test_start_twice_is_refused() -> None:
    """A host opens its storage once; a second start is a clear error."""
    rig = Rig(("n0",))
    with pytest.raises(RuntimeError, match="cannot start"):
        rig.host.start()


def _fields(config: HostConfig) -> dict[str, int]:
    return {name: getattr(config, name) for name in config.__dataclass_fields__}


def test_memory_storage_keeps_only_what_was_synced() -> None:
    """Log changes reach the durable copy at sync only: a crash loses the rest."""
    from ha.dledger.core.messages import Entry

    storage = MemoryStorage()
    _, log = storage.open()
    log.append(Entry(1, 1, b"a"))
    storage.sync()
    log.append(Entry(2, 1, b"b"))
    log.truncate_from(1)
    storage.crash()
    _, recovered = storage.open()
    assert recovered.entries() == (Entry(1, 1, b"a"),)
    recovered.truncate_from(1)
    recovered.append(Entry(1, 2, b"c"))
    storage.sync()
    assert storage.durable_entries() == (Entry(1, 2, b"c"),)


def test_transfer_refusal_and_one_transfer_at_a_time() -> None:
    """A follower's transfer is refused NOT_LEADER; on the leader a second transfer while one
    runs is IN_PROGRESS at once, and stop ends the running one LEADERSHIP_LOST."""
    rig = Rig(("n0", "n1", "n2"))
    refused = rig.host.transfer_leadership("n1")
    rig.host.run_once()
    assert refused.result(0) is TransferStatus.NOT_LEADER
    rig.elect_with_votes()
    running = rig.host.transfer_leadership("n1")  # n1 never answers: it cannot catch up
    second = rig.host.transfer_leadership("n2")
    rig.host.run_once()
    assert second.result(0) is TransferStatus.IN_PROGRESS and not running.done()
    queued = rig.host.transfer_leadership("n2")
    rig.host.stop()
    assert running.result(0) is TransferStatus.LEADERSHIP_LOST
    assert queued.result(0) is TransferStatus.NOT_LEADER


def test_transfer_to_a_peer_that_never_catches_up_is_refused_in_time() -> None:
    """transfer_catchup_ms maps to ticks: a target that never acks is NOT_CAUGHT_UP by then."""
    config = HostConfig(**{**_fields(CONFIG), "election_timeout_ms": 1000,
                           "transfer_catchup_ms": 100})
    rig = Rig(("n0", "n1", "n2"), config)
    rig.elect_with_votes()
    transfer = rig.host.transfer_leadership("n1")
    rig.host.run_once()
    rig.advance(90)
    assert not transfer.done()
    rig.advance(20)
    assert transfer.result(0) is TransferStatus.NOT_CAUGHT_UP


def test_elections_started_are_counted_once_each() -> None:
    """Each election this member stands in (its vote for itself in a new term) counts once,
    whatever the rounds it spans; a vote for another member does not count."""
    rig = Rig(("n0",))
    rig.elect_alone()
    assert rig.host.status().elections_started_count == 1
    rig.advance(5 * CONFIG.election_timeout_ms)  # a leader alone never stands again
    assert rig.host.status().elections_started_count == 1
    other = Rig(("n0", "n1", "n2"))
    other.host.receive(VoteRequest("n1", 5, 0, 0, pre_vote=False))
    other.host.run_once()
    assert other.storage.hard_state.voted_for == "n1"
    assert other.host.status().elections_started_count == 0


def _push_from_n1(term: int, prev_index: int, payloads: list[bytes]) -> PushRequest:
    entries = tuple(Entry(prev_index + 1 + i, term, p) for i, p in enumerate(payloads))
    return PushRequest("n1", term, prev_index, 0, entries, 0, False)


def _answers(rig: Rig) -> list[PushResponse]:
    return [m for _, m in rig.sent if isinstance(m, PushResponse)]


def test_a_follower_syncs_before_it_answers_a_push_by_default() -> None:
    """Raft's rule (sync_before_ack, the default): the answer leaves in the round that synced."""
    rig = Rig(("n0", "n1", "n2"))
    rig.host.receive(_push_from_n1(1, 0, [b"a", b"b"]))
    rig.host.run_once()
    assert [a.match_index for a in _answers(rig)] == [2]
    assert rig.storage.sync_count == 1
    assert [e.payload for e in rig.storage.durable_entries()] == [b"a", b"b"]


def test_without_sync_before_ack_a_follower_answers_from_the_page_cache_and_syncs_later(
) -> None:
    """sync_before_ack=False (ASYNC_FLUSH): the answer leaves with no sync; the entries reach
    the disk once sync_interval_ms has passed since the last sync, and not before."""
    config = HostConfig(**{**_fields(CONFIG), "sync_before_ack": False,
                           "sync_interval_ms": 100})
    rig = Rig(("n0", "n1", "n2"), config)
    rig.clock.now_ms = 30.0
    rig.host.receive(_push_from_n1(1, 0, [b"a", b"b"]))
    rig.host.run_once()
    assert [a.match_index for a in _answers(rig)] == [2]
    assert rig.storage.sync_count == 0 and rig.storage.durable_entries() == ()
    rig.clock.now_ms = 99.0  # 99 ms after the host opened at 0
    rig.host.run_once()
    assert rig.storage.sync_count == 0
    rig.clock.now_ms = 100.0
    rig.host.run_once()
    assert rig.storage.sync_count == 1
    assert [e.payload for e in rig.storage.durable_entries()] == [b"a", b"b"]
    rig.clock.now_ms = 500.0
    rig.host.run_once()
    assert rig.storage.sync_count == 1  # nothing new: no sync


def test_a_round_of_appends_goes_out_in_one_push_a_peer() -> None:
    """Appends taken in one round are pushed once, together, after the round's events (not
    one push per append)."""
    rig = Rig(("n0", "n1", "n2"), HostConfig(**{**_fields(CONFIG), "pending_appends_max": 64}))
    rig.elect_with_votes()
    for _ in range(4):  # answer the probes until both peers are caught up (APPEND state)
        pushes = [(t, m) for t, m in rig.sent if isinstance(m, PushRequest)]
        rig.sent.clear()
        for target, push in pushes:
            match = push.prev_index + len(push.entries)
            rig.host.receive(PushResponse(target, push.term, True, push.prev_index, match,
                                          0, 0, match))
        rig.host.run_once()
    rig.sent.clear()
    futures = [rig.host.append(lambda i=i: b"m%d" % i) for i in range(10)]
    rig.host.run_once()
    pushes = [(t, m) for t, m in rig.sent if isinstance(m, PushRequest)]
    assert sorted(t for t, _ in pushes) == ["n1", "n2"]
    assert all([e.payload for e in m.entries] == [b"m%d" % i for i in range(10)]
               for _, m in pushes)
    assert not any(f.done() for f in futures)


def test_a_rounds_appends_go_to_the_node_together_in_inbox_order() -> None:
    """Consecutive appends in the inbox reach the node as one run (one start_appends, one
    append_many), an event between two runs keeps its place, and an append whose encode
    fails leaves the others of its run in order."""
    rig = Rig(("n0",), HostConfig(**{**_fields(CONFIG), "pending_appends_max": 64}))
    rig.elect_alone()
    assert rig.host._node is not None
    node_log = rig.host._node.log
    runs: list[list[bytes]] = []
    starts: list[int] = []
    real_append_many = node_log.append_many

    def append_many(entries: tuple[Entry, ...]) -> None:
        runs.append([e.payload for e in entries])
        real_append_many(entries)

    node_log.append_many = append_many  # type: ignore[method-assign]
    rig.storage.start_appends = lambda: starts.append(len(runs))  # type: ignore[method-assign]

    def broken() -> bytes:
        raise ValueError("bad record")

    futures = [rig.host.append(lambda i=i: b"a%d" % i) for i in range(3)]
    failed = rig.host.append(broken)
    futures.append(rig.host.append(lambda: b"a3"))
    rig.host.receive(VoteRequest("n9", 0, 0, 0, False))  # a stale term: ignored
    futures += [rig.host.append(lambda i=i: b"b%d" % i) for i in range(2)]
    rig.host.run_once()
    assert runs == [[b"a0", b"a1", b"a2", b"a3"], [b"b0", b"b1"]]
    assert starts == [0, 1]
    with pytest.raises(ValueError, match="bad record"):
        failed.result(0)
    assert [f.result(0).index for f in futures] == list(range(2, 8))
