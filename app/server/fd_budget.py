"""How many HTTP connections the broker may hold without starving the store of descriptors.

Every accepted connection costs one file descriptor, and so does every file the store keeps
open. With no cap, a flood of idle connections can take the last descriptors, and the store
then fails to open its next commit-log or consume-queue file (a put answers an error, a
checkpoint fails). So the connection cap is what the process limit leaves after the store's
reserve:

    reserve   = 2 x consume_queue_open_files_max      (each mapped queue file: fd + map)
              + ha_connections_max + ha_handshakes_max (the HA listener's sockets)
              + STORE_FIXED_FDS                        (commit-log files, metadata DB,
                                                        lock, checkpoint, snapshots, logs)
    budget    = RLIMIT_NOFILE (soft, raised to the hard limit at start) - reserve
    cap       = min(http_connections_max, budget)

With the defaults (256 queue files, 16 + 8 HA sockets) the reserve is 512 + 24 + 128 = 664:
under the usual soft limit of 1024 (when the hard limit does not allow raising it) the cap is
360, with 20000 it is http_connections_max (1024).
"""

from __future__ import annotations

import resource
from dataclasses import dataclass

from app.settings import Settings

# Commit-log files open at once (retention keeps a few 1 GiB files), the metadata database and
# its pool, the store lock, checkpoint and spill files, a snapshot export's readers and Parquet
# writers, stdio and log files; generous, because running out here costs durability.
STORE_FIXED_FDS = 128
# Below this many connections the broker cannot serve even a small deployment: refuse to start.
CONNECTIONS_MIN = 16


class FdBudgetError(ValueError):
    """The descriptor limit leaves too few connections; the message shows the arithmetic."""


@dataclass(frozen=True, slots=True)
class FdBudget:
    nofile_limit: int
    store_reserve: int
    connections_max: int

    def describe(self) -> str:
        return (f"descriptors: RLIMIT_NOFILE {self.nofile_limit} - store reserve "
                f"{self.store_reserve} -> at most {self.connections_max} HTTP connections")


def store_reserve(settings: Settings) -> int:
    return (2 * settings.consume_queue_open_files_max + settings.ha_connections_max
            + settings.ha_handshakes_max + STORE_FIXED_FDS)


def raise_nofile_limit() -> int:
    """Raise the soft descriptor limit to the hard one (as Go and the JVM do); the soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft == resource.RLIM_INFINITY:
        return soft if soft != resource.RLIM_INFINITY else 1 << 20
    if soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):
            return soft
        return hard
    return soft


def fd_budget(settings: Settings, nofile_limit: int) -> FdBudget:
    """The connection cap for `nofile_limit` descriptors; FdBudgetError if it is too small."""
    reserve = store_reserve(settings)
    left = nofile_limit - reserve
    if left < CONNECTIONS_MIN:
        raise FdBudgetError(
            f"RLIMIT_NOFILE {nofile_limit} - store reserve {reserve} leaves {left} descriptors "
            f"for HTTP connections (at least {CONNECTIONS_MIN} needed): raise `ulimit -n` or "
            "lower consume_queue_open_files_max")
    return FdBudget(nofile_limit, reserve, min(settings.http_connections_max, left))
