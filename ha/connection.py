"""One slave's connection on the master (the seed's HAConnection): the IO around its
`SlaveLink` (ha/classic/core/link.py), which makes every decision. A reader thread runs the
handshake (ha/auth.py names the slave), the epoch exchange, then reads reports and hands each to
the link; a writer thread asks the link what to send and sends it (`os.sendfile` on an open
link, a tagged copy on an authenticated one) and the heartbeats. The service gives the
connection a slot only after the handshake and counts acks per slave id; an ack above what was
sent on this connection closes it: only bytes the slave was given can be acked."""

from __future__ import annotations

import logging
import os
import select
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ha.auth import (
    ANSWER_SIZE,
    Answer,
    FrameTagger,
    Handshake,
    Hello,
    new_nonce,
    recv_exactly,
)
from ha.classic.core.link import LinkState, SlaveLink
from ha.config import HAConfig
from ha.epochs import (
    OFFSET_SIZE,
    Decision,
    Epoch,
    decode_offset,
    encode_decision,
    encode_history,
    read_history,
)
from ha.protocol import ProtocolError, ReportParser, encode_header
from store.clock import monotonic_ms
from store.commit_log import CommitLog, TransferSource

log = logging.getLogger(__name__)

_RECV_SIZE_BYTES = 64 * 1024
_WRITER_IDLE_WAIT_S = 0.1


# The link's states, named as the admin views show them (ha/classic/core/link.py).
ConnectionState = LinkState


# Its fields, in their order, are also the admin API's view of it (app/api/schemas/ha.py):
# one added here is in openapi/openapi.json.
@dataclass(frozen=True, slots=True)
class SlaveView:
    address: str
    slave_id: str
    state: str
    ack_offset: int
    transfer_from_offset: int
    diff_bytes: int
    in_sync: bool
    transfer_bytes_per_s: float
    last_ack_age_ms: int | None
    connected_for_ms: int


class HAConnection:
    def __init__(
        self,
        sock: socket.socket,
        address: str,
        config: HAConfig,
        commit_log: CommitLog,
        on_ack: Callable[[HAConnection], None],
        on_close: Callable[[HAConnection, str], None],
        on_handshake: Callable[[HAConnection], str],
        agree: Callable[[Sequence[Epoch], int], tuple[Decision, Sequence[Epoch]]],
    ) -> None:
        self.sock = sock
        self._config = config
        self._commit_log = commit_log
        self._on_ack = on_ack
        self._on_close = on_close
        self._on_handshake = on_handshake
        self._agree = agree
        self.link = SlaveLink(address, monotonic_ms())
        self._send_tags = FrameTagger(None)
        self._wakeup = threading.Event()
        self._closed = threading.Event()
        self._close_lock = threading.Lock()
        self._rate = _RateMeter()
        self._threads: list[threading.Thread] = []
        # A seam for tests: runs in the writer between taking a transfer source and sending
        # it, where a blocked sendfile would let retention run.
        self.before_send: Callable[[TransferSource], None] = _no_step

    # -- the link's state, read by the service, the views and tests ------------------------

    @property
    def address(self) -> str:
        return self.link.address

    @property
    def state(self) -> LinkState:
        return self.link.state

    @property
    def slave_id(self) -> str:
        return self.link.slave_id

    @property
    def agreed_offset(self) -> int:
        return self.link.agreed_offset

    @property
    def request_offset(self) -> int:
        return self.link.request_offset

    @property
    def ack_offset(self) -> int:
        return self.link.ack_offset

    @property
    def transfer_from_offset(self) -> int:
        return self.link.transfer_from_offset

    @property
    def sent_end_offset(self) -> int:
        return self.link.sent_end_offset

    @property
    def bytes_sent_total(self) -> int:
        return self.link.bytes_sent_total

    @property
    def last_ack_ms(self) -> int | None:
        return self.link.last_ack_ms

    @property
    def close_reason(self) -> str:
        return self.link.close_reason

    @property
    def ack_beyond_max(self) -> bool:
        return self.link.ack_beyond_max

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.settimeout(self._config.ha_housekeeping_interval_ms / 1000)
        self._threads = [
            # Not a ServiceThread: blocked in recv on its socket, ended by closing it; no rounds.
            threading.Thread(target=self._read_loop, name=f"ha-read-{self.address}", daemon=True),
            # Not a ServiceThread: a send error closes the connection from this thread (stop joins).
            threading.Thread(target=self._write_loop, name=f"ha-write-{self.address}",
                             daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def close(self, reason: str, state: LinkState = LinkState.CLOSED) -> None:
        with self._close_lock:  # the reader and the writer may both fail at once
            if not self.link.close(reason, state):
                return
        self._closed.set()
        self._wakeup.set()
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        log.info("ha: connection %s closed: %s", self.address, reason)
        self._on_close(self, reason)

    def join(self, timeout_s: float = 5.0) -> None:
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(timeout_s)

    @property
    def is_open(self) -> bool:
        return self.link.is_open

    def wake(self) -> None:
        if not self._wakeup.is_set():
            self._wakeup.set()

    def view(self, master_max_offset: int, fall_behind_bytes_max: int) -> SlaveView:
        now = monotonic_ms()
        link = self.link
        return SlaveView(
            address=link.address,
            slave_id=link.slave_id,
            state=link.state.value,
            ack_offset=link.ack_offset,
            transfer_from_offset=link.transfer_from_offset,
            diff_bytes=link.diff_bytes(master_max_offset),
            in_sync=link.is_eligible(master_max_offset, fall_behind_bytes_max),
            transfer_bytes_per_s=self._rate.per_second(),
            last_ack_age_ms=None if link.last_ack_ms is None else now - link.last_ack_ms,
            connected_for_ms=now - link.connected_ms,
        )

    def is_eligible(self, master_max_offset: int, fall_behind_bytes_max: int) -> bool:
        """Connected, transferring and less than the allowed bytes behind the master."""
        return self.link.is_eligible(master_max_offset, fall_behind_bytes_max)

    # -- reader ----------------------------------------------------------------------------

    def _read_loop(self) -> None:
        reason = "reader stopped"
        try:
            parser = self._handshake()
            if not self.is_open:
                return
            self.sock.settimeout(self._config.ha_housekeeping_interval_ms / 1000)
            while self.is_open:
                data = self.sock.recv(_RECV_SIZE_BYTES)
                if not data:
                    reason = "slave closed the connection"
                    break
                offset = parser.feed(data)
                if offset is not None:
                    reason = self._on_report(offset)
                    if reason:
                        break
        except TimeoutError:
            reason = (f"no report for {self._config.ha_housekeeping_interval_ms} ms "
                      "(housekeeping)")
        except ProtocolError as error:
            reason = f"protocol error: {error}"
        except OSError as error:
            reason = f"socket error: {error}"
        self.close(reason)

    def _handshake(self) -> ReportParser:
        """Check the slave (its proof first), prove the master, then ask the service for a
        slot. The whole exchange has one deadline, so a silent or trickling peer is dropped."""
        deadline_s = time.monotonic() + self._config.ha_handshake_timeout_ms / 1000
        secret = self._config.secret_bytes
        hello = Hello(secret is not None, new_nonce())
        self.sock.sendall(hello.encode())
        answer = Answer.decode(recv_exactly(self.sock, ANSWER_SIZE, deadline_s))
        if answer.authenticated != hello.authenticated:
            raise ProtocolError("handshake failed: the master's link is "
                                f"{'authenticated' if hello.authenticated else 'open'} and the "
                                f"slave's is {'authenticated' if answer.authenticated else 'open'}"
                                " (set the same ha_secret on both)")
        handshake = Handshake(secret, hello.master_nonce, answer.slave_nonce, answer.slave_id)
        handshake.check_slave_proof(answer.proof)
        self.sock.sendall(handshake.master_proof())
        self.link.identified(answer.slave_id.hex())
        self._send_tags = handshake.master_to_slave()
        receive_tags = handshake.slave_to_master()
        # The service moves an accepted connection out of HANDSHAKE under its lock (that is
        # taking the slot); a refused one stays there until it is closed, holding no slot.
        refusal = self._on_handshake(self)
        if not refusal:
            self.link.slotted()
            refusal = self._agree_on_epochs(receive_tags, deadline_s)
        if refusal:
            self.close(refusal)
        if receive_tags.tag_size == 0:
            return ReportParser()
        return ReportParser(receive_tags.tag_size, receive_tags.check)

    def _agree_on_epochs(self, receive_tags: FrameTagger, deadline_s: float) -> str:
        """Take the slave's epoch history and max offset; answer where its log agrees with
        ours (it cuts back to there before anything is streamed) and our history; return a
        reason to close when it cannot be streamed at all."""
        def read(size: int) -> bytes:
            return recv_exactly(self.sock, size, deadline_s)

        history_bytes, slave_history = read_history(read)
        max_bytes = read(OFFSET_SIZE)
        receive_tags.check(read(receive_tags.tag_size), history_bytes, max_bytes)
        slave_max = decode_offset(max_bytes)
        decision, master_history = self._agree(slave_history, slave_max)
        message = encode_decision(decision) + encode_history(master_history)
        self.sock.sendall(message + self._send_tags.tag(message))
        return self.link.agreed(decision, slave_max)

    def _on_report(self, offset: int) -> str:
        """Hand a report to the link; return a reason to close, or "" to go on."""
        commit_log = self._commit_log
        outcome = self.link.report(offset, commit_log.max_offset, commit_log.min_offset,
                                   monotonic_ms())
        if outcome.close_reason:
            return outcome.close_reason
        if outcome.started:
            log.info("ha: slave %s reports %d, streaming from %d", self.address, offset,
                     self.link.transfer_from_offset)
        self._on_ack(self)
        if outcome.started:
            self.wake()
        return ""

    # -- writer ----------------------------------------------------------------------------

    def _write_loop(self) -> None:
        heartbeat_ms = self._config.ha_send_heartbeat_interval_ms
        idle_wait_s = min(_WRITER_IDLE_WAIT_S, heartbeat_ms / 1000)
        link = self.link
        try:
            while self.is_open:
                if link.state is not LinkState.TRANSFERRING:
                    self._wakeup.wait(_WRITER_IDLE_WAIT_S)
                    self._wakeup.clear()
                    continue
                self._wakeup.clear()
                if self._transfer_some():
                    continue
                if link.heartbeat_due(monotonic_ms(), heartbeat_ms):
                    header = encode_header(link.transfer_from_offset, 0)
                    self.sock.sendall(header + self._send_tags.tag(header))
                    link.heartbeat_sent(monotonic_ms())
                self._wakeup.wait(idle_wait_s)
        except OSError as error:
            self.close(f"send failed: {error}")

    def _transfer_some(self) -> bool:
        """Send one batch (never across two files); False when there is nothing to send."""
        link = self.link
        if link.bytes_to_send(self._commit_log.max_offset) == 0:
            return False
        start = link.transfer_from_offset
        source = self._commit_log.transfer_source(start, self._config.ha_transfer_batch_size_bytes)
        if source is None:
            self.close(link.source_gone(start))
            return False
        with source:  # held: retention cannot close the fd (and free its number) under us
            size = source.size_bytes
            if size == 0:
                return False
            self.before_send(source)
            link.sending(start, size)
            header = encode_header(start, size)
            if self._send_tags.tag_size:
                # A tag covers the bytes it is sent with, so they are read once, then sent.
                body = os.pread(source.fd, size, source.file_position)
                assert len(body) == size
                self.sock.sendall(header + body + self._send_tags.tag(header, body))
            else:
                self.sock.sendall(header)
                _sendfile_all(self.sock, source.fd, source.file_position, size,
                              self._config.ha_housekeeping_interval_ms / 1000)
        link.sent(start, size, monotonic_ms())
        self._rate.add(size)
        return True


def _sendfile_all(sock: socket.socket, fd: int, position: int, size_bytes: int,
                  timeout_s: float) -> None:
    """os.sendfile until done; the socket is non-blocking underneath (it has a timeout), so
    wait for room with select, and give up after `timeout_s` without progress."""
    sent = 0
    while sent < size_bytes:
        try:
            sent += os.sendfile(sock.fileno(), fd, position + sent, size_bytes - sent)
        except BlockingIOError:
            _, writable, _ = select.select([], [sock], [], timeout_s)
            if not writable:
                raise TimeoutError(f"slave took no bytes for {timeout_s} s") from None


def _no_step(source: TransferSource) -> None:
    pass


class _RateMeter:
    """Bytes per second over the last completed one-second window."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock  # a seam: tests step a fake clock across window edges
        self._window_start_s = clock()
        self._window_bytes = 0
        self._last_rate = 0.0

    def add(self, size_bytes: int) -> None:
        now = self._clock()
        if now - self._window_start_s >= 1.0:
            self._last_rate = self._window_bytes / (now - self._window_start_s)
            self._window_start_s = now
            self._window_bytes = 0
        self._window_bytes += size_bytes

    def per_second(self) -> float:
        if self._clock() - self._window_start_s >= 2.0:
            return 0.0
        return self._last_rate
