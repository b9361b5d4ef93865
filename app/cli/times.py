"""Times on the command line: epoch milliseconds or ISO 8601 in, ISO 8601 UTC out."""

from __future__ import annotations

import argparse
import datetime


def timestamp_ms(text: str) -> int:
    """Epoch milliseconds, or an ISO 8601 time (UTC when it names no zone)."""
    if text.isdigit():
        return int(text)
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(
            f"{text!r} is neither epoch milliseconds nor an ISO 8601 time") from error
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return int(moment.timestamp() * 1000)


def iso_time(timestamp_ms: int) -> str:
    """Epoch milliseconds as ISO 8601 in UTC, to the millisecond: 2026-01-02T03:04:05.678Z."""
    moment = datetime.datetime.fromtimestamp(timestamp_ms / 1000, datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")
