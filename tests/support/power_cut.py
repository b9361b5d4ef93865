"""What a power cut leaves of a stopped broker's files, for tests that restart it."""

from __future__ import annotations

from pathlib import Path

from store.paths import StorePaths


def lose_tail(data_dir: Path, offset: int) -> None:
    """What a power cut does to unflushed bytes: the log on disk ends at `offset`."""
    paths = StorePaths(data_dir)
    for path in sorted(paths.commit_log_dir.iterdir()):
        if not path.name.isdigit():
            continue
        start = int(path.name)
        size = path.stat().st_size
        if start >= offset and start > 0:
            path.unlink()
        elif start < offset < start + size:
            with path.open("r+b") as file:
                file.seek(offset - start)
                file.write(bytes(size - (offset - start)))
    paths.checkpoint.unlink(missing_ok=True)
    paths.abort_marker.touch()
