"""A topic a broker does not know: unknown, or only not applied yet.

A topic exists for a broker once its tables applied the record that created it (dispatch
reached it: app/broker/metadata_log.py), or its consume queues hold its entries. Two states
hold records the tables lack while the log has them:
- dispatch trails the log's end: a slave appends what its master streams and acknowledges it
  before its dispatch applies it (seconds behind when the disk is slow: a topic record's apply
  writes the metadata database). The master may already have answered 201 to a put to the
  topic, because this slave holds the record.
- a rebuild: a cut of the log below a record the tables applied resets them and replays the
  records left (store/system_feed.py); until the replay ends they hold only what it reached.
Neither is the topic's absence. So a lookup that finds nothing first waits for the tables to
hold every record the log held when it asked (no rebuild running, dispatch at that end), for
at most `wait_ms`: then the topic is KNOWN, or ABSENT (a 404 is the truth), or the tables are
still BEHIND (the caller answers a retryable 503).

`step` decides; `settle` is the IO around it (the store's dispatch waits, on the event loop).
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Callable

from store import MessageStore, PutMessageStatus
from store.clock import monotonic_ms
from store.waits.completion import PutCompletion

# How long a lookup of an unknown topic waits for the tables to catch up with the log.
CATCH_UP_WAIT_MS = 2000
# A rebuild runs on the thread that cut the log (no wait to join): looked at this often.
REBUILD_LOOK_S = 0.02


class Step(enum.Enum):
    CURRENT = enum.auto()  # the tables hold every record up to the end asked about
    WAIT_REBUILD = enum.auto()
    WAIT_DISPATCH = enum.auto()
    TIMED_OUT = enum.auto()


class Outcome(enum.Enum):
    KNOWN = enum.auto()
    ABSENT = enum.auto()  # the tables hold every record the log held: the topic is not there
    BEHIND = enum.auto()  # they did not catch up within the wait: retry


def step(rebuilding: bool, dispatched_offset: int, end_offset: int, remaining_ms: int) -> Step:
    """What a lookup that found nothing does next: the tables are current once no rebuild runs
    and dispatch reached `end_offset` (the log's end when the lookup began, or below it after
    a cut); else it waits while time remains."""
    if not rebuilding and dispatched_offset >= end_offset:
        return Step.CURRENT
    if remaining_ms <= 0:
        return Step.TIMED_OUT
    return Step.WAIT_REBUILD if rebuilding else Step.WAIT_DISPATCH


def dispatch_end(store: MessageStore) -> int:
    """Where dispatch stops now: the log's end, or the commit in DLedger mode."""
    end = store.commit_log.max_offset
    limit = store.dispatch.limit_offset
    return end if limit is None else min(end, limit)


async def settle(store: MessageStore, known: Callable[[], bool],
                 wait_ms: int | None = None) -> Outcome:
    """Whether `known()` holds once the tables hold every record the log holds now, waiting
    at most `wait_ms` (CATCH_UP_WAIT_MS when None) for them."""
    end_offset = dispatch_end(store)
    deadline_ms = monotonic_ms() + (CATCH_UP_WAIT_MS if wait_ms is None else wait_ms)
    while not known():
        end_offset = min(end_offset, dispatch_end(store))  # a cut may have lowered it
        remaining_ms = deadline_ms - monotonic_ms()
        dispatch = store.dispatch
        next_step = step(store.system_feed.rebuilding, dispatch.dispatched_offset, end_offset,
                         remaining_ms)
        if next_step is Step.CURRENT:
            return Outcome.KNOWN if known() else Outcome.ABSENT
        if next_step is Step.TIMED_OUT:
            return Outcome.BEHIND
        if next_step is Step.WAIT_DISPATCH:
            status = await PutCompletion(pending=store.wait_dispatched(end_offset,
                                                                       remaining_ms))
            if status is PutMessageStatus.PUT_OK and dispatch.dispatched_offset >= end_offset:
                continue
        # A rebuild, or a wait that ended without dispatch there (a cut meanwhile): look
        # again shortly, never spinning on the event loop.
        await asyncio.sleep(min(REBUILD_LOOK_S, max(remaining_ms, 1) / 1000))
    return Outcome.KNOWN
