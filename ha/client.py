"""The slave's HA client (the seed's HAClient): the IO around `SlaveCore`
(ha/classic/core/slave.py), which makes the decisions. It connects to the master, reports its
max offset, appends every frame with the store's append-at-offset and reports again. On a
mismatch, a protocol error or silence it closes and reconnects after
`ha_reconnect_interval_ms`.

The handshake (ha/auth.py) names the slave by its stable id and, with a secret, checks the
master's proof as the master checks the slave's: a slave never applies bytes from a peer that
has not proved the secret, and every frame's tag is checked before it is applied.

Last-read and last-write times are kept apart (RocketMQ bug #1082): heartbeats follow writes,
housekeeping follows reads.
"""

from __future__ import annotations

import logging
import socket
import time
from dataclasses import dataclass

from ha.auth import (
    HELLO_SIZE,
    PROOF_SIZE,
    Answer,
    FrameTagger,
    Handshake,
    Hello,
    new_nonce,
    recv_exactly,
)
from ha.classic.core.slave import ApplyOutcome, SlaveCore
from ha.config import HAConfig
from ha.epochs import (
    DECISION_SIZE,
    decode_decision,
    encode_history,
    encode_offset,
    load_history,
    read_history,
    save_history,
)
from ha.identity import load_or_create_node_id
from ha.protocol import FrameParser, ProtocolError, encode_report
from store.clock import monotonic_ms
from store.message_store import MessageStore
from store.paths import StorePaths
from store.service import ServiceThread
from store.status import AppendRawStatus, FlushDiskType

log = logging.getLogger(__name__)

_POLL_S = 0.1


class SlaveStoreError(OSError):
    """The slave's store cannot take the master's bytes now (full disk, write fault)."""


# Its fields, in their order, are also the admin API's view of it (app/api/schemas/ha.py):
# one added here is in openapi/openapi.json.
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
    master_epoch: int
    refusal: str | None
    truncated_bytes_total: int
    # Why the slave is not applying the master's bytes now (a full disk, a write fault);
    # None while it applies them.
    apply_error: str | None = None


class HAClient(ServiceThread):
    name = "ha-client"

    def __init__(self, config: HAConfig, store: MessageStore) -> None:
        super().__init__()
        assert config.ha_master_address
        self.config = config
        self.store = store
        self.core = SlaveCore(
            config, sync_flush=store.config.flush_disk_type is FlushDiskType.SYNC_FLUSH)
        self.reconnect_count = 0
        self.slave_id = load_or_create_node_id(store.config.data_dir)
        self._sock: socket.socket | None = None
        self._send_tags = FrameTagger(None)

    # -- what the core keeps, read by the views, the broker and tests ----------------------

    @property
    def connected(self) -> bool:
        return self.core.connected

    @property
    def master_offset_seen(self) -> int:
        return self.core.master_offset_seen

    @property
    def applied_bytes_total(self) -> int:
        return self.core.applied_bytes_total

    @property
    def truncated_bytes_total(self) -> int:
        return self.core.truncated_bytes_total

    @property
    def master_epoch(self) -> int:
        return self.core.master_epoch

    @property
    def refusal(self) -> str | None:
        """Why the master last refused to stream to us."""
        return self.core.refusal

    @property
    def apply_error(self) -> str | None:
        return self.core.apply_error

    # -- the connection's life -------------------------------------------------------------

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
            self.core.disconnected()
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
        parser = self._handshake(sock)
        sock.settimeout(_POLL_S)
        core = self.core
        core.linked(monotonic_ms())
        self._report(sock)
        while not self._stop_event.is_set():
            try:
                size = sock.recv_into(parser.free_view())
            except TimeoutError:
                size = -1
            now_ms = monotonic_ms()
            if size == 0:
                raise ConnectionError("master closed the connection")
            if size > 0:
                core.received(now_ms)
                if self._apply(parser.received(size)):
                    if core.flushes_before_reporting:
                        self.store.flush.flush_commit_log()
                    self._report(sock)
            elif core.silent_too_long(now_ms):
                raise TimeoutError("nothing from the master for "
                                   f"{self.config.ha_housekeeping_interval_ms / 1000} s")
            if core.report_due(now_ms):
                self._report(sock)

    def _handshake(self, sock: socket.socket) -> FrameParser:
        """Name this slave, prove the secret, check the master's proof; the parser it returns
        checks every frame's tag. An open master is refused by a slave that has a secret."""
        deadline_s = time.monotonic() + self.config.ha_handshake_timeout_ms / 1000
        secret = self.config.secret_bytes
        hello = Hello.decode(recv_exactly(sock, HELLO_SIZE, deadline_s))
        if hello.authenticated != (secret is not None):
            raise ProtocolError(
                "handshake refused: the master's link is "
                f"{'authenticated' if hello.authenticated else 'open'} and this slave's is "
                f"{'authenticated' if secret is not None else 'open'} (set the same ha_secret "
                "on both)")
        slave_nonce = new_nonce()
        handshake = Handshake(secret, hello.master_nonce, slave_nonce, self.slave_id)
        answer = Answer(self.slave_id, secret is not None, slave_nonce, handshake.slave_proof())
        sock.sendall(answer.encode())
        handshake.check_master_proof(recv_exactly(sock, PROOF_SIZE, deadline_s))
        self._send_tags = handshake.slave_to_master()
        receive_tags = handshake.master_to_slave()
        self._agree_on_epochs(sock, receive_tags, deadline_s)
        if receive_tags.tag_size == 0:
            return FrameParser()
        return FrameParser(tag_size=receive_tags.tag_size, check=receive_tags.check)

    def _agree_on_epochs(self, sock: socket.socket, receive_tags: FrameTagger,
                         deadline_s: float) -> None:
        """Send our epoch history and max offset; cut the log back to where the master says
        it agrees, durably, and only then keep the master's history as ours."""
        paths = StorePaths(self.store.config.data_dir)
        message = encode_history(load_history(paths.ha_epochs)) + encode_offset(
            self.store.max_offset)
        sock.sendall(message + self._send_tags.tag(message))

        def read(size: int) -> bytes:
            return recv_exactly(sock, size, deadline_s)

        decision_bytes = read(DECISION_SIZE)
        history_bytes, master_history = read_history(read)
        receive_tags.check(read(receive_tags.tag_size), decision_bytes, history_bytes)
        decision = decode_decision(decision_bytes)
        local_max = self.store.max_offset
        step = self.core.agreement(decision, master_history, local_max, self.store.min_offset)
        if step.refusal is not None:
            raise ProtocolError(
                f"the master refuses to stream to this slave ({step.refusal}): its log agrees "
                f"with the master's only up to {decision.agreed_offset}; reset this slave")
        if step.cut_to_offset is not None:
            log.warning("ha client: cutting the log back from %d to %d, where it agrees with "
                        "the master's epochs", local_max, step.cut_to_offset)
            self.store.truncate_log(step.cut_to_offset)
        save_history(paths.ha_epochs, step.history)

    def _apply(self, frames: list[tuple[int, memoryview]]) -> bool:
        """Append every frame at its offset; return whether anything was written."""
        wrote = False
        core = self.core
        for offset, body in frames:
            if not core.frame(offset, len(body)):
                continue  # heartbeat
            status = self.store.append_raw(offset, body)
            outcome = core.applied(status, len(body))
            if outcome is ApplyOutcome.STORE_REFUSED:
                core.store_refused(self._store_refusal(status))
                raise SlaveStoreError(f"cannot apply offset {offset}: {core.apply_error}")
            if outcome is ApplyOutcome.MISMATCH:
                raise ProtocolError(
                    f"master pushed offset {offset} but the slave's max offset is "
                    f"{self.store.max_offset} ({status.value})")
            wrote = True
        return wrote

    def _store_refusal(self, status: AppendRawStatus) -> str:
        if status is AppendRawStatus.CREATE_MAPPED_FILE_FAILED:
            return f"{status.value}: {self.store.commit_log.create_file_error}"
        fault = self.store.health.fault
        return f"{status.value}: {fault.describe() if fault is not None else ''}"

    def _report(self, sock: socket.socket) -> None:
        commit_log = self.store.commit_log
        report = encode_report(self.core.report_offset(commit_log.max_offset,
                                                       commit_log.flushed_offset))
        sock.sendall(report + self._send_tags.tag(report))
        self.core.reported(monotonic_ms())

    def view(self) -> SlaveLinkView:
        now_ms = monotonic_ms()
        core = self.core
        local = self.store.max_offset
        return SlaveLinkView(
            master_address=self.config.ha_master_address or "",
            connected=core.connected,
            local_max_offset=local,
            master_offset_seen=core.master_offset_seen,
            diff_bytes=core.diff_bytes(local),
            last_read_age_ms=None if core.last_read_ms is None else now_ms - core.last_read_ms,
            last_write_age_ms=None if core.last_write_ms is None
            else now_ms - core.last_write_ms,
            reconnect_count=self.reconnect_count,
            last_error=self.last_error,
            master_epoch=core.master_epoch,
            refusal=core.refusal,
            truncated_bytes_total=core.truncated_bytes_total,
            apply_error=core.apply_error,
        )
