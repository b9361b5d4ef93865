"""A slave that is connected and acking but behind: a scripted slave (the real handshake and
tagged frames over a real socket) receives every frame the master sends, and reports at most
`cap_offset` (a test raises the cap step by step). It reports after each receive and at least
every `report_interval_s`, so the master keeps the connection as a live, eligible slave."""

from __future__ import annotations

import threading

from tests.support.ha_peer import ScriptedSlave

REPORT_INTERVAL_S = 0.1
JOIN_TIMEOUT_S = 10.0


class LaggingSlave:
    def __init__(self, port: int, secret: str | None,
                 report_interval_s: float = REPORT_INTERVAL_S) -> None:
        self._peer = ScriptedSlave(port, secret).handshake()
        self._peer.sock.settimeout(report_interval_s)
        self._lock = threading.Lock()
        self._cap_offset = 0
        self.received_offset = 0  # end of the commit-log bytes received so far
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lagging-slave", daemon=True)
        self._thread.start()

    @property
    def cap_offset(self) -> int:
        return self._cap_offset

    def raise_to(self, cap_offset: int) -> None:
        """Let acks up to `cap_offset` through (the next report carries them)."""
        with self._lock:
            assert cap_offset >= self._cap_offset
            self._cap_offset = cap_offset

    def close(self) -> None:
        self._stop.set()
        self._thread.join(JOIN_TIMEOUT_S)
        self._peer.close()

    def _run(self) -> None:
        peer = self._peer
        try:
            peer.report(0)  # an empty slave: stream from the start
            while not self._stop.is_set():
                try:
                    size = peer.sock.recv_into(peer.parser.free_view())
                except TimeoutError:
                    size = -1
                if size == 0:
                    return  # the master closed the connection
                if size > 0:
                    for offset, body in peer.parser.received(size):
                        self.received_offset = max(self.received_offset, offset + len(body))
                with self._lock:
                    ack = min(self.received_offset, self._cap_offset)
                peer.report(ack)
        except OSError as error:
            if not self._stop.is_set():
                self.error = error
