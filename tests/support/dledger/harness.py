"""A hand-driven DLedger group for unit tests: messages delivered in FIFO order on demand,
writes durable at once unless a node's disk is held, links cut by hand."""

from __future__ import annotations

import random
from collections import deque

from ha.dledger.core.actions import Action, CompleteAppend, Send, Write
from ha.dledger.core.config import DLedgerConfig
from ha.dledger.core.entry_log import EntryLog
from ha.dledger.core.member import HardState, Role
from ha.dledger.core.messages import Entry, Message, PushResponse, VoteResponse
from ha.dledger.core.node import DLedgerNode

WRITE_TYPES = Write.__args__


def unit_config(**overrides: int) -> DLedgerConfig:
    """Short timings, so that hand-driven tests tick little; the production defaults (longer,
    for a real host's tick) are checked by the simulation's healthy-group and failover runs."""
    settings = {"election_timeout_ticks": 10, "heartbeat_ticks": 2, "push_timeout_ticks": 6,
                "quorum_deadline_ticks": 40, **overrides}
    return DLedgerConfig(**settings)


def entries(*terms: int, first_index: int = 1) -> tuple[Entry, ...]:
    """Entries with the given terms from `first_index`, payloads naming index and term."""
    return tuple(Entry(first_index + i, term, b"e%d-t%d" % (first_index + i, term))
                 for i, term in enumerate(terms))


def make_node(node_id: str, ids: list[str], log: EntryLog | None = None, term: int = 0,
              voted_for: str | None = None, config: DLedgerConfig | None = None,
              seed: int = 7) -> DLedgerNode:
    return DLedgerNode(node_id, ids, config or unit_config(), random.Random(seed),
                       HardState(term, voted_for), log or EntryLog())


def leader_with_log(terms: tuple[int, ...], term: int, ids: list[str],
                    config: DLedgerConfig | None = None) -> DLedgerNode:
    """n0 elected by hand at `term + 1` over a log with the given entry terms."""
    node = make_node("n0", ids, log=EntryLog(entries=entries(*terms)), term=term, config=config)
    while node.role is Role.FOLLOWER:
        node.tick()
    actions = []
    for pre_vote in (True, False):
        for voter in ids[1:]:
            actions += node.receive(VoteResponse(voter, term + 1, True, pre_vote))
    node.persisted(max(a.write_id for a in actions if isinstance(a, WRITE_TYPES)))
    assert node.role is Role.LEADER and node.term == term + 1
    return node


def find_match(leader: DLedgerNode, peer_id: str, match_index: int) -> list[Action]:
    """The replies of a follower holding the leader's first `match_index` entries (all of term
    1) and nothing more to the leader's first probe (a reject hinting at its end) and to the
    probe that follows; the leader's actions after the second."""
    first_probe_prev_index = leader.dispatchers[peer_id].next_index - 1
    hint_term = 1 if match_index else 0
    leader.receive(PushResponse(peer_id, leader.term, False, first_probe_prev_index, 0,
                                match_index, hint_term, match_index))
    return leader.receive(PushResponse(peer_id, leader.term, True, match_index, match_index,
                                       0, 0, match_index))


class Group:
    def __init__(self, nodes: list[DLedgerNode]) -> None:
        self.nodes = {node.member.self_id: node for node in nodes}
        self.in_flight: deque[tuple[str, str, Message]] = deque()
        self.cut: set[tuple[str, str]] = set()
        self.completed: list[CompleteAppend] = []
        self.actions: list[tuple[str, Action]] = []  # every action, for assertions

    def run(self, node_id: str, actions: list[Action]) -> None:
        node = self.nodes[node_id]
        for action in actions:
            self.actions.append((node_id, action))
            if isinstance(action, Send):
                if (node_id, action.target_id) not in self.cut:
                    self.in_flight.append((node_id, action.target_id, action.message))
            elif isinstance(action, CompleteAppend):
                self.completed.append(action)
            elif isinstance(action, WRITE_TYPES):
                self.run(node_id, node.persisted(action.write_id))

    def tick(self, node_id: str, count: int = 1) -> None:
        for _ in range(count):
            self.run(node_id, self.nodes[node_id].tick())

    def tick_all(self, count: int = 1) -> None:
        for _ in range(count):
            for node_id in sorted(self.nodes):
                self.tick(node_id)
            self.deliver()

    def deliver(self, messages_max: int = 100_000) -> None:
        for _ in range(messages_max):
            if not self.in_flight:
                return
            source_id, target_id, message = self.in_flight.popleft()
            if (source_id, target_id) not in self.cut:
                self.run(target_id, self.nodes[target_id].receive(message))
        raise AssertionError("messages never stopped flowing")

    def elect(self, node_id: str) -> None:
        """Time out `node_id` alone, then deliver until the group is quiet."""
        node = self.nodes[node_id]
        while node.role is Role.FOLLOWER:
            self.tick(node_id)
        self.deliver()
        assert node.role is Role.LEADER, node.role

    def append(self, node_id: str, request_id: int, payload: bytes) -> None:
        self.run(node_id, self.nodes[node_id].client_append(request_id, payload))

    def isolate(self, node_id: str) -> None:
        for other in self.nodes:
            if other != node_id:
                self.cut |= {(node_id, other), (other, node_id)}

    def sends(self, source_id: str, message_type: type) -> list[Send]:
        return [a for s, a in self.actions
                if s == source_id and isinstance(a, Send) and isinstance(a.message, message_type)]
