"""Receives, acks and changes of invisibility gathered into shared decisions (group commit of
group consumption). A change is an ack ask with its `invisible_ms` (`pop.AckAsk`).

A receive or an ack arriving on the event loop does not decide at once: it joins the batch
of the loop's current turn, and the batch is decided once the turn's other requests have
had their say (`GroupConsumption.decide`: one decision per queue for the receives of a
group and topic, one record per queue for the acks, one append a round). Concurrent
consumers thus share records and appends, and every append wakes dispatch and the
replication writers once, not once per request.

While a batch's records wait for their guarantee (a slave's ack on a SYNC_MASTER), the next
batch is decided at once, not held back: its requests wait for their own records, and the
decisions never wait under the consumption lock.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import TypeVar

from app.broker import consumption_types as pop

_T = TypeVar("_T")

# Decide: (receives, acks) -> (their answers, in their order)
Decide = Callable[[Sequence[pop.ReceiveAsk], Sequence[pop.AckAsk]],
                  tuple[list[pop.ReceiveAnswer], list[pop.AckAnswer]]]


class PopBatches:
    """The batch of the event loop's current turn; `decide` is called on the loop's thread
    once a turn (requests of a later turn join the next batch)."""

    def __init__(self, decide: Decide) -> None:
        self._decide = decide
        self._receives: list[tuple[pop.ReceiveAsk, asyncio.Future[pop.ReceiveAnswer]]] = []
        self._acks: list[tuple[pop.AckAsk, asyncio.Future[pop.AckAnswer]]] = []
        self._scheduled = False
        self.batches = 0  # decisions made
        self.requests = 0  # receives and acks they answered

    async def receive(self, ask: pop.ReceiveAsk) -> tuple[list[pop.Delivered], pop.Outcome]:
        """The receive's messages and the outcome of their records; pop.PopRefused."""
        future: asyncio.Future[pop.ReceiveAnswer] = self._join()
        self._receives.append((ask, future))
        answer = await future
        if isinstance(answer, pop.PopRefused):
            raise answer
        return answer

    async def ack(self, ask: pop.AckAsk) -> tuple[list[pop.HandleResult], pop.Outcome]:
        """Each handle's result and the outcome of the records; pop.PopRefused."""
        future: asyncio.Future[pop.AckAnswer] = self._join()
        self._acks.append((ask, future))
        return await future

    def _join(self) -> asyncio.Future[_T]:
        loop = asyncio.get_running_loop()
        if not self._scheduled:
            self._scheduled = True
            loop.call_soon(self._flush)
        return loop.create_future()

    def _flush(self) -> None:
        """Decide the turn's batch and hand each request its answer."""
        self._scheduled = False
        receives, self._receives = self._receives, []
        acks, self._acks = self._acks, []
        futures: list[asyncio.Future[pop.ReceiveAnswer]] | list[asyncio.Future[pop.AckAnswer]]
        try:
            receive_answers, ack_answers = self._decide([ask for ask, _ in receives],
                                                        [ask for ask, _ in acks])
        except Exception as error:  # a refusal of the whole batch, or a bug: each request
            for futures in ([future for _, future in receives],
                            [future for _, future in acks]):
                for future in futures:
                    if not future.done():
                        future.set_exception(error)
            return
        self.batches += 1
        self.requests += len(receives) + len(acks)
        for (_, receive_future), receive_answer in zip(receives, receive_answers, strict=True):
            if not receive_future.done():  # (a request cancelled meanwhile)
                receive_future.set_result(receive_answer)
        for (_, ack_future), ack_answer in zip(acks, ack_answers, strict=True):
            if not ack_future.done():
                ack_future.set_result(ack_answer)
