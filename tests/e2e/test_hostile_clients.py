"""The hostile-client scenario of issue 12, small: slowloris connections and 100 MB floods
without a token against a real broker while normal producers run (bench/hostile.py is the
full-size run)."""

from __future__ import annotations

import pytest

from bench.hostile import RSS_GROWTH_MAX, Plan, run

pytestmark = pytest.mark.processes


def test_attackers_are_refused_or_cut_and_memory_stays_bounded() -> None:
    """50 slowloris connections and 6 clients sending 100 MB headers or bodies without a token,
    next to 4 producers: every attacker connection is refused or cut within its deadline (none
    overdue), the broker's memory grows by less than RSS_GROWTH_MAX, and every put succeeds.
    The producers' latencies are printed, not asserted (a loaded CI host makes them noisy)."""
    report = run(Plan(slowloris=50, floods=6, producers=4, baseline_s=2.0, attack_s=5.0,
                      header_timeout_s=1.0, body_timeout_s=1.0))
    print("\n".join(report.lines()))
    assert report.outcomes["overdue"] == 0, report.outcomes
    assert report.outcomes["refused"] + report.outcomes["cut"] >= 50, report.outcomes
    assert set(report.answers) <= {401, 408, 431}, report.answers
    assert report.answers[408] > 0 and report.answers[431] > 0 and report.answers[401] > 0
    assert report.rss_peak_bytes - report.rss_before_bytes < RSS_GROWTH_MAX
    assert report.baseline.seconds and report.attack.seconds
    assert report.baseline.errors == report.attack.errors == 0
