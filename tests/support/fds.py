"""What this process has open or mapped, from /proc/self: for tests that check nothing leaks."""

from __future__ import annotations

import os
from pathlib import Path


def open_fds_of(path: Path) -> list[int]:
    """Descriptors of this process that point at `path` (also once it is unlinked)."""
    found = []
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except FileNotFoundError:
            continue  # the descriptor listdir itself used
        if target in (str(path), f"{path} (deleted)"):
            found.append(int(name))
    return found


def is_mapped(path: Path) -> bool:
    """Whether a mapping of `path` is in this process's address space."""
    with open("/proc/self/maps") as maps:
        return any(str(path) in line for line in maps)
