"""Byte-bounded pushes and the throttle for far-behind peers: a peer catching up from the start
of a long log cannot take the leader's uplink from the peers that commits depend on."""

from __future__ import annotations

from collections import deque

import pytest

from ha.dledger.core.actions import AppendStatus, Send
from ha.dledger.core.entry_log import EntryLog
from ha.dledger.core.messages import Entry, Message, PushRequest, payload_bytes, within_bytes
from tests.support.dledger.harness import Group, find_match, leader_with_log, make_node, unit_config

FIVE = ["n0", "n1", "n2", "n3", "n4"]
MESSAGE_OVERHEAD_BYTES = 64  # what a frame costs on the uplink besides its payloads


def sized_entries(count: int, size_bytes: int, term: int = 1) -> tuple[Entry, ...]:
    return tuple(Entry(i, term, bytes([i % 251]) * size_bytes) for i in range(1, count + 1))


def pushes_to(group: Group, target_id: str) -> list[PushRequest]:
    return [s.message for s in group.sends("n0", PushRequest)  # type: ignore[misc]
            if s.target_id == target_id]


def test_within_bytes_keeps_the_longest_fitting_prefix_and_at_least_one_entry() -> None:
    """Payloads of 100 bytes fit 2 per 250 bytes; a single entry larger than the bound goes
    alone; nothing is dropped from an empty batch."""
    small = sized_entries(5, 100)
    assert within_bytes(small, 250) == small[:2]
    assert within_bytes(small, 10_000) == small
    big = (Entry(1, 1, b"x" * 1000), Entry(2, 1, b"y"))
    assert within_bytes(big, 250) == big[:1]
    assert within_bytes((), 250) == ()


def test_every_push_stays_within_push_bytes_max_whatever_the_message_size() -> None:
    """A follower catching up on 100-byte entries, then on one 5,000-byte entry, is sent pushes
    of at most push_bytes_max payload bytes, or one entry alone, and receives everything."""
    log = EntryLog(entries=sized_entries(40, 100) + (Entry(41, 1, b"z" * 5000),))
    config = unit_config(push_bytes_max=250)
    nodes = [make_node("n0", FIVE[:3], log=log, term=1, config=config),
             make_node("n1", FIVE[:3], term=1, config=config, seed=1),
             make_node("n2", FIVE[:3], term=1, config=config, seed=2)]
    group = Group(nodes)
    group.elect("n0")
    group.tick_all(30)
    pushes = [p for p in pushes_to(group, "n1") if p.entries]
    assert all(payload_bytes(p.entries) <= 250 or len(p.entries) == 1 for p in pushes)
    assert max(payload_bytes(p.entries) for p in pushes) == 5000
    assert group.nodes["n1"].log.entries() == group.nodes["n0"].log.entries()


class Uplink:
    """The leader's outgoing link as one FIFO of `bytes_per_tick` (its NIC or its loop):
    everything n0 sends waits its turn; other members' messages arrive at once."""

    def __init__(self, group: Group, bytes_per_tick: int) -> None:
        self.group = group
        self.bytes_per_tick = bytes_per_tick
        self.queue: deque[tuple[str, Message]] = deque()
        self.now_tick = 0

    def tick(self) -> None:
        self.now_tick += 1
        for node_id in sorted(self.group.nodes):
            self.group.tick(node_id)
        self._route()
        sent_bytes = 0
        while self.queue:
            target_id, message = self.queue[0]
            cost = MESSAGE_OVERHEAD_BYTES + (
                payload_bytes(message.entries) if isinstance(message, PushRequest) else 0)
            if sent_bytes and sent_bytes + cost > self.bytes_per_tick:
                return
            sent_bytes += cost
            self.queue.popleft()
            self.group.run(target_id, self.group.nodes[target_id].receive(message))
            self._route()

    def _route(self) -> None:
        in_flight = self.group.in_flight
        while in_flight:
            source_id, target_id, message = in_flight.popleft()
            if source_id == "n0":
                self.queue.append((target_id, message))
            else:
                self.group.run(target_id, self.group.nodes[target_id].receive(message))


def commit_latencies_with_a_peer_catching_up(
        far_behind_entries: int) -> tuple[list[int | None], int]:
    """Five members hold 3,000 entries of 100 bytes but n4 is empty; n0 leads and takes one
    append per tick for 30 ticks. Returns the ticks each append waited for OK (None: it never
    got OK in 200 ticks), and how far n4 got."""
    config = unit_config(push_entries_max=32, push_bytes_max=3200, inflight_pushes_max=16,
                         far_behind_entries=far_behind_entries,
                         far_behind_push_bytes_per_tick=400, quorum_deadline_ticks=1000)
    old = sized_entries(3000, 100)
    nodes = [make_node(node_id, FIVE, log=EntryLog(entries=old), term=1, config=config, seed=i)
             for i, node_id in enumerate(FIVE[:4])]
    group = Group(nodes + [make_node("n4", FIVE, term=1, config=config, seed=4)])
    group.isolate("n4")  # the election runs on instant links; n4's catch-up on the uplink
    group.elect("n0")
    group.cut = set()
    uplink = Uplink(group, bytes_per_tick=4000)
    for _ in range(10):  # n4 is well into its catch-up
        uplink.tick()
    appended_at: dict[int, int] = {}
    ok_at: dict[int, int] = {}
    for tick in range(200):
        if tick < 30:
            appended_at[tick + 1] = uplink.now_tick
            group.append("n0", tick + 1, b"new%d" % (tick + 1))
        uplink.tick()
        for complete in group.completed:
            if complete.status is AppendStatus.OK:
                ok_at.setdefault(complete.request_id, uplink.now_tick)
    latencies = [ok_at[r] - appended_at[r] if r in ok_at else None for r in sorted(appended_at)]
    return latencies, group.nodes["n4"].log.last_index


def test_a_far_behind_peer_does_not_delay_the_commit_of_new_appends() -> None:
    """On a 5-node group whose leader uplink carries 4,000 bytes a tick, an empty peer catching
    up on 300 KB gets 400 bytes a tick, and every new append commits within 2 ticks; without
    the throttle its full pipeline queues ahead of the others' pushes and acks, and appends
    wait or never commit (here the leader even loses its quorum)."""
    throttled, throttled_end = commit_latencies_with_a_peer_catching_up(far_behind_entries=64)
    unthrottled, _ = commit_latencies_with_a_peer_catching_up(far_behind_entries=10**9)
    assert all(latency is not None and latency <= 2 for latency in throttled), throttled
    assert any(latency is None or latency >= 8 for latency in unthrottled), unthrottled
    # Throttled, n4 still moves: 400 bytes (4 entries) a tick at most, over 240 ticks.
    assert 400 <= throttled_end <= 4 * 240, throttled_end


def test_a_far_behind_peer_gets_at_most_its_byte_budget_per_tick() -> None:
    """Counting the payload bytes pushed to the catching-up peer in each tick: never over
    far_behind_push_bytes_per_tick (400), while caught-up peers are not limited."""
    config = unit_config(push_entries_max=32, push_bytes_max=3200, far_behind_entries=64,
                         far_behind_push_bytes_per_tick=400)
    old = sized_entries(1000, 100)
    nodes = [make_node(node_id, FIVE, log=EntryLog(entries=old), term=1, config=config, seed=i)
             for i, node_id in enumerate(FIVE[:4])]
    group = Group(nodes + [make_node("n4", FIVE, term=1, config=config, seed=4)])
    group.elect("n0")
    per_tick: list[int] = []
    for _ in range(40):
        before = len(pushes_to(group, "n4"))
        group.tick_all(1)
        per_tick.append(sum(payload_bytes(p.entries) for p in pushes_to(group, "n4")[before:]))
    assert max(per_tick) == 400 and min(per_tick[5:]) == 400, per_tick
    for _ in range(20):
        group.append("n0", 1, b"q" * 100)
    group.deliver()  # the acks of the first window release the rest in one batch
    assert max(payload_bytes(p.entries) for p in pushes_to(group, "n1")) > 400


def test_a_budget_smaller_than_any_entry_still_moves_one_entry_a_tick() -> None:
    """With a far-behind budget of 1 byte a tick and 10-byte entries, the empty peer gets
    exactly one entry a tick while far behind (the budget never blocks the first), and so
    still catches up."""
    config = unit_config(far_behind_entries=4, far_behind_push_bytes_per_tick=1)
    old = sized_entries(30, 10)
    group = Group([make_node("n0", FIVE[:3], log=EntryLog(entries=old), term=1, config=config),
                   make_node("n1", FIVE[:3], log=EntryLog(entries=old), term=1, config=config,
                             seed=1),
                   make_node("n2", FIVE[:3], term=1, config=config, seed=2)])
    group.elect("n0")
    per_tick = []
    for _ in range(10):
        before = len(pushes_to(group, "n2"))
        group.tick_all(1)
        per_tick.append(sum(len(p.entries) for p in pushes_to(group, "n2")[before:]))
    assert per_tick == [1] * 10, per_tick
    group.tick_all(40)
    assert group.nodes["n2"].log.entries() == group.nodes["n0"].log.entries()


@pytest.mark.parametrize(("match_index", "entries_pushed"), [(2, [3, 4, 5, 6]), (1, [2])])
def test_a_peer_is_far_behind_only_more_than_far_behind_entries_back(
        match_index: int, entries_pushed: list[int]) -> None:
    """far_behind_entries = 4 and a 1-byte budget: a peer exactly 4 entries behind the leader's
    end is not throttled (one push carries all 4); 5 behind, it gets one entry this tick."""
    config = unit_config(far_behind_entries=4, far_behind_push_bytes_per_tick=1)
    leader = leader_with_log((1,) * 5, term=1, ids=FIVE[:3], config=config)
    assert leader.log.last_index == 6
    actions = find_match(leader, "n1", match_index)
    pushes = [a.message for a in actions if isinstance(a, Send) and a.target_id == "n1"]
    pushed = [[e.index for e in p.entries] for p in pushes]  # type: ignore[union-attr]
    assert pushed == [entries_pushed]
