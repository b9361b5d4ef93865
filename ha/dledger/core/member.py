"""MemberState: the role, term, vote and known leader of a node (Raft's hard + soft state)."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Role(enum.Enum):
    FOLLOWER = "FOLLOWER"
    PRE_CANDIDATE = "PRE_CANDIDATE"
    CANDIDATE = "CANDIDATE"
    LEADER = "LEADER"


@dataclass(frozen=True, slots=True)
class HardState:
    """What must be durable before a node answers: its term and whom it voted for in it."""

    term: int = 0
    voted_for: str | None = None


@dataclass(slots=True)
class MemberState:
    self_id: str
    term: int
    voted_for: str | None
    role: Role = Role.FOLLOWER
    leader_id: str | None = None

    @property
    def is_leader(self) -> bool:
        return self.role is Role.LEADER
