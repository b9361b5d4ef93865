"""How long an msync stops the other threads of the process: mmap.flush against store/files/disk.py.

    python bench/msync_gil.py            # 3 rounds of 64 MiB of dirty pages
    python bench/msync_gil.py --quick    # 1 round of 16 MiB

Each round dirties every page of a mapped file, then msyncs it while a second thread counts
its own loop; the figure is the longest the second thread went without running (it runs
whenever it holds the interpreter lock, so a gap as long as the msync means the lock was held
throughout). The baseline is `mmap.flush`, which holds the lock; `Disk.msync` calls libc's
msync through ctypes, which releases it. The msync's own time is printed beside each.
"""

from __future__ import annotations

import argparse
import mmap
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import header, row  # noqa: E402
from store.files.disk import REAL_DISK  # noqa: E402

MIB = 1 << 20


def longest_gap_s(mapping: mmap.mmap, flush: Callable[[], None]) -> tuple[float, float]:
    """(msync seconds, longest seconds the other thread did not run during it)."""
    for offset in range(0, len(mapping), mmap.PAGESIZE):
        mapping[offset] = (mapping[offset] + 1) % 256
    gaps: list[float] = []
    running = threading.Event()
    done = threading.Event()

    def count() -> None:
        last = time.perf_counter()
        running.set()
        while not done.is_set():
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    counter = threading.Thread(target=count, name="counter")
    counter.start()
    running.wait()
    started = time.perf_counter()
    flush()
    elapsed_s = time.perf_counter() - started
    done.set()
    counter.join()
    return elapsed_s, max(gaps)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    arguments = parser.parse_args()
    size_bytes = (16 if arguments.quick else 64) * MIB
    rounds = 1 if arguments.quick else 3
    header(f"msync of {size_bytes // MIB} MiB of dirty pages with a second thread running, "
           f"{rounds} round(s)")
    with tempfile.TemporaryDirectory(prefix="twinlog-bench-msync-") as directory:
        path = Path(directory) / "mapped"
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            os.ftruncate(fd, size_bytes)
            mapping = mmap.mmap(fd, size_bytes)
            try:
                for round_number in range(1, rounds + 1):
                    flushed_s, flush_gap_s = longest_gap_s(mapping, mapping.flush)
                    synced_s, sync_gap_s = longest_gap_s(
                        mapping, lambda: REAL_DISK.msync(mapping, 0, size_bytes))
                    print(f"    round {round_number}: mmap.flush {flushed_s * 1e3:.1f} ms "
                          f"(longest stop {flush_gap_s * 1e3:.1f} ms), Disk.msync "
                          f"{synced_s * 1e3:.1f} ms (longest stop {sync_gap_s * 1e3:.1f} ms)")
                row("mmap.flush: longest stop of the other thread (baseline)",
                    flush_gap_s * 1e3, "ms")
                row("Disk.msync: longest stop of the other thread", sync_gap_s * 1e3, "ms",
                    flush_gap_s * 1e3)
            finally:
                mapping.close()
        finally:
            os.close(fd)


if __name__ == "__main__":
    main()
