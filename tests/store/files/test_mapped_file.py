from __future__ import annotations

from pathlib import Path

from store.files.mapped_file import MappedFile

SIZE = 4 * 1024 * 1024


def test_truncate_zeroes_unflushed_bytes(tmp_path: Path) -> None:
    """Bytes written through the mapping but never flushed are zeroed by truncate_to, and
    holes far past them are left alone."""
    mapped = MappedFile(tmp_path / "00000000000000000000", 0, SIZE, create=True)
    try:
        mapped.append(b"\xab" * 10_000)
        mapped.write_position = 3 * 1024 * 1024
        mapped.write_at(3 * 1024 * 1024 - 100, b"\xcd" * 100)
        cleared = mapped.truncate_to(5_000)
        assert cleared > 0
        assert mapped.read(0, 5_000) == b"\xab" * 5_000
        assert mapped.read(5_000, SIZE - 5_000) == bytes(SIZE - 5_000)
        assert mapped.write_position == 5_000
    finally:
        mapped.close()
    reopened = MappedFile(tmp_path / "00000000000000000000", 0, SIZE, create=False)
    try:
        assert reopened.read(4_990, 20) == b"\xab" * 10 + bytes(10)
    finally:
        reopened.close()
