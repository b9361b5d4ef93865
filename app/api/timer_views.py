"""What `/admin/timers` and `/metrics` say about delayed messages, from the store's lanes,
the timer state (the same on every replica) and the scheduler (the master's)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from app.api.schemas.timers import LatenessView, TimerLaneView, TimersView
from store.timers.lane_entry import schedule_of
from store.timers.lanes import Lane
from store.timers.names import DROP_REASONS, SCHEDULE_TOPIC
from store.timers.scheduler import LATENESS_BOUNDS_MS, Lateness

if TYPE_CHECKING:
    from app.broker.broker import Broker


@dataclass(frozen=True, slots=True)
class _LaneFigures:
    lane: Lane
    pending: int
    next_queue_offset: int


def _lanes(broker: Broker) -> list[_LaneFigures]:
    store = broker.store
    progress = store.timer_state.progress()
    figures = []
    for lane in store.config.timers.lanes:
        bounds = store.queue_offset_range(lane.topic, lane.queue_id)
        low, high = bounds if bounds is not None else (0, 0)
        next_offset = max(progress.get(lane.key, 0), low)
        figures.append(_LaneFigures(lane, max(0, high - next_offset), next_offset))
    return figures


def _head_due_ms(broker: Broker, figures: _LaneFigures) -> int | None:
    if not figures.pending:
        return None
    lane = figures.lane
    result = broker.store.get_messages(lane.topic, lane.queue_id, figures.next_queue_offset, 1)
    if not result.messages:
        return None
    schedule = schedule_of(result.messages[0].properties)
    return schedule.due_ms if schedule is not None else None


def _bound_at(lateness: Lateness, quantile: float) -> int | None:
    """The bucket bound the quantile falls under (None: no deliveries; past the last bound:
    the max)."""
    total = sum(lateness.counts)
    if total == 0:
        return None
    seen = 0
    for index, count in enumerate(lateness.counts):
        seen += count
        if seen >= quantile * total:
            return LATENESS_BOUNDS_MS[index] if index < len(LATENESS_BOUNDS_MS) \
                else lateness.max_ms
    return lateness.max_ms


def timers_view(broker: Broker) -> TimersView:
    store = broker.store
    lanes = []
    for figures in _lanes(broker):
        lane = figures.lane
        is_level = lane.topic == SCHEDULE_TOPIC
        lanes.append(TimerLaneView(
            lane=lane.key, kind="level" if is_level else "timer",
            delay_level=lane.queue_id + 1 if is_level else None, wait_ms=lane.wait_ms,
            pending=figures.pending, next_queue_offset=figures.next_queue_offset,
            oldest_due_ms=_head_due_ms(broker, figures)))
    counts = store.timer_state.counts()
    scheduler = broker.timers
    lateness = scheduler.lateness if scheduler is not None else Lateness()
    dues = [lane.oldest_due_ms for lane in lanes if lane.oldest_due_ms is not None]
    levels = sum(lane.pending for lane in lanes if lane.kind == "level")
    timers = sum(lane.pending for lane in lanes if lane.kind == "timer")
    return TimersView(
        scheduler_active=scheduler is not None and scheduler.is_active,
        pending_total=levels + timers, pending_levels=levels, pending_timers=timers,
        oldest_due_ms=min(dues) if dues else None,
        delivered_total=counts.delivered_total, rolled_total=counts.rolled_total,
        dropped_totals={reason: counts.dropped_totals.get(reason, 0) for reason in DROP_REASONS},
        cancels_pending=store.timer_state.cancel_count,
        write_refusals_total=scheduler.write_refusals_total if scheduler is not None else 0,
        lateness=LatenessView(count=sum(lateness.counts), p50_ms_at_most=_bound_at(lateness, 0.5),
                              p99_ms_at_most=_bound_at(lateness, 0.99), max_ms=lateness.max_ms),
        lanes=lanes)


def timer_metrics(broker: Broker) -> Iterator[Metric]:
    pending = GaugeMetricFamily("twinlog_timer_pending_messages",
                                "Delayed messages not yet delivered, by kind of lane",
                                labels=["kind"])
    figures = _lanes(broker)
    pending.add_metric(["level"], sum(f.pending for f in figures
                                      if f.lane.topic == SCHEDULE_TOPIC))
    pending.add_metric(["timer"], sum(f.pending for f in figures
                                      if f.lane.topic != SCHEDULE_TOPIC))
    yield pending
    counts = broker.store.timer_state.counts()
    yield CounterMetricFamily("twinlog_timer_delivered",
                              "Delayed messages put into their topic (derived from the log)",
                              value=counts.delivered_total)
    yield CounterMetricFamily("twinlog_timer_cancelled",
                              "Delayed messages cancelled before they were due",
                              value=counts.dropped_totals.get("cancelled", 0))
    dropped = CounterMetricFamily("twinlog_timer_dropped",
                                  "Delayed messages dropped instead of delivered, by reason",
                                  labels=["reason"])
    for reason in DROP_REASONS:
        dropped.add_metric([reason], counts.dropped_totals.get(reason, 0))
    yield dropped
    scheduler = broker.timers
    if scheduler is None:
        return
    yield lateness_histogram(HistogramMetricFamily(
        "twinlog_timer_lateness_seconds",
        "Delivery time minus due time of delayed messages this broker delivered"),
        scheduler.lateness)


def lateness_histogram(histogram: HistogramMetricFamily, lateness: Lateness) -> Metric:
    """`histogram` with a Lateness's buckets (in seconds)."""
    buckets = []
    total = 0
    for bound, count in zip((*(str(b / 1000) for b in LATENESS_BOUNDS_MS), "+Inf"),
                            lateness.counts, strict=True):
        total += count
        buckets.append((bound, float(total)))
    histogram.add_metric([], buckets, lateness.sum_ms / 1000)
    return histogram
