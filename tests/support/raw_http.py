"""HTTP/1.1 by hand over a socket, for clients no HTTP library would be: slow, huge, stalled.

`RawClient` writes exactly the bytes a test gives it and reads the answer (or notices the
close) with its own deadline; `rss_bytes` reads a process's resident memory from /proc.
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class RawAnswer:
    status: int
    headers: dict[str, str]
    body: bytes


@dataclass
class RawClient:
    port: int
    timeout_s: float = 10.0
    sock: socket.socket = field(init=False)
    _buffer: bytes = b""

    def __post_init__(self) -> None:
        self.sock = socket.create_connection(("127.0.0.1", self.port), timeout=self.timeout_s)

    def send(self, data: bytes) -> bool:
        """Write `data`; False when the server has closed or reset the connection."""
        try:
            self.sock.sendall(data)
        except OSError:
            return False
        return True

    def _fill(self, deadline_s: float) -> bool:
        self.sock.settimeout(max(0.01, deadline_s - time.monotonic()))
        try:
            chunk = self.sock.recv(65536)
        except (ConnectionResetError, BrokenPipeError):
            return False
        self._buffer += chunk
        return bool(chunk)

    def read_answer(self, timeout_s: float | None = None) -> RawAnswer:
        """The next whole answer (Content-Length framed); raises TimeoutError or EOFError."""
        deadline_s = time.monotonic() + (timeout_s or self.timeout_s)
        while b"\r\n\r\n" not in self._buffer:
            if not self._fill(deadline_s):
                raise EOFError(f"closed before an answer: {self._buffer[:200]!r}")
        head, _, rest = self._buffer.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        length = int(headers.get("content-length", "0"))
        self._buffer = rest
        while len(self._buffer) < length:
            if not self._fill(deadline_s):
                raise EOFError("closed in the middle of an answer")
        body, self._buffer = self._buffer[:length], self._buffer[length:]
        return RawAnswer(int(lines[0].split()[1]), headers, body)

    def closed_within(self, timeout_s: float) -> bool:
        """Whether the server closes (or resets) the connection within `timeout_s`, reading
        and keeping whatever it sends before."""
        deadline_s = time.monotonic() + timeout_s
        while time.monotonic() < deadline_s:
            try:
                if not self._fill(deadline_s):
                    return True
            except TimeoutError:
                return False
        return False

    def close(self) -> None:
        self.sock.close()


def request_head(method: str, path: str, headers: dict[str, str]) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "host: 127.0.0.1",
             *(f"{name}: {value}" for name, value in headers.items()), "", ""]
    return "\r\n".join(lines).encode("latin-1")


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for process {pid}")
