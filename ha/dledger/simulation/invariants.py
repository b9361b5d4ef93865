"""The safety invariants the simulation checks after every event (Raft paper Figure 3).

Each check looks only at what the event changed, so a run stays cheap:
- election safety: at most one leader per term;
- log matching: an entry (index, term) has one payload and one previous term everywhere, so by
  induction two logs holding it hold the same prefix;
- state machine safety: no two nodes commit different entries at an index, commits only grow;
- leader completeness: a new leader holds every committed entry it has not retained away;
- no acknowledged append lost: an append answered OK was committed, and every later leader
  holds it;
- one metadata state per committed prefix: the tables a node applied from its log up to an
  index (ha/dledger/simulation/metadata.py) are the ones every other node applied up to it;
- delayed messages: no node's committed log delivers a message twice or before its due time
  (ha/dledger/simulation/timers.py; at the end, every due message is delivered everywhere).
"""

from __future__ import annotations

from bisect import bisect_right, insort
from dataclasses import dataclass, field

from ha.dledger.core.messages import Entry
from ha.dledger.core.storage import NodeLog
from ha.dledger.simulation.metadata import RECORD_PREFIX, Fingerprint
from ha.sim_timers import TIMER_PREFIX


class InvariantViolation(AssertionError):
    """A safety property broke: the simulation stops and prints its seed."""


@dataclass
class Invariants:
    leader_by_term: dict[int, str] = field(default_factory=dict)
    # (index, term) -> (payload, previous entry's term)
    entry_identity: dict[tuple[int, int], tuple[bytes, int]] = field(default_factory=dict)
    committed: dict[int, tuple[int, bytes]] = field(default_factory=dict)  # index -> entry
    acknowledged: dict[int, tuple[int, bytes]] = field(default_factory=dict)
    # index of a metadata record -> the tables applied from the committed prefix up to it
    metadata_at: dict[int, Fingerprint] = field(default_factory=dict)
    metadata_indices: list[int] = field(default_factory=list)  # committed records, sorted
    timer_indices: list[int] = field(default_factory=list)  # committed timer records, sorted

    def leader_elected(self, node_id: str, term: int, log: NodeLog) -> None:
        holder = self.leader_by_term.setdefault(term, node_id)
        if holder != node_id:
            raise InvariantViolation(f"election safety: {holder} and {node_id} lead term {term}")
        for name, entries in (("committed", self.committed), ("acknowledged", self.acknowledged)):
            for index, (entry_term, payload) in entries.items():
                if index <= log.base_index:
                    continue
                held = log.entry(index) if index <= log.last_index else None
                if held is None or (held.term, held.payload) != (entry_term, payload):
                    raise InvariantViolation(
                        f"leader completeness: {node_id} leads term {term} without the "
                        f"{name} entry {index} (term {entry_term}); holds {held}")

    def entries_appended(self, node_id: str, entries: tuple[Entry, ...], log: NodeLog) -> None:
        for entry in entries:
            prev_term = log.term_at(entry.index - 1)
            assert prev_term is not None
            identity = (entry.payload, prev_term)
            known = self.entry_identity.setdefault((entry.index, entry.term), identity)
            if known != identity:
                raise InvariantViolation(
                    f"log matching: {node_id} holds entry {entry.index} term {entry.term} as "
                    f"{identity}, elsewhere {known}")

    def commit_advanced(self, node_id: str, old_index: int, new_index: int,
                        log: NodeLog) -> None:
        if new_index <= old_index:
            raise InvariantViolation(f"{node_id} commit went {old_index} -> {new_index}")
        for index in range(max(old_index, log.base_index) + 1, new_index + 1):
            entry = log.entry(index)
            committed = (entry.term, entry.payload)
            known = self.committed.setdefault(index, committed)
            if known is committed and entry.payload.startswith(RECORD_PREFIX):
                insort(self.metadata_indices, index)
            elif known is committed and entry.payload.startswith(TIMER_PREFIX):
                insort(self.timer_indices, index)
            elif known != committed:
                raise InvariantViolation(
                    f"state machine safety: {node_id} commits {index} as {entry.term}, "
                    f"elsewhere {known[0]}")

    def append_acknowledged(self, index: int, term: int, payload: bytes) -> None:
        if self.committed.get(index) != (term, payload):
            raise InvariantViolation(f"append {index} term {term} answered OK, not committed")
        self.acknowledged[index] = (term, payload)

    def metadata_applied(self, node_id: str, index: int, tables: Fingerprint) -> None:
        known = self.metadata_at.setdefault(index, tables)
        if known is not tables and known != tables:
            raise InvariantViolation(
                f"metadata: {node_id}'s tables applied up to {index} are {tables}, "
                f"elsewhere {known}")

    def metadata_records(self, after_index: int, through_index: int) -> list[int]:
        """The committed metadata records in (after_index, through_index], in log order."""
        indices = self.metadata_indices
        return indices[bisect_right(indices, after_index):bisect_right(indices, through_index)]

    def timer_records(self, after_index: int, through_index: int) -> list[int]:
        """The committed timer records in (after_index, through_index], in log order."""
        indices = self.timer_indices
        return indices[bisect_right(indices, after_index):bisect_right(indices, through_index)]

    def metadata_at_base(self, index: int) -> Fingerprint:
        """The tables at a base a node was reset to: those after the last metadata record at
        or below it (the leader applied it before it compacted)."""
        position = bisect_right(self.metadata_indices, index)
        if position == 0:
            return (), (), ()
        return self.metadata_at[self.metadata_indices[position - 1]]
