"""Give the C heap's free pages back to the system once the broker has started.

Starting a broker (imports, the app's routes and schemas, the metadata database's check)
leaves several MB of freed blocks in glibc's heap that malloc keeps for later: `malloc_trim(0)`
returns them (about 6 MB of a started master's resident set, bench/idle_memory.py). A C
library without it (musl, macOS) is left as it is.

It forces no collection of its own: with `gc_tuning` on (the default) the broker has just
collected and frozen its heap (app/server/gc_tuning.py), so a second collection found
nothing; with it off, the collector is left as Python runs it (a broker started inside a
test process, whose heap is the test run's: a full collection there took about 0.27 s).
"""

from __future__ import annotations

import ctypes


def release_free_memory() -> bool:
    """Trim the heap; False where the C library has no malloc_trim."""
    # The process's own symbols, the C library's among them (no search for its file).
    trim = getattr(ctypes.CDLL(None), "malloc_trim", None)
    if trim is None:
        return False
    trim(0)
    return True
