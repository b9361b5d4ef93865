"""The slave's HA client: connects to the master, reports its max offset, appends every
frame with the store's append-at-offset and reports again. On a mismatch, a protocol error or
silence it closes and reconnects after `ha_reconnect_interval_ms`.

Last-read and last-write times are kept apart (RocketMQ bug #1082): heartbeats follow writes,
housekeeping follows reads.
"""

from __future__ import annotations

import logging
import socket
import time
from dataclasses import dataclass

from ha.config import HAConfig
from ha.protocol import (
    CHALLENGE_SIZE,
    HANDSHAKE_MAGIC,
    FrameParser,
    ProtocolError,
    encode_report,
    proof,
)
from store.message_store import MessageStore
from store.service import ServiceThread
from store.status import AppendRawStatus

log = logging.getLogger(__name__)

_POLL_S = 0.1


@dataclass(frozen=True, slots=True)
class SlaveLinkView:
    master_address: str
    connected: bool
    local_max_offset: int
    master_offset_seen: int
    diff_bytes: int
    last_read_age_ms: int | None
    last_write_age_ms: int | None
    reconnect_count: int
    last_error: str | None


class HAClient(ServiceThread):
    name = "ha-client"

    def __init__(self, config: HAConfig, store: MessageStore) -> None:
        super().__init__()
        assert config.ha_master_address
        self.config = config
        self.store = store
        self.connected = False
        self.master_offset_seen = 0
        self.last_read_s: float | None = None
        self.last_write_s: float | None = None
        self.reconnect_count = 0
        self.applied_bytes_total = 0
        self._sock: socket.socket | None = None

    def stop(self) -> None:
        self._stop_event.set()
        sock = self._sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        super().stop()

    def run_once(self) -> float:
        """One connection's life; returns the reconnect wait."""
        try:
            self._session()
        except (OSError, ProtocolError) as error:
            self.last_error = f"{type(error).__name__}: {error}"
            if not self._stop_event.is_set():
                log.warning("ha client: %s; reconnecting in %d ms", self.last_error,
                            self.config.ha_reconnect_interval_ms)
        finally:
            self.connected = False
            if self._sock is not None:
                self._sock.close()
                self._sock = None
        if self._stop_event.is_set():
            return 0.0
        self.reconnect_count += 1
        return self.config.ha_reconnect_interval_ms / 1000

    def _session(self) -> None:
        host, port = self.config.master_host_port
        sock = socket.create_connection((host, port),
                                        timeout=self.config.ha_connect_timeout_ms / 1000)
        self._sock = sock
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.settimeout(_POLL_S)
        secret = self.config.secret_bytes
        if secret is not None:
            self._answer_challenge(sock, secret)
        self.connected = True
        self.last_read_s = time.monotonic()
        self._report(sock)
        parser = FrameParser()
        housekeeping_s = self.config.ha_housekeeping_interval_ms / 1000
        heartbeat_s = self.config.ha_send_heartbeat_interval_ms / 1000
        while not self._stop_event.is_set():
            try:
                size = sock.recv_into(parser.free_view())
            except TimeoutError:
                size = -1
            now = time.monotonic()
            if size == 0:
                raise ConnectionError("master closed the connection")
            if size > 0:
                self.last_read_s = now
                if self._apply(parser.received(size)):
                    self._report(sock)
            elif now - self.last_read_s > housekeeping_s:
                raise TimeoutError(f"nothing from the master for {housekeeping_s} s")
            if self.last_write_s is None or now - self.last_write_s >= heartbeat_s:
                self._report(sock)

    def _answer_challenge(self, sock: socket.socket, secret: bytes) -> None:
        sock.settimeout(self.config.ha_connect_timeout_ms / 1000)
        challenge = b""
        while len(challenge) < CHALLENGE_SIZE:
            chunk = sock.recv(CHALLENGE_SIZE - len(challenge))
            if not chunk:
                raise ConnectionError("master closed the connection during the handshake")
            challenge += chunk
        if not challenge.startswith(HANDSHAKE_MAGIC):
            raise ProtocolError("master did not open with the handshake (is ha_secret set?)")
        sock.sendall(proof(secret, challenge[len(HANDSHAKE_MAGIC):]))
        sock.settimeout(_POLL_S)

    def _apply(self, frames: list[tuple[int, memoryview]]) -> bool:
        """Append every frame at its offset; return whether anything was written."""
        wrote = False
        for offset, body in frames:
            self.master_offset_seen = max(self.master_offset_seen, offset + len(body))
            if not body:
                continue  # heartbeat
            status = self.store.append_raw(offset, body)
            if status is not AppendRawStatus.OK:
                raise ProtocolError(
                    f"master pushed offset {offset} but the slave's max offset is "
                    f"{self.store.max_offset} ({status.value})")
            self.applied_bytes_total += len(body)
            wrote = True
        return wrote

    def _report(self, sock: socket.socket) -> None:
        sock.sendall(encode_report(self.store.max_offset))
        self.last_write_s = time.monotonic()

    def view(self) -> SlaveLinkView:
        now = time.monotonic()
        local = self.store.max_offset
        return SlaveLinkView(
            master_address=self.config.ha_master_address or "",
            connected=self.connected,
            local_max_offset=local,
            master_offset_seen=self.master_offset_seen,
            diff_bytes=max(0, self.master_offset_seen - local),
            last_read_age_ms=None if self.last_read_s is None
            else int((now - self.last_read_s) * 1000),
            last_write_age_ms=None if self.last_write_s is None
            else int((now - self.last_write_s) * 1000),
            reconnect_count=self.reconnect_count,
            last_error=self.last_error,
        )
