"""The acks of a batch planned (app/broker/consumption.py `GroupConsumption.decide`): each
handle decoded, judged against its queue's state, and the events of each queue gathered into
records. The caller holds the decision lock."""

from __future__ import annotations

from collections.abc import Sequence

from app.broker.consumption_types import AckAnswer, AckAsk, HandleResult, Outcome
from store.consumption.events import Event
from store.consumption.handles import HandleCodec, HandleError, ReceiptHandle
from store.consumption.records import PopRecord, QueueKey
from store.consumption.registry import ConsumptionRegistry

ACK_EVENTS_MAX = 256  # an ack event is a few bytes: more of them fit a record


def decoded_handles(codec: HandleCodec, ask: AckAsk) -> list[ReceiptHandle | HandleResult]:
    """Each handle of an ack decoded, or its INVALID result (400)."""
    decoded: list[ReceiptHandle | HandleResult] = []
    for text in ask.handles:
        try:
            decoded.append(codec.decode_for(text, group=ask.group, topic=ask.topic))
        except HandleError as error:
            decoded.append(HandleResult(text, "INVALID_RECEIPT_HANDLE", str(error)))
    return decoded


def plan_acks(registry: ConsumptionRegistry, acks: Sequence[AckAsk],
              decoded: list[list[ReceiptHandle | HandleResult]],
              now_ms: int) -> tuple[list[AckAnswer], list[tuple[PopRecord, list[Outcome]]]]:
    """Each handle OK, or STALE (409: not in flight under that delivery, or acked by an
    earlier ack of the batch); the events of each queue as records (at most
    ACK_EVENTS_MAX events each), with the outcomes of the acks they carry. The lock is
    held."""
    answers: list[AckAnswer] = []
    events: dict[QueueKey, list[Event]] = {}
    owners: dict[QueueKey, list[Outcome]] = {}
    taken: dict[tuple[QueueKey, int], int] = {}  # -> the ack that took it
    for number, (ask, handles) in enumerate(zip(acks, decoded, strict=True)):
        outcome = Outcome([])
        results: list[HandleResult] = []
        for text, handle in zip(ask.handles, handles, strict=True):
            if isinstance(handle, HandleResult):
                results.append(handle)
                continue
            key = QueueKey(ask.group, ask.topic, handle.queue_id)
            state = registry.state(key)
            taker = taken.get((key, handle.queue_offset))
            decision = None if state is None or taker not in (None, number) \
                else state.plan_ack(queue_offset=handle.queue_offset,
                                    delivery_id=handle.delivery_id)
            if decision is None or decision.event is None:
                results.append(stale(text, handle))
                continue
            if taker is None:  # (the same handle twice in one ack: one event)
                taken[(key, handle.queue_offset)] = number
                events.setdefault(key, []).append(decision.event)
            if outcome not in owners.setdefault(key, []):
                owners[key].append(outcome)
            results.append(HandleResult(text, "OK"))
        answers.append((results, outcome))
    records = [(PopRecord(key, tuple(items[start:start + ACK_EVENTS_MAX]), now_ms),
                owners[key])
               for key, items in events.items()
               for start in range(0, len(items), ACK_EVENTS_MAX)]
    return answers, records


def stale(text: str, handle: ReceiptHandle) -> HandleResult:
    return HandleResult(text, "STALE_RECEIPT_HANDLE",
                        f"the message at queue offset {handle.queue_offset} is not in flight "
                        f"under this handle's delivery (redelivered, changed or acked since)")
