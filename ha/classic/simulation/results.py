"""What one run of the classic-replication simulation did, and a summary of many."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SimResult:
    seed: int
    events: int
    put_ok: int
    promotions: int
    forced_promotions: int
    rejoins: int
    truncated_bytes: int
    metadata_records: int
    metadata_lost: int  # a broker's log lost metadata records its tables had applied
    metadata_checked_to_end: bool  # no master ever held such tables
    promotions_metadata_checked: int
    timers_delivered: int  # delayed messages the last master's log delivered


def summary(results: list[SimResult]) -> str:
    return (f"{sum(r.events for r in results)} events, "
            f"{sum(r.put_ok for r in results)} SYNC_MASTER PUT_OK answers, "
            f"{sum(r.promotions for r in results)} promotions of which "
            f"{sum(r.forced_promotions for r in results)} forced, "
            f"{sum(r.rejoins for r in results)} rejoins, "
            f"{sum(r.truncated_bytes for r in results)} bytes cut back, "
            f"{sum(r.metadata_records for r in results)} metadata records, "
            f"{sum(r.timers_delivered for r in results)} delayed messages delivered, "
            f"{sum(r.promotions_metadata_checked for r in results)} promotions whose tables "
            f"and queues were checked against the old master's, "
            f"{sum(r.metadata_lost for r in results)} losses of applied metadata records "
            f"(metadata checked to the end in {sum(r.metadata_checked_to_end for r in results)} "
            f"runs)")
