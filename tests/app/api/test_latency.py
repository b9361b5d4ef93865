"""LatencyHistogram.observe_delays (a read's delivery delays at once) counts and sums what
observing each delay alone does: few stamps or many, repeated or not, in the future too."""

from __future__ import annotations

from app.api.latency import LatencyHistogram


def test_delays_observed_at_once_count_as_each_alone() -> None:
    now_ms = 1_000_000.0
    for stamps in ([], [999_999], [990_000, 999_000, 1_000_500, 999_000],
                   [999_400] * 30 + [900_000, 1_200_000] + [999_000] * 9):
        at_once, each = LatencyHistogram(), LatencyHistogram()
        at_once.observe_delays(now_ms, stamps)
        for stamp_ms in stamps:
            each.observe(max(0.0, now_ms - stamp_ms) / 1000)
        assert at_once.counts == each.counts, stamps
        assert abs(at_once.sum_s - each.sum_s) < 1e-9, stamps


def test_a_reads_delays_in_one_bucket_count_there() -> None:
    """The delays of a read whose messages fall in one bucket (the usual read), or at its
    edges: each counts where observing it alone counts it, at a wall-clock time."""
    now_ms = 1_795_000_000_000.5
    bounds_ms = [bound_s * 1000 for bound_s in LatencyHistogram().upper_bounds_s]
    for low_ms, high_ms in ((1.0, 1.5), (0.0, 0.5), (0.5, 0.5), (3.0, 5.0), (5.0, 5.0001),
                            (20.0, 20.0), (20.0, 50.0), (20000.0, 90000.0)):
        stamps = [int(now_ms - high_ms)] * 3 + [int(now_ms - low_ms)] * 29
        at_once, each = LatencyHistogram(), LatencyHistogram()
        at_once.observe_delays(now_ms, stamps)
        for stamp_ms in stamps:
            each.observe(max(0.0, now_ms - stamp_ms) / 1000)
        assert at_once.counts == each.counts, (low_ms, high_ms, bounds_ms)
        assert abs(at_once.sum_s - each.sum_s) < 1e-9, (low_ms, high_ms)
