"""Reference counting for resources that readers use while an owner may retire them
(RocketMQ's ReferenceResource hold/release).

The owner's own reference is the first one. `retire()` makes every later `hold()` fail and
drops the owner's reference; whoever drops the last reference (the owner, or the last holder
in its `finally`) runs `_cleanup()`, exactly once. So retention never closes a file under a
reader or a sendfile: it marks the file, and the last user closes it.
"""

from __future__ import annotations

import threading


class ReferenceCounted:
    """The references are the items of a list: `append` and `pop` are atomic under the GIL,
    so a hold costs no lock (a lock made a hold and its release cost a microsecond on the
    read path, twice per message). Only the final cleanup takes a lock."""

    __slots__ = ("_references", "_available", "_cleanup_lock", "_cleaned")

    def __init__(self) -> None:
        self._references: list[None] = [None]  # the owner's, dropped by retire()
        self._available = True
        self._cleanup_lock = threading.Lock()
        self._cleaned = False

    @property
    def is_available(self) -> bool:
        """False once retired: no new hold succeeds."""
        return self._available

    @property
    def reference_count(self) -> int:
        return len(self._references)

    def hold(self) -> bool:
        """Take a reference; False when the resource is retired (the caller must not use
        it). Every successful hold is paired with one `release()` in a `finally`."""
        if self._available:
            self._references.append(None)
            # Checked again after the append: a retire() in between may have seen no holder
            # and cleaned up; this hold must then fail (and its release is a no-op cleanup).
            if self._available:
                return True
            self.release()
        return False

    def release(self) -> None:
        references = self._references
        references.pop()  # IndexError: a release without a hold, a bug in the caller
        # While available the owner's reference is in the list: empty means retired.
        if not references:
            self._cleanup_once()

    def retire(self) -> bool:
        """Refuse new holds and drop the owner's reference; return False when it was retired
        already. The resource is cleaned up now if nobody holds it, else by the last holder."""
        with self._cleanup_lock:
            if not self._available:
                return False
            self._available = False
        self.release()
        return True

    def _cleanup_once(self) -> None:
        with self._cleanup_lock:
            if self._cleaned:
                return
            self._cleaned = True
        self._cleanup()

    def _cleanup(self) -> None:
        """Free what the resource owns; runs once, after the last reference is dropped."""
        raise NotImplementedError
