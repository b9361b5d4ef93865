"""One slave's connection on the master: a reader thread (handshake, then reports/acks) and a
writer thread (transfers and heartbeats). The handshake (ha/auth.py) names the slave; the
service gives the connection a slot only after it, and counts acks per slave id. An ack above
what was sent on this connection closes it: only bytes the slave was given can be acked."""

from __future__ import annotations

import enum
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
from ha.config import HAConfig
from ha.epochs import (
    OFFSET_SIZE,
    Agreement,
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


class ConnectionState(enum.Enum):
    HANDSHAKE = "handshake"
    WAITING_REPORT = "waiting_report"
    TRANSFERRING = "transferring"
    NEEDS_RESET = "needs_reset"  # the slave wants an offset the master no longer holds
    AHEAD_OF_MASTER = "ahead_of_master"  # the slave reports more than it agreed to keep
    DIVERGED = "diverged"  # no epoch in common: the slave's bytes are not this master's
    CLOSED = "closed"


_REFUSED_STATES = (ConnectionState.NEEDS_RESET, ConnectionState.AHEAD_OF_MASTER,
                   ConnectionState.DIVERGED)


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
        self.address = address
        self._config = config
        self._commit_log = commit_log
        self._on_ack = on_ack
        self._on_close = on_close
        self._on_handshake = on_handshake
        self._agree = agree
        self.agreed_offset = -1  # where the slave's log agrees with ours (epoch exchange)
        self.state = ConnectionState.HANDSHAKE
        self.slave_id = ""  # hex, known once the handshake is done
        self._send_tags = FrameTagger(None)
        self.ack_offset = -1
        self.request_offset = -1
        self.transfer_from_offset = -1
        # One past the last byte handed to the socket; an ack above it was never sent here.
        self.sent_end_offset = -1
        self.bytes_sent_total = 0
        self.last_ack_ms: int | None = None
        self.connected_ms = monotonic_ms()
        self.close_reason = ""
        self.ack_beyond_max = False
        self._wakeup = threading.Event()
        self._closed = threading.Event()
        self._rate = _RateMeter()
        self._threads: list[threading.Thread] = []
        # A seam for tests: runs in the writer between taking a transfer source and sending
        # it, where a blocked sendfile would let retention run.
        self.before_send: Callable[[TransferSource], None] = _no_step

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

    def close(self, reason: str, state: ConnectionState = ConnectionState.CLOSED) -> None:
        if self._closed.is_set():
            return
        self._closed.set()
        self.close_reason = reason
        if state is not ConnectionState.CLOSED or self.state not in _REFUSED_STATES:
            self.state = state
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
        return not self._closed.is_set()

    def wake(self) -> None:
        if not self._wakeup.is_set():
            self._wakeup.set()

    def view(self, master_max_offset: int, fall_behind_bytes_max: int) -> SlaveView:
        now = monotonic_ms()
        diff = master_max_offset - self.ack_offset if self.ack_offset >= 0 else master_max_offset
        return SlaveView(
            address=self.address,
            slave_id=self.slave_id,
            state=self.state.value,
            ack_offset=self.ack_offset,
            transfer_from_offset=self.transfer_from_offset,
            diff_bytes=max(0, diff),
            in_sync=self.is_eligible(master_max_offset, fall_behind_bytes_max),
            transfer_bytes_per_s=self._rate.per_second(),
            last_ack_age_ms=None if self.last_ack_ms is None else now - self.last_ack_ms,
            connected_for_ms=now - self.connected_ms,
        )

    def is_eligible(self, master_max_offset: int, fall_behind_bytes_max: int) -> bool:
        """Connected, transferring and less than the allowed bytes behind the master."""
        return (
            self.is_open
            and self.state is ConnectionState.TRANSFERRING
            and self.ack_offset >= 0
            and master_max_offset - self.ack_offset < fall_behind_bytes_max
        )

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
        self.slave_id = answer.slave_id.hex()
        self._send_tags = handshake.master_to_slave()
        receive_tags = handshake.slave_to_master()
        # The service moves an accepted connection out of HANDSHAKE under its lock (that is
        # taking the slot); a refused one stays there until it is closed, holding no slot.
        refusal = self._on_handshake(self)
        if not refusal:
            if self.state is ConnectionState.HANDSHAKE:
                self.state = ConnectionState.WAITING_REPORT
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
        self.agreed_offset = decision.agreed_offset
        if decision.agreement is Agreement.AGREED:
            return ""
        self.request_offset = slave_max
        if decision.agreement is Agreement.NEEDS_RESET:
            self.state = ConnectionState.NEEDS_RESET
            return (f"slave at {slave_max} agrees with the master only up to "
                    f"{decision.agreed_offset}, which the master no longer holds; "
                    "it needs a reset")
        self.state = ConnectionState.DIVERGED
        return (f"slave at {slave_max} shares no epoch with the master: its log is not this "
                "master's history (a foreign or reset master); it needs a reset")

    def _on_report(self, offset: int) -> str:
        """Apply a report; return a reason to close, or "" to go on."""
        master_max = self._commit_log.max_offset
        if self.request_offset < 0:
            return self._first_report(offset, master_max)
        if offset > master_max:
            self.ack_beyond_max = True
            return f"ack {offset} is beyond the master's max offset {master_max}"
        if offset > self.sent_end_offset:
            self.ack_beyond_max = True
            return (f"ack {offset} is beyond what this connection was sent "
                    f"({self.sent_end_offset})")
        if offset >= self.ack_offset:
            self.ack_offset = offset
        self.last_ack_ms = monotonic_ms()
        self._on_ack(self)
        return ""

    def _first_report(self, offset: int, master_max: int) -> str:
        """Where the stream starts: an empty slave gets the whole retained history."""
        master_min = self._commit_log.min_offset
        self.request_offset = offset
        if offset > self.agreed_offset:
            self.state = ConnectionState.AHEAD_OF_MASTER
            return (f"slave at {offset} is ahead of the offset {self.agreed_offset} where its "
                    "log agrees with the master's (it did not cut back)")
        if offset == 0:
            start = master_min
        elif offset < master_min:
            self.state = ConnectionState.NEEDS_RESET
            return (f"slave at {offset} wants data the master no longer holds "
                    f"(min offset {master_min}); it needs a reset")
        else:
            start = offset
        self.ack_offset = offset
        self.last_ack_ms = monotonic_ms()
        self.transfer_from_offset = start
        self.sent_end_offset = start
        self.state = ConnectionState.TRANSFERRING
        log.info("ha: slave %s reports %d, streaming from %d", self.address, offset, start)
        self._on_ack(self)
        self.wake()
        return ""

    # -- writer ----------------------------------------------------------------------------

    def _write_loop(self) -> None:
        heartbeat_s = self._config.ha_send_heartbeat_interval_ms / 1000
        last_write_s = time.monotonic()
        try:
            while self.is_open:
                if self.state is not ConnectionState.TRANSFERRING:
                    self._wakeup.wait(_WRITER_IDLE_WAIT_S)
                    self._wakeup.clear()
                    continue
                self._wakeup.clear()
                if self._transfer_some():
                    last_write_s = time.monotonic()
                    continue
                if time.monotonic() - last_write_s >= heartbeat_s:
                    header = encode_header(self.transfer_from_offset, 0)
                    self.sock.sendall(header + self._send_tags.tag(header))
                    last_write_s = time.monotonic()
                self._wakeup.wait(min(_WRITER_IDLE_WAIT_S, heartbeat_s))
        except OSError as error:
            self.close(f"send failed: {error}")

    def _transfer_some(self) -> bool:
        """Send one batch (never across two files); False when there is nothing to send."""
        start = self.transfer_from_offset
        if start >= self._commit_log.max_offset:
            return False
        source = self._commit_log.transfer_source(start, self._config.ha_transfer_batch_size_bytes)
        if source is None:
            self.close(f"offset {start} is no longer held by the master",
                       ConnectionState.NEEDS_RESET)
            return False
        with source:  # held: retention cannot close the fd (and free its number) under us
            if source.size_bytes == 0:
                return False
            self.before_send(source)
            header = encode_header(start, source.size_bytes)
            self.sent_end_offset = start + source.size_bytes
            if self._send_tags.tag_size:
                # A tag covers the bytes it is sent with, so they are read once, then sent.
                body = os.pread(source.fd, source.size_bytes, source.file_position)
                assert len(body) == source.size_bytes
                self.sock.sendall(header + body + self._send_tags.tag(header, body))
            else:
                self.sock.sendall(header)
                _sendfile_all(self.sock, source.fd, source.file_position, source.size_bytes,
                              self._config.ha_housekeeping_interval_ms / 1000)
        self.transfer_from_offset = start + source.size_bytes
        self.bytes_sent_total += source.size_bytes
        self._rate.add(source.size_bytes)
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
