"""Give the C heap's free pages back to the system once the broker has started.

Starting a broker (imports, the app's routes and schemas, the metadata database's check)
leaves several MB of freed blocks in glibc's heap that malloc keeps for later: `malloc_trim(0)`
returns them (about 6 MB of a started master's resident set, bench/idle_memory.py). A C
library without it (musl, macOS) is left as it is.
"""

from __future__ import annotations

import ctypes
import gc


def release_free_memory() -> bool:
    """Collect, then trim the heap; False where the C library has no malloc_trim."""
    gc.collect()
    # The process's own symbols, the C library's among them (no search for its file).
    trim = getattr(ctypes.CDLL(None), "malloc_trim", None)
    if trim is None:
        return False
    trim(0)
    return True
