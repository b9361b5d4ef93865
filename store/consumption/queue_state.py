"""The in-flight state of one (group, topic, queue) and the decisions of group consumption.

The state is a window of queue offsets, from the committed offset (the lowest offset not yet
done) to the scan offset (the next offset never taken). Inside it each offset is waiting (ready
at a time; never delivered, or retried in place), in flight (one delivery id, invisible until a
time) or done (acked, filtered out, retried to the retry topic, dead-lettered). The window is
bounded (`window_max`), so memory is bounded by it and not by the topic's size.

Every decision (`plan_receive`, `plan_ack`, `plan_change`, `plan_expiry`) reads the state and
returns events without changing it; `apply` changes it. The caller records each event in the
log and applies it in log order, on the master and on every replica alike. `apply` of an event
already applied (a replay from an earlier position) changes nothing.

Order: a message with an order key (or any message, in a FIFO queue) is not delivered while an
earlier message of the same key in this queue is waiting or in flight, and its retries stay in
place. A message without a key is delivered in parallel; when its invisible time passes it is
retried in place too while the window has at least half its room free (no copy to write: the
cheapest redelivery), else, and when released for a retry after a backoff, it leaves the queue.

Decisions cost what they hand out, not the window's size: the waiting offsets are kept in
order, the keys in flight counted, and the in-flight deadlines in a heap (its stale items,
deliveries acked or changed since, are dropped as they surface, and the heap is rebuilt when
they outnumber the deliveries in flight, so it stays within twice the window).
"""

from __future__ import annotations

import bisect
import enum
import heapq
from dataclasses import dataclass

from store.consumption.events import (
    Acked,
    Candidate,
    Changed,
    DeadLettered,
    Delivery,
    Disposition,
    Event,
    Received,
    Retried,
    Scanned,
)
from store.consumption.policy import RetryPolicy
from store.consumption.tags import TagFilter

WINDOW_MAX_DEFAULT = 1_024
# A window restored from a snapshot's image spans at most this many offsets (the broker's
# pop_window_max bound): a bad image is refused, not expanded.
WINDOW_SPAN_MAX = 65_536
FIFO_KEY = ""  # the one key of every keyless message of a FIFO queue


class ConsumptionError(ValueError):
    """A decision asked with arguments out of their bounds, or an event that does not fit."""


class EntryState(enum.Enum):
    WAITING = "waiting"
    IN_FLIGHT = "in_flight"
    DONE = "done"


@dataclass(slots=True)
class Entry:
    state: EntryState
    order_key: str | None
    attempt: int  # deliveries so far
    delivery_id: int = 0  # while in flight
    until_ms: int = 0  # waiting: ready at; in flight: invisible until


class AckStatus(enum.Enum):
    OK = "ok"
    STALE = "stale"  # not in flight under this delivery: redelivered, changed, acked, or unknown


@dataclass(frozen=True, slots=True)
class AckDecision:
    status: AckStatus
    event: Acked | Changed | Retried | DeadLettered | None = None


class QueueState:
    def __init__(self, committed_offset: int = 0, *, fifo: bool = False,
                 window_max: int = WINDOW_MAX_DEFAULT, next_delivery_id: int = 1) -> None:
        if committed_offset < 0 or window_max < 1 or next_delivery_id < 1:
            raise ConsumptionError("bad queue state bounds")
        self._fifo = fifo
        self.window_max = window_max
        self.next_delivery_id = next_delivery_id
        self._committed_offset = committed_offset
        self._scan_offset = committed_offset
        self._window: dict[int, Entry] = {}  # offset -> entry, in offset order
        self.in_flight_count = 0
        self._waiting: list[int] = []  # the offsets of the waiting entries, ascending
        self._keys_in_flight: dict[str, int] = {}  # a key -> its deliveries in flight
        self._deadlines: list[tuple[int, int, int]] = []  # heap: (until_ms, offset, id)
        # Heap: (ready at, offset) of the entries retried in place, until told (`came_due`).
        self._ready_times: list[tuple[int, int]] = []

    # -- reading -------------------------------------------------------------------------------
    @property
    def fifo(self) -> bool:
        """Whether the queue is ordered as a whole (its keyless messages share one key)."""
        return self._fifo

    @fifo.setter
    def fifo(self, fifo: bool) -> None:
        """A new mode: the keys in flight are counted again by the keys of the new mode."""
        if fifo == self._fifo:
            return
        self._fifo = fifo
        self._keys_in_flight = {}
        for entry in self._window.values():
            if entry.state is EntryState.IN_FLIGHT:
                self._hold_key(entry)

    @property
    def committed_offset(self) -> int:
        """The lowest offset not yet done: every offset below it is acked or disposed of."""
        return self._committed_offset

    @property
    def scan_offset(self) -> int:
        return self._scan_offset

    @property
    def has_waiting(self) -> bool:
        """Whether messages wait in the window (new ones held by their key, or retried)."""
        return bool(self._waiting)

    @property
    def room(self) -> int:
        """How many new offsets the window can still take."""
        return self.window_max - (self._scan_offset - self._committed_offset)

    def entry(self, queue_offset: int) -> Entry | None:
        return self._window.get(queue_offset)

    def in_flight(self) -> dict[int, Entry]:
        return {offset: entry for offset, entry in self._window.items()
                if entry.state is EntryState.IN_FLIGHT}

    def open_entries(self) -> list[tuple[int, Entry]]:
        """The window's entries not done, in offset order: with the committed, scan and
        next delivery id, the whole state (`restored`)."""
        return [(offset, entry) for offset, entry in self._window.items()
                if entry.state is not EntryState.DONE]

    @classmethod
    def restored(cls, committed_offset: int, scan_offset: int, next_delivery_id: int,
                 open_entries: list[tuple[int, Entry]], *, fifo: bool = False,
                 window_max: int = WINDOW_MAX_DEFAULT) -> QueueState:
        """The state `open_entries` and the offsets describe (a snapshot's image): every
        other offset of the window is done."""
        state = cls(committed_offset, fifo=fifo, window_max=window_max,
                    next_delivery_id=next_delivery_id)
        given = dict(open_entries)
        if not 0 <= scan_offset - committed_offset <= WINDOW_SPAN_MAX or any(
                not committed_offset <= offset < scan_offset
                or entry.state is EntryState.DONE for offset, entry in given.items()):
            raise ConsumptionError("a queue state image out of its window")
        for offset in range(committed_offset, scan_offset):
            entry = given.get(offset) or Entry(EntryState.DONE, None, 0)
            state._window[offset] = entry
            if entry.state is EntryState.WAITING:
                state._waiting.append(offset)
            elif entry.state is EntryState.IN_FLIGHT:
                state._took_flight(offset, entry)
        state._scan_offset = scan_offset
        state._advance()
        return state

    def counts(self) -> dict[EntryState, int]:
        counts = dict.fromkeys(EntryState, 0)
        for entry in self._window.values():
            counts[entry.state] += 1
        return counts

    def _key(self, order_key: str | None) -> str | None:
        return FIFO_KEY if order_key is None and self.fifo else order_key

    # -- decisions -----------------------------------------------------------------------------
    def plan_receive(self, *, now_ms: int, max_messages: int, invisible_ms: int,
                     candidates: list[Candidate], tag_filter: TagFilter,
                     policy: RetryPolicy, delivery_id_floor: int = 0) -> Received:
        """Up to `max_messages` deliveries: waiting messages that are ready first (in offset
        order), then new candidates, which must start at the scan offset and be contiguous; at
        most `room` of them are taken. Delivery ids start at `delivery_id_floor` at least (a
        new leader's: never an id a record its log lost may have handed out)."""
        if max_messages < 1 or invisible_ms < 1:
            raise ConsumptionError("max_messages and invisible_ms must be positive")
        blocked: set[str] = set()
        deliveries: list[Delivery] = []
        delivery_id = max(self.next_delivery_id, delivery_id_floor)

        def offer(offset: int, order_key: str | None, attempts_before: int, ready: bool) -> None:
            nonlocal delivery_id
            key = self._key(order_key)
            if key is not None:
                if key in blocked:
                    return
                blocked.add(key)
            if ready and len(deliveries) < max_messages:
                deliveries.append(Delivery(offset, attempts_before + 1, delivery_id,
                                           now_ms + invisible_ms))
                delivery_id += 1

        blocked.update(self._keys_in_flight)
        window = self._window
        for offset in self._waiting:
            if len(deliveries) >= max_messages:
                break  # nothing more is offered, and no candidate is scanned
            entry = window[offset]
            offer(offset, entry.order_key, entry.attempt, entry.until_ms <= now_ms)
        scanned: list[Scanned] = []
        expected = self._scan_offset
        for candidate in candidates[:max(self.room, 0)]:
            if len(deliveries) >= max_messages:
                break
            if candidate.queue_offset != expected:
                raise ConsumptionError(
                    f"candidates must start at offset {self._scan_offset} and be contiguous")
            expected += 1
            if not tag_filter.matches(candidate.tag):
                disposition = Disposition.FILTERED
            elif candidate.attempts_before >= policy.attempts_max:
                disposition = Disposition.DEAD
            else:
                disposition = Disposition.KEPT
                offer(candidate.queue_offset, candidate.order_key, candidate.attempts_before, True)
            scanned.append(Scanned(candidate.queue_offset, disposition, candidate.order_key,
                                   candidate.attempts_before))
        return Received(tuple(scanned), tuple(deliveries))

    def plan_ack(self, *, queue_offset: int, delivery_id: int) -> AckDecision:
        if not self._holds(queue_offset, delivery_id):
            return AckDecision(AckStatus.STALE)
        return AckDecision(AckStatus.OK, Acked(queue_offset, delivery_id))

    def plan_change(self, *, queue_offset: int, delivery_id: int, invisible_ms: int,
                    now_ms: int, policy: RetryPolicy, delivery_id_floor: int = 0) -> AckDecision:
        """A new invisible time for a delivery in flight (its new delivery id at least
        `delivery_id_floor`); 0 releases it for a retry after the policy's backoff (or
        dead-letters it, if that was its last attempt)."""
        if invisible_ms < 0:
            raise ConsumptionError("invisible_ms must be >= 0")
        if not self._holds(queue_offset, delivery_id):
            return AckDecision(AckStatus.STALE)
        entry = self._window[queue_offset]
        if invisible_ms == 0:
            return AckDecision(AckStatus.OK, self._ended(
                queue_offset, entry, now_ms + policy.backoff_ms(entry.attempt), policy))
        delivery = Delivery(queue_offset, entry.attempt,
                            max(self.next_delivery_id, delivery_id_floor), now_ms + invisible_ms)
        return AckDecision(AckStatus.OK, Changed(delivery_id, delivery))

    def plan_expiry(self, *, now_ms: int, policy: RetryPolicy) -> list[Retried | DeadLettered]:
        """The deliveries whose invisible time has passed, in offset order: each is retried
        now (in place while the window has half its room free), or dead-lettered when it was
        the last attempt."""
        due: list[tuple[int, int, int]] = []
        deadlines = self._deadlines
        while deadlines and deadlines[0][0] <= now_ms:
            item = heapq.heappop(deadlines)
            if self._holds(item[1], item[2]):
                due.append(item)
        for item in due:  # in flight until an event ends them: their deadlines stay
            heapq.heappush(deadlines, item)
        in_place = self.room * 2 >= self.window_max
        return [self._ended(offset, self._window[offset], now_ms, policy, in_place=in_place)
                for _, offset, _ in sorted(due, key=lambda item: item[1])]

    def next_expiry_ms(self) -> int | None:
        """The earliest invisible time of the deliveries in flight."""
        deadlines = self._deadlines
        while deadlines and not self._holds(deadlines[0][1], deadlines[0][2]):
            heapq.heappop(deadlines)  # acked, changed or ended since
        return deadlines[0][0] if deadlines else None

    def next_ready_ms(self) -> int | None:
        """The earliest time a message retried in place becomes ready, of those not told yet
        (`came_due`)."""
        times = self._ready_times
        while times and not self._waits_until(times[0][1], times[0][0]):
            heapq.heappop(times)  # received, acked or changed since
        return times[0][0] if times else None

    def came_due(self, now_ms: int) -> bool:
        """Whether a message retried in place became ready by `now_ms` since the last call
        (each is told once): nothing else happens at its due time but the clock, so the
        master's tick asks, to wake the receives waiting on the queue."""
        times, due = self._ready_times, False
        while times and times[0][0] <= now_ms:
            ready_ms, offset = heapq.heappop(times)
            due = due or self._waits_until(offset, ready_ms)
        return due

    def _waits_until(self, offset: int, ready_ms: int) -> bool:
        entry = self._window.get(offset)
        return entry is not None and entry.state is EntryState.WAITING \
            and entry.until_ms == ready_ms

    def _holds(self, queue_offset: int, delivery_id: int) -> bool:
        entry = self._window.get(queue_offset)
        return (entry is not None and entry.state is EntryState.IN_FLIGHT
                and entry.delivery_id == delivery_id)

    def _ended(self, offset: int, entry: Entry, due_ms: int, policy: RetryPolicy, *,
               in_place: bool = False) -> Retried | DeadLettered:
        if policy.exhausted(entry.attempt):
            return DeadLettered(offset, entry.delivery_id, entry.attempt)
        in_place = in_place or self._key(entry.order_key) is not None
        return Retried(offset, entry.delivery_id, entry.attempt, due_ms, in_place)

    # -- applying ------------------------------------------------------------------------------
    def apply(self, event: Event) -> bool:
        """Apply one event in log order; False when it was already applied (a replay)."""
        if isinstance(event, Received):
            return self._apply_received(event)
        if isinstance(event, Changed):
            if event.delivery.delivery_id < self.next_delivery_id:
                return False
            entry = self._window.get(event.delivery.queue_offset)
            if entry is None or entry.state is not EntryState.IN_FLIGHT \
                    or entry.delivery_id != event.old_delivery_id:
                raise ConsumptionError(f"a change of a delivery not in flight: {event}")
            entry.delivery_id = event.delivery.delivery_id
            entry.until_ms = event.delivery.invisible_until_ms
            self.next_delivery_id = event.delivery.delivery_id + 1
            self._deadline(event.delivery.queue_offset, entry)
            return True
        if not self._holds(event.queue_offset, event.delivery_id):
            return False  # acked, retried or dead-lettered already
        entry = self._window[event.queue_offset]
        self._landed(entry)
        if isinstance(event, Retried) and event.in_place:
            entry.state, entry.attempt, entry.until_ms = EntryState.WAITING, event.attempt, \
                event.due_ms
            entry.delivery_id = 0
            bisect.insort(self._waiting, event.queue_offset)
            times = self._ready_times
            heapq.heappush(times, (event.due_ms, event.queue_offset))
            if len(times) > 2 * len(self._waiting) + 64:  # a replica's, never asked: rebuild
                times[:] = [item for item in times if self._waits_until(item[1], item[0])]
                heapq.heapify(times)
        else:
            entry.state = EntryState.DONE
            self._advance()
        return True

    def _apply_received(self, event: Received) -> bool:
        first_id = event.deliveries[0].delivery_id if event.deliveries else None
        first_offset = event.scanned[0].queue_offset if event.scanned else None
        if (first_id is not None and first_id < self.next_delivery_id) or \
                (first_offset is not None and first_offset < self._scan_offset):
            return False
        if first_offset is not None and first_offset != self._scan_offset:
            raise ConsumptionError(f"a receive that skips offsets: {event}")
        if len(event.scanned) > self.room:
            raise ConsumptionError("a receive past the window's bound")
        for scanned in event.scanned:
            done = scanned.disposition is not Disposition.KEPT
            self._window[scanned.queue_offset] = Entry(
                EntryState.DONE if done else EntryState.WAITING, scanned.order_key,
                scanned.attempts_before)
            if not done:  # above every offset of the window: the order holds
                self._waiting.append(scanned.queue_offset)
            self._scan_offset = scanned.queue_offset + 1
        for delivery in event.deliveries:
            entry = self._window.get(delivery.queue_offset)
            if entry is None or entry.state is not EntryState.WAITING:
                raise ConsumptionError(f"a delivery of an offset not waiting: {delivery}")
            entry.state, entry.attempt = EntryState.IN_FLIGHT, delivery.attempt
            entry.delivery_id, entry.until_ms = delivery.delivery_id, delivery.invisible_until_ms
            self.next_delivery_id = delivery.delivery_id + 1
            self._unwait(delivery.queue_offset)
            self._took_flight(delivery.queue_offset, entry)
        self._advance()
        return True

    # -- the indexes -----------------------------------------------------------------------------
    def _unwait(self, offset: int) -> None:
        waiting = self._waiting
        at = bisect.bisect_left(waiting, offset)
        if at < len(waiting) and waiting[at] == offset:
            del waiting[at]

    def _took_flight(self, offset: int, entry: Entry) -> None:
        self.in_flight_count += 1
        self._hold_key(entry)
        self._deadline(offset, entry)

    def _hold_key(self, entry: Entry) -> None:
        key = self._key(entry.order_key)
        if key is not None:
            self._keys_in_flight[key] = self._keys_in_flight.get(key, 0) + 1

    def _landed(self, entry: Entry) -> None:
        """An entry in flight leaves flight (acked, retried, dead-lettered)."""
        self.in_flight_count -= 1
        key = self._key(entry.order_key)
        if key is not None:
            left = self._keys_in_flight[key] - 1
            if left:
                self._keys_in_flight[key] = left
            else:
                del self._keys_in_flight[key]
        self._prune()

    def _deadline(self, offset: int, entry: Entry) -> None:
        heapq.heappush(self._deadlines, (entry.until_ms, offset, entry.delivery_id))
        self._prune()

    def _prune(self) -> None:
        deadlines = self._deadlines
        if len(deadlines) > 2 * self.in_flight_count + 64:  # mostly stale: rebuild
            deadlines[:] = [item for item in deadlines if self._holds(item[1], item[2])]
            heapq.heapify(deadlines)

    def _advance(self) -> None:
        while self._window:
            offset = next(iter(self._window))
            if self._window[offset].state is not EntryState.DONE:
                break
            del self._window[offset]
            self._committed_offset = offset + 1
        if not self._window:
            self._committed_offset = self._scan_offset
