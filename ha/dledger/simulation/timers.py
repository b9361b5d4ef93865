"""Delayed messages in the DLedger simulation: each member's timer state from its committed
log, and its scheduler while it leads (ha/sim_timers.py holds the model and the scheduler).

As the broker does (app/broker/broker.py, app/broker/dledger_timers.py): a member that leads
term t activates a scheduler once its commit has reached the end its log had when it was first
seen leading t, and everything up to there is applied (dispatch in DLedger mode applies
committed entries only); its records are appended in t only, so the scheduler is thrown away
as soon as the member leads no more or leads another term. The timer state survives a crash
(the product saves it and redispatches); a member reset to its leader's base takes the state
every member derived from the committed log up to that base.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ha.dledger.core.member import Role
from ha.dledger.core.node import DLedgerNode
from ha.dledger.simulation.invariants import Invariants, InvariantViolation
from ha.sim_timers import Append, SimScheduler, TimerModel


@dataclass
class MemberTimers:
    model: TimerModel = field(default_factory=TimerModel)
    applied_index: int = 0
    scheduler: SimScheduler | None = None
    term: int | None = None  # the term the scheduler belongs to (or waits to start in)
    takeover_end: int = 0

    def apply_committed(self, node_id: str, node: DLedgerNode, commit_index: int,
                        invariants: Invariants) -> None:
        """The member's dispatch: its committed timer records, in log order."""
        base_index = node.log.base_index
        if self.applied_index < base_index:  # reset past what it applied: rebuilt to the base
            self.model = TimerModel()
            self._apply(node_id, invariants, 0, base_index)
            self.applied_index = base_index
        self._apply(node_id, invariants, self.applied_index, commit_index)
        self.applied_index = max(self.applied_index, commit_index)

    def _apply(self, node_id: str, invariants: Invariants, after_index: int,
               through_index: int) -> None:
        for index in invariants.timer_records(after_index, through_index):
            self.model.apply(invariants.committed[index][1])
        if self.model.problems:
            raise InvariantViolation(f"timers: {node_id} up to {through_index}: "
                                     f"{self.model.problems[0]}")

    def run_scheduler(self, node: DLedgerNode, now: int, append: Append) -> None:
        """The member's scheduler round, if it leads, caught up in its term."""
        if node.role is not Role.LEADER:
            if self.term is not None:
                self.crashed()
            return
        if self.term != node.term:
            self.scheduler, self.term = None, node.term
            self.takeover_end = node.log.last_index
        if self.scheduler is None:
            if node.commit_index < self.takeover_end or self.applied_index < self.takeover_end:
                return
            self.scheduler = SimScheduler(self.model)
        self.scheduler.round(self.model, now, append)

    def crashed(self) -> None:
        self.scheduler, self.term = None, None
