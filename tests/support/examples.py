"""How hard a generated test works, by tier, and where it keeps its files.

`make test` runs every test at full strength. `make unit` (the inner loop, with a budget of
2 minutes) sets TWINLOG_TIER=unit: a costly generated test whose past bugs are each pinned
by an explicit case (an `@example`, or a plain test of its own) runs fewer examples there,
`examples(full, unit=...)`. A coverage bound scales with the count it is given.

MEMORY_DIR is a memory file system, for a test that writes many short-lived stores or
snapshots and whose subject is not the disk's durability (a power cut is played from the
durability seam, not by the disk): its fsyncs cost nothing there (a snapshot export's
fsyncs took half of a 40-example test's time on the development host's disk).
"""

from __future__ import annotations

import os

UNIT = os.environ.get("TWINLOG_TIER") == "unit"
MEMORY_DIR = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None


def examples(full: int, *, unit: int) -> int:
    """`full` examples, or `unit` in `make unit`."""
    return unit if UNIT else full
