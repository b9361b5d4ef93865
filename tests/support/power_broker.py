"""`python -m tests.support.power_broker JOURNAL SYNC_DELAY_MS serve ...`: the real broker
(`app.cli.main`) with a durability journal (tests/support/power.py) recording what each msync and
checkpoint made durable (each msync SYNC_DELAY_MS late, a slow disk), so that a test can play
a power cut on its files after killing it."""

from __future__ import annotations

import sys
from pathlib import Path

from app.cli import main as cli
from store.files import durability
from tests.support.power import DurabilityJournal


def main() -> int:
    journal, sync_delay_ms = Path(sys.argv[1]), float(sys.argv[2])
    durability.add_listener(DurabilityJournal(journal, sync_delay_ms / 1000))
    return cli.main(sys.argv[3:])


if __name__ == "__main__":
    raise SystemExit(main())
