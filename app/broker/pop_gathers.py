"""Receives gathered into one decision (app/broker/consumption.py, `decide`): those of one
group and topic with the same invisible time and tags share one decision per queue, and
their deliveries are handed out in the receives' order."""

from __future__ import annotations

from app.broker.consumption_types import (
    Delivered,
    Outcome,
    PopRefused,
    ReceiveAnswer,
    ReceiveAsk,
)
from store.consumption.policy import RetryPolicy
from store.waits.completion import PutCompletion


class Gather:
    """Receives of one group and topic with the same invisible time and tags, decided as one:
    each wants up to its max_messages (what the in-flight bound leaves it)."""

    def __init__(self, ask: ReceiveAsk, policy: RetryPolicy, order: list[int]) -> None:
        self.group, self.topic = ask.group, ask.topic
        self.invisible_ms, self.tags, self.policy = ask.invisible_ms, ask.tags, policy
        self.order = order  # queue ids still worth a look
        self.wants: list[tuple[int, int]] = []  # (the receive's number, messages it wants)
        self.delivered: list[Delivered] = []
        self.completions: list[PutCompletion] = []
        self.refused: PopRefused | None = None

    @property
    def wanted(self) -> int:
        return sum(wanted for _, wanted in self.wants)

    def answer(self, answers: list[ReceiveAnswer]) -> None:
        """Each receive's messages, handed out in the receives' order (all of them awaiting
        every record of the gather), or the refusal."""
        start = 0
        for number, wanted in self.wants:
            if self.refused is not None:
                answers[number] = self.refused
                continue
            answers[number] = (self.delivered[start:start + wanted],
                               Outcome(list(self.completions)))
            start += wanted
