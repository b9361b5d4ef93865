"""Prometheus metrics of a DLedger member (read at scrape time from the host's snapshot):
term, role, commit and end index, commit lag per peer, elections started."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

if TYPE_CHECKING:
    from ha.dledger.commit_log import DLedgerCommitLog  # loaded by a broker in DLedger mode only


def dledger_metrics(member: DLedgerCommitLog) -> Iterator[Metric]:
    from ha.dledger.core.member import Role  # a DLedger member's, as it is scraped

    status = member.status()
    yield GaugeMetricFamily("twinlog_dledger_term", "The member's current term",
                            value=status.term)
    role = GaugeMetricFamily("twinlog_dledger_role",
                             "1 for the member's current role, 0 for the others",
                             labels=["role"])
    for each in Role:
        role.add_metric([each.value], 1 if status.role == each.value else 0)
    yield role
    yield GaugeMetricFamily("twinlog_dledger_committed_index", "The last committed entry",
                            value=status.committed_index)
    yield GaugeMetricFamily("twinlog_dledger_end_index", "The last entry of the member's log",
                            value=status.end_index)
    yield GaugeMetricFamily("twinlog_dledger_pending_appends",
                            "Produces waiting for a quorum", value=status.pending_appends)
    yield CounterMetricFamily("twinlog_dledger_elections",
                              "Elections this member stood in as a candidate",
                              value=status.elections_started_count)
    lag_entries = GaugeMetricFamily("twinlog_dledger_peer_lag_entries",
                                    "Leader only: entries the leader holds past the peer's "
                                    "match", labels=["peer"])
    lag_bytes = GaugeMetricFamily("twinlog_dledger_peer_lag_bytes",
                                  "Leader only: commit-log bytes past the peer's match",
                                  labels=["peer"])
    for peer in status.peers:
        if peer.lag_entries is not None:
            lag_entries.add_metric([peer.peer_id], peer.lag_entries)
        if peer.lag_bytes is not None:
            lag_bytes.add_metric([peer.peer_id], peer.lag_bytes)
    yield lag_entries
    yield lag_bytes
