"""A child process's stdout, line by line, each read with its own deadline: a reader thread
feeds a bounded queue, so a child that hangs fails the test instead of blocking it."""

from __future__ import annotations

import queue
import subprocess
import threading
import time
from collections.abc import Callable
from typing import IO

LINES_BUFFERED_MAX = 10_000


class ChildLines:
    def __init__(self, child: subprocess.Popen[str]) -> None:
        assert child.stdout is not None, "start the child with stdout=subprocess.PIPE"
        self._child = child
        self._lines: queue.Queue[str | None] = queue.Queue(LINES_BUFFERED_MAX)
        self._reader = threading.Thread(target=self._read, args=(child.stdout,), daemon=True)
        self._reader.start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            self._lines.put(line.rstrip("\n"))
        self._lines.put(None)  # end of output

    def next(self, timeout_s: float = 30.0) -> str:
        """The next line; fails when the child prints none within `timeout_s` or exits."""
        try:
            line = self._lines.get(timeout=timeout_s)
        except queue.Empty:
            raise AssertionError(f"no line from the child within {timeout_s} s") from None
        if line is None:
            raise AssertionError(f"the child exited ({self._child.poll()}) without the line")
        return line

    def until(self, accept: Callable[[str], bool], timeout_s: float = 60.0) -> str:
        """The first line `accept` takes; fails when none comes within `timeout_s` overall."""
        deadline = time.monotonic() + timeout_s
        while True:
            line = self.next(max(0.0, deadline - time.monotonic()))
            if accept(line):
                return line
