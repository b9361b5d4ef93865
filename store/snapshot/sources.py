"""Where an export finds the commit-log files and how it opens one, in a way that survives
retention running meanwhile.

`DirectoryLogFiles` lists and opens files by path: a stopped broker's data dir, or one beside
a running broker (a file removed since it was listed opens as None). `HeldLogFiles` is the
running broker's own log: a file is held while it is read, so retention retires it but its
descriptor stays valid, and a file retired before it is reached opens as None. Either way the
export stops there with what it read (log_reader.LogFileRemoved), never with an OSError.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Protocol

from store.files.mapped_file_queue import MappedFileQueue
from store.snapshot.log_reader import LogFile, list_log_files, open_by_path


class LogFiles(Protocol):
    def list(self) -> list[LogFile]:
        """The log's files in offset order."""
        ...

    def open(self, log_file: LogFile) -> AbstractContextManager[int | None]:
        """A descriptor of the file, valid inside the `with`; None when retention removed it."""
        ...


class DirectoryLogFiles:
    def __init__(self, commit_log_dir: Path) -> None:
        self._directory = commit_log_dir

    def list(self) -> list[LogFile]:
        return list_log_files(self._directory)

    def open(self, log_file: LogFile) -> AbstractContextManager[int | None]:
        return open_by_path(log_file)


class HeldLogFiles:
    def __init__(self, files: MappedFileQueue) -> None:
        self._files = files

    def list(self) -> list[LogFile]:
        return [LogFile(mapped.path, mapped.start_offset, mapped.size_bytes)
                for mapped in self._files.files]

    @contextmanager
    def open(self, log_file: LogFile) -> Iterator[int | None]:
        mapped = self._files.hold_file(log_file.start_offset)
        if mapped is None:
            yield None
            return
        try:
            yield mapped.fd if mapped.start_offset == log_file.start_offset else None
        finally:
            mapped.release()
