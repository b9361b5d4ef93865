"""The acks and changes of invisibility of a batch planned (app/broker/consumption.py
`GroupConsumption.decide`): each handle decoded, judged against its queue's state, and the
events of each queue gathered into records. The caller holds the decision lock.

A change gives its delivery a new id: two changes of one queue in a batch are planned before
either is applied, so each takes the id after the one before, and the records apply
in that order. A handle taken by an ack or a change of the batch is stale for the others."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from app.broker.consumption_types import AckAnswer, AckAsk, HandleResult, Outcome
from store.consumption.events import Changed, Event
from store.consumption.handles import HandleCodec, HandleError, ReceiptHandle
from store.consumption.policy import RetryPolicy
from store.consumption.queue_state import AckDecision, QueueState
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


@dataclass(frozen=True, slots=True)
class Changes:
    """What a change of invisibility needs besides the queue state: the group's policy (the
    backoff of a release), the floor of new delivery ids, and the codec of the new handle."""

    policy: Callable[[str], RetryPolicy]
    delivery_id_floor: int
    codec: HandleCodec


def plan_acks(registry: ConsumptionRegistry, acks: Sequence[AckAsk],
              decoded: list[list[ReceiptHandle | HandleResult]],
              now_ms: int, changes: Changes | None = None
              ) -> tuple[list[AckAnswer], list[tuple[PopRecord, list[Outcome]]]]:
    """Each handle OK, or STALE (409: not in flight under that delivery, or acked or changed
    by an earlier ask of the batch); the events of each queue as records (at most
    ACK_EVENTS_MAX events each), with the outcomes of the asks they carry. The lock is
    held."""
    answers: list[AckAnswer] = []
    events: dict[QueueKey, list[Event]] = {}
    owners: dict[QueueKey, list[Outcome]] = {}
    taken: dict[tuple[QueueKey, int], int] = {}  # -> the ack that took it
    next_ids: dict[QueueKey, int] = {}  # a queue's next delivery id after the batch's changes
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
                else _plan(state, ask, handle, now_ms, changes, next_ids.get(key, 0))
            if decision is None or decision.event is None:
                results.append(stale(text, handle))
                continue
            if taker is None:  # (the same handle twice in one ack: one event)
                taken[(key, handle.queue_offset)] = number
                events.setdefault(key, []).append(decision.event)
            if outcome not in owners.setdefault(key, []):
                owners[key].append(outcome)
            event = decision.event
            if isinstance(event, Changed):
                next_ids[key] = event.delivery.delivery_id + 1
            results.append(_result(text, handle, event, changes))
        answers.append((results, outcome))
    records = [(PopRecord(key, tuple(items[start:start + ACK_EVENTS_MAX]), now_ms),
                owners[key])
               for key, items in events.items()
               for start in range(0, len(items), ACK_EVENTS_MAX)]
    return answers, records


def _plan(state: QueueState, ask: AckAsk, handle: ReceiptHandle, now_ms: int,
          changes: Changes | None, next_id: int) -> AckDecision:
    if ask.invisible_ms is None or changes is None:
        return state.plan_ack(queue_offset=handle.queue_offset, delivery_id=handle.delivery_id)
    return state.plan_change(
        queue_offset=handle.queue_offset, delivery_id=handle.delivery_id,
        invisible_ms=ask.invisible_ms, now_ms=now_ms, policy=changes.policy(ask.group),
        delivery_id_floor=max(changes.delivery_id_floor, next_id))


def _result(text: str, handle: ReceiptHandle, event: Event,
            changes: Changes | None) -> HandleResult:
    """OK; for a change that keeps the message in flight, with its new handle."""
    if not isinstance(event, Changed) or changes is None:
        return HandleResult(text, "OK")
    delivery = event.delivery
    new_handle = changes.codec.encode(ReceiptHandle(
        handle.group, handle.topic, handle.queue_id, handle.queue_offset, delivery.attempt,
        delivery.delivery_id))
    return HandleResult(text, "OK", new_handle=new_handle,
                        invisible_until_ms=delivery.invisible_until_ms)


def stale(text: str, handle: ReceiptHandle) -> HandleResult:
    return HandleResult(text, "STALE_RECEIPT_HANDLE",
                        f"the message at queue offset {handle.queue_offset} is not in flight "
                        f"under this handle's delivery (redelivered, changed or acked since)")
