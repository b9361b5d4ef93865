"""A power cut, simulated from what the store made durable.

`DurableImage` listens at the store's durability seam (store/files/durability.py): it keeps, per
file, the bytes each msync covered, and the last content of each atomically replaced file
(the checkpoint). After the store stopped without flushing (`halt()`, or kill -9 of a broker
process, which keeps the page cache), `cut` plays the power loss on the files: every page of a
commit-log or consume-queue file whose content differs from the durable image is either
dropped (reverted to the image: zeros where nothing was ever synced) or kept (the kernel wrote
it back on its own), as the caller's `keep_page` decides; a log file created since the last
fsync of its directory goes (its name was never durable) unless `keep_name` says the kernel
committed it anyway (names are kept in creation order: once one goes, all later ones go);
the checkpoint (and a DLedger log's hard-state and base files) reverts to its last durable
content, or goes when it never had one.

Assumptions, on the generous side of a real disk: a page is written back whole (no torn
sector inside a page); new directories and file deletions are durable at once.
"""

from __future__ import annotations

import mmap
import os
import struct
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from store.paths import StorePaths

PAGE_SIZE_BYTES = mmap.PAGESIZE

KeepPage = Callable[[Path, int], bool]  # (path, page index) -> whether the dirty page survives
KeepName = Callable[[Path], bool]  # whether a file whose name was not durable survives


def drop_every_page(path: Path, page_index: int) -> bool:
    """The strictest cut: only what was synced survives."""
    return False


def drop_every_name(path: Path) -> bool:
    return False


@dataclass
class CutReport:
    """Per file, the indexes of the pages that differed from the durable image."""

    dirty_pages: dict[Path, list[int]] = field(default_factory=dict)
    dropped_pages: dict[Path, list[int]] = field(default_factory=dict)
    # Per file, the first byte a dropped page changed (file position), if any did.
    first_dropped_byte: dict[Path, int] = field(default_factory=dict)
    # Log files whose names were not durable: gone with the power.
    files_lost: list[Path] = field(default_factory=list)
    checkpoint_reverted: bool = False

    @property
    def dirty_page_count(self) -> int:
        return sum(len(pages) for pages in self.dirty_pages.values())

    @property
    def dropped_page_count(self) -> int:
        return sum(len(pages) for pages in self.dropped_pages.values())

    @property
    def hole_count(self) -> int:
        """Files where a dirty page survived after a dropped one: holes, not a cut tail."""
        return sum(
            1 for path, dropped in self.dropped_pages.items()
            if dropped and any(page > dropped[0] for page in self.dirty_pages[path]
                               if page not in dropped)
        )


class DurableImage:
    """What survives a power cut: the store's durability listener (see the module doc)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._files: dict[Path, bytearray] = {}
        self._replaced: dict[Path, bytes] = {}
        # Created since their directory's last fsync, in creation order (a dict as an ordered
        # set): a journaling file system commits names in that order, so the names a cut
        # keeps are a prefix of it.
        self._unnamed: dict[Path, None] = {}

    # -- the listener ---------------------------------------------------------------------

    def created(self, path: Path) -> None:
        with self._lock:
            self._files[path] = bytearray()
            self._unnamed.pop(path, None)
            self._unnamed[path] = None

    def names_synced(self, directory: Path) -> None:
        with self._lock:
            self._unnamed = {path: None for path in self._unnamed if path.parent != directory}

    def synced(self, path: Path, position: int, data: bytes) -> None:
        with self._lock:
            image = self._files.setdefault(path, bytearray())
            end = position + len(data)
            if len(image) < end:
                image.extend(bytes(end - len(image)))
            image[position:end] = data

    def replaced(self, path: Path, data: bytes) -> None:
        with self._lock:
            self._replaced[path] = bytes(data)

    # -- the cut --------------------------------------------------------------------------

    def durable_bytes(self, path: Path, size_bytes: int) -> bytes:
        """The file as the disk holds it for sure: synced bytes, zeros elsewhere."""
        with self._lock:
            image = bytes(self._files.get(path, b""))[:size_bytes]
        return image + bytes(size_bytes - len(image))

    def cut(self, root: Path, keep_page: KeepPage = drop_every_page,
            keep_name: KeepName = drop_every_name) -> CutReport:
        """Play a power loss on the stopped store under `root` (see the module doc)."""
        report = CutReport()
        with self._lock:
            unnamed, self._unnamed = self._unnamed, {}
        lost = _names_lost([path for path in unnamed if path.exists()], keep_name)
        for path in log_files(root):
            if path in lost:
                report.files_lost.append(path)
                path.unlink()
            else:
                self._cut_file(path, keep_page, report)
        paths = StorePaths(root)
        report.checkpoint_reverted = self._revert_small_file(paths.checkpoint)
        for path in (paths.dledger_hard_state, paths.dledger_log_base):
            self._revert_small_file(path)
        return report

    def _revert_small_file(self, path: Path) -> bool:
        """An atomically replaced file goes back to its last durable content, or goes when it
        never had one; return whether it changed."""
        with self._lock:
            durable = self._replaced.get(path)
        if durable is None:
            existed = path.exists()
            path.unlink(missing_ok=True)
            return existed
        if path.read_bytes() != durable:
            path.write_bytes(durable)
            return True
        return False

    def unsynced_page_count(self, paths: Iterable[Path]) -> int:
        """How many pages of these files differ from what was made durable."""
        return sum(len(self._unsynced_pages(path)[0]) for path in paths)

    def _unsynced_pages(self, path: Path) -> tuple[list[int], bytes, bytes]:
        """(indexes of the pages that differ, current bytes, durable bytes) of a file."""
        current = path.read_bytes()
        durable = self.durable_bytes(path, len(current))
        if current == durable:
            return [], current, durable
        pages = [start // PAGE_SIZE_BYTES for start in range(0, len(current), PAGE_SIZE_BYTES)
                 if current[start : start + PAGE_SIZE_BYTES]
                 != durable[start : start + PAGE_SIZE_BYTES]]
        return pages, current, durable

    def _cut_file(self, path: Path, keep_page: KeepPage, report: CutReport) -> None:
        pages, current, durable = self._unsynced_pages(path)
        if not pages:
            return
        with path.open("r+b") as file:
            for page_index in pages:
                start, end = page_index * PAGE_SIZE_BYTES, (page_index + 1) * PAGE_SIZE_BYTES
                report.dirty_pages.setdefault(path, []).append(page_index)
                if keep_page(path, page_index):
                    continue
                report.dropped_pages.setdefault(path, []).append(page_index)
                if path not in report.first_dropped_byte:
                    report.first_dropped_byte[path] = start + _first_difference(
                        current[start:end], durable[start:end])
                file.seek(start)
                file.write(durable[start:end])


def _names_lost(unnamed: list[Path], keep_name: KeepName) -> set[Path]:
    """The files whose names a cut loses: from the first one `keep_name` refuses on, in
    creation order (a later name is never durable without the earlier ones)."""
    for index, path in enumerate(unnamed):
        if not keep_name(path):
            return set(unnamed[index:])
    return set()


def log_files(root: Path) -> Iterator[Path]:
    """Every commit-log, consume-queue and DLedger index file of the store under `root`."""
    yield from sorted((root / "commitlog").glob("*"))
    yield from sorted((root / "consumequeue").glob("*/*/*"))
    yield from sorted(StorePaths(root).dledger_index_dir.glob("*"))


def _first_difference(left: bytes, right: bytes) -> int:
    return next(index for index, (a, b) in enumerate(zip(left, right, strict=True)) if a != b)


# -- a journal of durability events, for a store in another process --------------------------

# kind, path length, position, data length; then the path and the data.
_EVENT = struct.Struct(">BHqi")
_CREATED, _SYNCED, _REPLACED, _NAMES_SYNCED = 1, 2, 3, 4


class DurabilityJournal:
    """A listener that appends every event to a file, read back by `replay` after the process
    died: the event is written before the store goes on (and so before any put it covers is
    acknowledged), so the journal never claims less than what was acknowledged.

    `sync_delay_s` plays a slow disk: each msync counts as durable only that much later, so
    a kill often falls after an msync and before the journal says so. A store that answers
    a put before its msync is recorded (an acknowledgement ahead of the disk) is then caught.
    """

    def __init__(self, path: Path, sync_delay_s: float = 0.0) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._lock = threading.Lock()
        self._sync_delay_s = sync_delay_s

    def _write(self, kind: int, path: Path, position: int, data: bytes) -> None:
        name = os.fsencode(path)
        event = _EVENT.pack(kind, len(name), position, len(data)) + name + data
        with self._lock:
            os.write(self._fd, event)

    def created(self, path: Path) -> None:
        self._write(_CREATED, path, 0, b"")

    def synced(self, path: Path, position: int, data: bytes) -> None:
        if self._sync_delay_s:
            time.sleep(self._sync_delay_s)
        self._write(_SYNCED, path, position, data)

    def replaced(self, path: Path, data: bytes) -> None:
        self._write(_REPLACED, path, 0, data)

    def names_synced(self, directory: Path) -> None:
        self._write(_NAMES_SYNCED, directory, 0, b"")


def replay(journal_path: Path, image: DurableImage) -> int:
    """Feed a journal's events to `image`; return how many (a torn last event is ignored)."""
    raw = journal_path.read_bytes()
    position = count = 0
    while position + _EVENT.size <= len(raw):
        kind, name_size, file_position, data_size = _EVENT.unpack_from(raw, position)
        start = position + _EVENT.size
        end = start + name_size + data_size
        if end > len(raw):
            break
        path = Path(os.fsdecode(raw[start : start + name_size]))
        data = raw[start + name_size : end]
        if kind == _CREATED:
            image.created(path)
        elif kind == _SYNCED:
            image.synced(path, file_position, data)
        elif kind == _NAMES_SYNCED:
            image.names_synced(path)
        else:
            image.replaced(path, data)
        position, count = end, count + 1
    return count
