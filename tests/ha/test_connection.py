"""One slave's connection on the master, driven directly: a real store, a real socket pair on
127.0.0.1 and a scripted slave, so each answer of the connection is seen on its own."""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from ha import ConnectionState, HAConfig
from ha.connection import HAConnection, _RateMeter
from ha.epochs import NODE_ID_SIZE, Agreement, Epoch, decide
from ha.protocol import ProtocolError
from store import BrokerRole, Message, MessageStore
from store.commit_log import TransferSource
from store.retention import RetentionService
from tests.support.ha_peer import ScriptedSlave
from tests.support.store import small_config, wait_dispatched, wait_until

ROOT = Path(__file__).resolve().parents[2]
SECRET = "connection-test-secret"
CONFIG: dict[str, Any] = {
    "broker_role": BrokerRole.ASYNC_MASTER,
    "ha_secret": SECRET,
    "ha_send_heartbeat_interval_ms": 100,
    "ha_housekeeping_interval_ms": 5000,
    "ha_transfer_batch_size_bytes": 4096,
}
# The master's epoch history: one epoch, from offset 0, led by this master.
MASTER_EPOCHS = [Epoch(1, 0, b"m" * NODE_ID_SIZE)]


@dataclass
class Link:
    connection: HAConnection
    slave: ScriptedSlave
    acks: list[int] = field(default_factory=list)  # the ack offset at each on_ack
    closes: list[str] = field(default_factory=list)  # the reason of each on_close


OpenLink = Callable[..., Link]


@pytest.fixture
def store(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[MessageStore]:
    """The master's store; a test can override its config (indirect parametrize)."""
    overrides: dict[str, Any] = getattr(request, "param", {})
    store = MessageStore(small_config(tmp_path / "master", **overrides))
    store.start()
    yield store
    store.shutdown()


@pytest.fixture
def open_link(store: MessageStore) -> Iterator[OpenLink]:
    """Connect a scripted slave to an HAConnection on an accepted socket; all closed at the end."""
    listener = socket.create_server(("127.0.0.1", 0))
    links: list[Link] = []

    def agree(history: Sequence[Epoch], slave_max: int) -> tuple[Any, Sequence[Epoch]]:
        return decide(MASTER_EPOCHS, store.max_offset, store.min_offset, history,
                      slave_max), MASTER_EPOCHS

    def open_link(refusal: str = "", slave_secret: str | None = SECRET,
                  handshake: bool = True, slave_max: int = 0,
                  slave_epochs: Sequence[Epoch] = (), **overrides: Any) -> Link:
        slave = ScriptedSlave(listener.getsockname()[1], slave_secret, epochs=slave_epochs,
                              max_offset=slave_max)
        sock, _ = listener.accept()
        link = Link(connection=None, slave=slave)  # type: ignore[arg-type]
        link.connection = HAConnection(
            sock, "slave-1", HAConfig(**{**CONFIG, **overrides}), store.commit_log,
            on_ack=lambda connection: link.acks.append(connection.ack_offset),
            on_close=lambda _, reason: link.closes.append(reason),
            on_handshake=lambda _: refusal,
            agree=agree,
        )
        links.append(link)
        link.connection.start()
        if handshake:
            slave.handshake()
        return link

    yield open_link
    for link in links:
        link.connection.close("test over")
        link.connection.join()
        link.slave.close()
    listener.close()


def _produce(store: MessageStore, count: int, size: int = 500) -> None:
    for index in range(count):
        store.put_message(Message("A", bytes([index % 256]) * size))


def _log_bytes(store: MessageStore, start: int, end: int) -> bytes:
    """The commit log's bytes [start, end), read file by file."""
    read = bytearray()
    while start + len(read) < end:
        piece = store.commit_log.read_bytes(start + len(read), end)
        assert piece, f"nothing to read at {start + len(read)}"
        read += piece
    return bytes(read)


def _closed(link: Link) -> None:
    wait_until(lambda: not link.connection.is_open and len(link.closes) == 1)


def test_empty_slave_gets_the_whole_log(store: MessageStore, open_link: OpenLink) -> None:
    """A slave reporting 0 is streamed every byte from the master's min offset, in batches,
    and its report counts as its first ack."""
    _produce(store, 40)
    end = store.max_offset
    link = open_link()
    connection = link.connection
    assert connection.state is ConnectionState.WAITING_REPORT
    assert connection.slave_id == link.slave.slave_id.hex()
    link.slave.report(0)
    assert link.slave.receive_until(end) == store.commit_log.read_bytes(0, end)
    assert connection.state is ConnectionState.TRANSFERRING
    assert (connection.request_offset, connection.ack_offset, link.acks) == (0, 0, [0])
    # The counters move just after the bytes are handed to the socket: wait for them.
    wait_until(lambda: connection.bytes_sent_total == end)
    assert connection.transfer_from_offset == end and connection.sent_end_offset == end


def test_a_batch_down_to_one_byte_is_sent(store: MessageStore, open_link: OpenLink) -> None:
    """A batch is whatever is left below the write position, down to a single byte: a log
    ending one byte past a batch boundary is streamed to its end."""
    store.put_message(Message("A", b"x" * 4005))  # one record of 4097 bytes
    assert store.max_offset == CONFIG["ha_transfer_batch_size_bytes"] + 1
    link = open_link()
    link.slave.report(0)
    assert link.slave.receive_until(4097) == store.commit_log.read_bytes(0, 4097)


def test_slave_with_data_is_streamed_from_its_offset(
        store: MessageStore, open_link: OpenLink) -> None:
    """A slave whose log agrees up to an offset inside the master's is told so in the
    handshake, and reporting it gets the bytes from there on, nothing before."""
    _produce(store, 10)
    middle = store.max_offset
    _produce(store, 10)
    link = open_link(slave_max=middle, slave_epochs=MASTER_EPOCHS)
    assert link.slave.decision is not None
    assert (link.slave.decision.agreement, link.slave.decision.agreed_offset) == (
        Agreement.AGREED, middle)
    wait_until(lambda: link.connection.agreed_offset == middle)  # set just after it is sent
    link.slave.report(middle)
    assert link.slave.receive_until(store.max_offset) == store.commit_log.read_bytes(
        middle, store.max_offset)
    wait_until(lambda: link.connection.bytes_sent_total == store.max_offset - middle)
    assert link.connection.ack_offset == middle


def test_acks_only_move_forward_and_each_is_passed_on(
        store: MessageStore, open_link: OpenLink) -> None:
    """Each report after the first is an ack handed to the service; an older ack does not move
    the connection's ack offset back."""
    _produce(store, 10)
    end = store.max_offset
    link = open_link()
    link.slave.report(0)
    link.slave.receive_until(end)
    link.slave.report(end)
    wait_until(lambda: link.acks == [0, end])
    link.slave.report(100)
    wait_until(lambda: len(link.acks) == 3)
    assert link.acks == [0, end, end] and link.connection.ack_offset == end
    assert link.connection.last_ack_ms is not None and link.connection.is_open


def test_ack_beyond_the_masters_max_closes(store: MessageStore, open_link: OpenLink) -> None:
    """An ack above the master's max offset closes the connection and is flagged."""
    _produce(store, 5)
    link = open_link()
    link.slave.report(0)
    link.slave.receive_until(store.max_offset)
    link.slave.report(store.max_offset + 1)
    _closed(link)
    assert link.connection.ack_beyond_max and "beyond the master's max" in link.closes[0]
    assert link.acks == [0]


def test_ack_beyond_what_was_sent_closes(store: MessageStore, open_link: OpenLink) -> None:
    """An ack within the log but above the bytes this connection sent closes it: a slave can
    only ack what it was given."""
    _produce(store, 20)
    link = open_link()
    release = threading.Event()

    def hold(_: TransferSource) -> None:
        release.wait(10)

    link.connection.before_send = hold
    link.slave.report(0)
    wait_until(lambda: link.connection.state is ConnectionState.TRANSFERRING)
    link.slave.report(100)
    _closed(link)
    release.set()
    assert link.connection.ack_beyond_max and "beyond what this connection was sent" in (
        link.closes[0])
    assert link.acks == [0]


@pytest.mark.parametrize("beyond_bytes", [1, 1000])
def test_slave_reporting_past_the_agreed_offset_is_named_and_closed(
        store: MessageStore, open_link: OpenLink, beyond_bytes: int) -> None:
    """A first report above the offset agreed in the handshake (the slave did not cut back)
    closes the link as ahead_of_master (the state survives the close); nothing is streamed."""
    _produce(store, 10)
    middle = store.max_offset
    _produce(store, 3)
    link = open_link(slave_max=middle, slave_epochs=MASTER_EPOCHS)
    link.slave.report(middle + beyond_bytes)
    _closed(link)
    assert link.connection.state is ConnectionState.AHEAD_OF_MASTER
    assert "ahead of the offset" in link.closes[0]
    assert link.acks == [] and link.connection.bytes_sent_total == 0
    assert link.connection.request_offset == middle + beyond_bytes


def test_slave_of_a_foreign_history_is_named_diverged(
        store: MessageStore, open_link: OpenLink) -> None:
    """A slave with bytes but no epoch in common with the master is closed in the handshake
    as diverged: nothing of its log can be trusted to continue."""
    _produce(store, 3)
    foreign = [Epoch(1, 0, b"f" * NODE_ID_SIZE)]
    link = open_link(slave_max=100, slave_epochs=foreign)
    _closed(link)
    assert link.slave.decision is not None
    assert link.slave.decision.agreement is Agreement.DIVERGED
    assert link.connection.state is ConnectionState.DIVERGED
    assert "shares no epoch" in link.closes[0] and link.connection.request_offset == 100


def test_slave_behind_retention_needs_a_reset(store: MessageStore, open_link: OpenLink) -> None:
    """A slave agreeing only below the retained log is closed in the handshake as needs_reset,
    and so is a first report below it; a first report exactly at the min offset is streamed
    from there, and a report of 0 gets the retained history from the min offset."""
    _produce(store, 300)
    wait_dispatched(store)
    RetentionService(store.config, store.commit_log, store.queues, store.dispatch,
                     used_ratio=lambda _: 1.0).delete_expired()
    minimum = store.min_offset
    assert minimum > 100
    agreed_below = open_link(slave_max=100, slave_epochs=MASTER_EPOCHS)
    _closed(agreed_below)
    assert agreed_below.connection.state is ConnectionState.NEEDS_RESET
    assert "no longer holds; it needs a reset" in agreed_below.closes[0]
    behind = open_link(slave_max=store.max_offset, slave_epochs=MASTER_EPOCHS)
    behind.slave.report(100)
    _closed(behind)
    assert behind.connection.state is ConnectionState.NEEDS_RESET
    assert "wants data the master no longer holds" in behind.closes[0]
    at_minimum = open_link(slave_max=store.max_offset, slave_epochs=MASTER_EPOCHS)
    at_minimum.slave.report(minimum)
    assert at_minimum.slave.receive_until(store.max_offset) == store.commit_log.read_bytes(
        minimum, store.max_offset)
    assert at_minimum.connection.state is ConnectionState.TRANSFERRING
    empty = open_link()
    empty.slave.report(0)
    assert empty.slave.receive_until(store.max_offset) == store.commit_log.read_bytes(
        minimum, store.max_offset)
    assert empty.connection.ack_offset == 0


def test_idle_link_gets_heartbeats_at_the_transfer_offset(
        store: MessageStore, open_link: OpenLink) -> None:
    """Once caught up, the master sends empty frames at the offset it would send next."""
    _produce(store, 3)
    end = store.max_offset
    link = open_link()
    link.slave.report(0)
    link.slave.receive_until(end)
    frames: list[tuple[int, bytes]] = []
    while len(frames) < 2:
        size = link.slave.sock.recv_into(link.slave.parser.free_view())
        assert size > 0
        frames += [(offset, bytes(body)) for offset, body in link.slave.parser.received(size)]
    assert frames[:2] == [(end, b""), (end, b"")]


def test_idle_link_heartbeats_at_the_interval_not_faster(
        store: MessageStore, open_link: OpenLink) -> None:
    """Once caught up, heartbeats come once per ha_send_heartbeat_interval_ms, not at every
    turn of the writer's shorter idle poll (0.1 s)."""
    _produce(store, 3)
    end = store.max_offset
    link = open_link(ha_send_heartbeat_interval_ms=1000)
    link.slave.report(0)
    link.slave.receive_until(end)
    frames = 0
    window_end_s = time.monotonic() + 1.5
    while (remaining_s := window_end_s - time.monotonic()) > 0:
        link.slave.sock.settimeout(remaining_s)
        try:
            size = link.slave.sock.recv_into(link.slave.parser.free_view())
        except TimeoutError:
            break
        assert size > 0
        frames += sum(1 for _ in link.slave.parser.received(size))
    # At most two heartbeats fall in 1.5 s at 1 s apart, and one could have been sent just
    # before the window; the idle poll would send about fifteen.
    assert frames <= 3


def test_empty_master_heartbeats_a_slave_at_zero(
        store: MessageStore, open_link: OpenLink) -> None:
    """A master with nothing stored yet still sends heartbeats, at offset 0, to a slave that
    reported 0: the link is kept alive before the first message."""
    assert store.max_offset == 0
    link = open_link()
    link.slave.report(0)
    frames: list[tuple[int, bytes]] = []
    while len(frames) < 2:
        size = link.slave.sock.recv_into(link.slave.parser.free_view())
        assert size > 0
        frames += [(offset, bytes(body)) for offset, body in link.slave.parser.received(size)]
    assert frames[:2] == [(0, b""), (0, b"")]


def test_refused_handshake_closes_with_the_services_reason(open_link: OpenLink) -> None:
    """When the service refuses the slave a slot, the connection closes with that reason
    before any epoch is exchanged."""
    link = open_link(refusal="no free slot", handshake=False)
    with pytest.raises(ProtocolError):
        link.slave.handshake()
    _closed(link)
    assert link.closes == ["no free slot"]
    assert link.slave.decision is None and link.connection.agreed_offset == -1


def test_slave_without_the_secret_is_closed_in_the_handshake(open_link: OpenLink) -> None:
    """An open-link slave meeting an authenticated master is closed with a protocol error."""
    link = open_link(slave_secret=None, handshake=False)
    with pytest.raises((ProtocolError, ConnectionError)):
        link.slave.handshake()
    _closed(link)
    assert link.closes[0].startswith("protocol error: handshake failed")
    assert link.connection.slave_id == ""


def test_slave_closing_is_seen_once(open_link: OpenLink) -> None:
    """A slave that hangs up closes the connection once, with that reason, and is not flagged
    as having acked beyond what it was sent; closing it again calls nobody."""
    link = open_link()
    link.slave.close()
    _closed(link)
    link.connection.close("again")
    assert link.closes == ["slave closed the connection"]
    assert not link.connection.ack_beyond_max
    assert link.connection.state is ConnectionState.CLOSED


def test_silent_slave_is_dropped_at_the_housekeeping_interval(open_link: OpenLink) -> None:
    """A slave that sends no report within the housekeeping interval is closed."""
    link = open_link(ha_send_heartbeat_interval_ms=50, ha_housekeeping_interval_ms=300)
    _closed(link)
    assert link.closes == ["no report for 300 ms (housekeeping)"]


def test_join_waits_for_the_connections_threads(
        store: MessageStore, open_link: OpenLink) -> None:
    """join waits, up to its timeout, for a thread of the connection still busy after close,
    and once both threads have ended none of them is left (the service's stop relies on it)."""
    _produce(store, 5)
    before = set(threading.enumerate())
    link = open_link()
    sending = threading.Event()
    release = threading.Event()

    def hold(_: TransferSource) -> None:
        sending.set()
        release.wait(10)

    link.connection.before_send = hold
    link.slave.report(0)
    assert sending.wait(10)
    link.connection.close("test over")
    started_s = time.monotonic()
    link.connection.join(timeout_s=0.3)
    assert time.monotonic() - started_s >= 0.25  # the writer is still held in its send
    release.set()
    link.connection.join()
    assert set(threading.enumerate()) - before == set()


def test_writer_is_woken_by_the_first_report_and_by_wake(
        store: MessageStore, open_link: OpenLink, monkeypatch: pytest.MonkeyPatch) -> None:
    """The writer does not wait out its idle poll: the first report, and wake() (which the
    service calls on every append), make it send at once, and it sends batch after batch
    until it is caught up."""
    # With the poll and the heartbeat a minute long, only a wake-up can start a send.
    monkeypatch.setattr("ha.connection._WRITER_IDLE_WAIT_S", 60.0)
    _produce(store, 20)
    first_end = store.max_offset
    assert first_end > 2 * CONFIG["ha_transfer_batch_size_bytes"]
    link = open_link(ha_send_heartbeat_interval_ms=60_000, ha_housekeeping_interval_ms=120_000)
    link.slave.report(0)
    assert link.slave.receive_until(first_end) == store.commit_log.read_bytes(0, first_end)
    wait_until(lambda: link.connection.transfer_from_offset == first_end)
    _produce(store, 2)
    link.connection.wake()
    assert link.slave.receive_until(store.max_offset) == store.commit_log.read_bytes(
        first_end, store.max_offset)


def test_slave_silent_in_the_handshake_is_dropped_at_its_deadline(open_link: OpenLink) -> None:
    """A peer that connects and never answers the hello is closed when the handshake's own
    deadline passes, long before the housekeeping interval: it never holds a handshake place."""
    link = open_link(handshake=False, ha_handshake_timeout_ms=300)
    _closed(link)
    assert link.closes[0].startswith("protocol error: handshake not finished in time")


def test_reset_link_is_closed_as_a_socket_error(open_link: OpenLink) -> None:
    """A slave whose link is reset (not closed in order) is closed with a reason naming the
    socket error, told apart from a slave that hung up and from a protocol error."""
    link = open_link()
    # SO_LINGER with a zero timeout: close sends a reset instead of a FIN.
    link.slave.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    link.slave.close()
    _closed(link)
    assert link.closes[0].startswith("socket error: ")


def test_view_and_eligibility(store: MessageStore, open_link: OpenLink) -> None:
    """A slave is in sync only while transferring and less than the allowed bytes behind; its
    view reports the bytes it lags (the whole log before its first report), -1 (none yet) as
    its ack and transfer offsets until it reports, and the age of its last ack."""
    _produce(store, 5)
    end = store.max_offset
    link = open_link()
    connection = link.connection
    before = connection.view(end, 10)
    assert (before.diff_bytes, before.in_sync, before.last_ack_age_ms) == (end, False, None)
    assert (before.ack_offset, before.transfer_from_offset) == (-1, -1)
    assert (before.state, before.slave_id, before.address) == (
        "waiting_report", link.slave.slave_id.hex(), "slave-1")
    link.slave.report(0)
    link.slave.receive_until(end)
    # An empty slave's first report is an ack at 0: it counts, end bytes behind, and its age
    # shows.
    assert connection.is_eligible(end, end + 1) and not connection.is_eligible(end, end)
    assert connection.view(end, end + 1).last_ack_age_ms is not None
    reported_ms = time.monotonic_ns() // 1_000_000
    link.slave.report(end)
    # The writer moves transfer_from_offset after its send returns, which can be after the
    # slave's ack arrived: wait for both.
    wait_until(lambda: connection.ack_offset == end and connection.transfer_from_offset == end)
    assert connection.is_eligible(end, 1)
    assert connection.is_eligible(end + 10, 11)
    assert not connection.is_eligible(end + 10, 10)
    after = connection.view(end + 10, 11)
    assert after.last_ack_age_ms is not None
    assert 0 <= after.last_ack_age_ms <= time.monotonic_ns() // 1_000_000 - reported_ms
    assert (after.ack_offset, after.diff_bytes, after.in_sync) == (end, 10, True)
    assert after.transfer_from_offset == end and after.last_ack_age_ms is not None
    assert connection.view(end - 5, 11).diff_bytes == 0
    connection.close("done")
    assert not connection.is_eligible(end, 1)


def test_rate_meter_reports_the_last_whole_second() -> None:
    """The transfer rate is the bytes of the last completed window of at least one second
    over its length, and 0 once nothing was sent for two seconds."""
    now = [100.0]
    meter = _RateMeter(clock=lambda: now[0])
    meter.add(1000)
    now[0] = 100.5
    meter.add(500)
    assert meter.per_second() == 0.0  # no window completed yet
    now[0] = 101.0
    meter.add(7)
    assert meter.per_second() == 1500.0
    now[0] = 102.999
    assert meter.per_second() == 1500.0
    now[0] = 103.0
    assert meter.per_second() == 0.0
    now[0] = 103.5
    meter.add(1)
    assert meter.per_second() == pytest.approx(7 / 2.5)


def test_state_names_are_the_ones_the_admin_views_show() -> None:
    """The states' values are the names /admin/ha and the rejected-slave list report."""
    assert [state.value for state in ConnectionState] == [
        "handshake", "waiting_report", "transferring", "needs_reset", "ahead_of_master",
        "diverged", "closed"]


OPEN_LINK: dict[str, Any] = {"slave_secret": None, "ha_secret": None,
                             "ha_allow_unauthenticated": True}


def test_open_link_streams_the_whole_log_with_sendfile(
        store: MessageStore, open_link: OpenLink) -> None:
    """On an open link (no secret, so no tags) the bytes go out by sendfile: the slave gets
    every byte from the min offset, across file ends, and the counters follow."""
    _produce(store, 300)
    end = store.max_offset
    assert end > 2 * store.config.mapped_file_size_bytes
    link = open_link(**OPEN_LINK)
    link.slave.report(0)
    assert link.slave.receive_until(end) == _log_bytes(store, 0, end)
    wait_until(lambda: link.connection.bytes_sent_total == end)
    assert link.connection.transfer_from_offset == end and link.connection.sent_end_offset == end
    assert link.connection.is_open and link.closes == []


@pytest.mark.parametrize("store", [{"mapped_file_size_bytes": 4 * 1024 * 1024}],
                         indirect=True)
def test_open_link_sends_a_batch_larger_than_the_socket_buffer_in_pieces(
        store: MessageStore, open_link: OpenLink) -> None:
    """A batch far larger than the socket's send buffer goes out by sendfile in many partial
    sends, each continuing where the last stopped: the slave gets exactly the log's bytes,
    and nothing past the batch."""
    _produce(store, 1500, size=1000)
    end = store.max_offset
    link = open_link(ha_transfer_batch_size_bytes=4 * 1024 * 1024, **OPEN_LINK)
    link.connection.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8192)
    link.slave.report(0)
    assert link.slave.receive_until(end) == _log_bytes(store, 0, end)
    wait_until(lambda: link.connection.bytes_sent_total == end)
    # Not a byte past the batch: what follows is a heartbeat at the end offset.
    frames: list[tuple[int, bytes]] = []
    while not frames:
        size = link.slave.sock.recv_into(link.slave.parser.free_view())
        assert size > 0
        frames += [(offset, bytes(body)) for offset, body in link.slave.parser.received(size)]
    assert frames[0] == (end, b"")


@pytest.mark.parametrize("store", [{"mapped_file_size_bytes": 4 * 1024 * 1024}],
                         indirect=True)
def test_open_link_slave_that_takes_no_bytes_is_closed(
        store: MessageStore, open_link: OpenLink) -> None:
    """A slave that keeps reporting but stops reading is closed once sendfile made no progress
    for the housekeeping interval: a stalled send is bounded, never a hung writer."""
    _produce(store, 1500, size=1000)
    # One file, one batch: the header goes into an empty buffer, then one sendfile of 1.5 MB
    # is what stalls.
    link = open_link(ha_send_heartbeat_interval_ms=50, ha_housekeeping_interval_ms=400,
                     ha_transfer_batch_size_bytes=4 * 1024 * 1024, **OPEN_LINK)
    # Fixed buffers (no autotuning): what the slave does not read fills them soon.
    link.connection.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8192)
    link.slave.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8192)
    link.slave.report(0)
    reported_s = time.monotonic()
    deadline_s = reported_s + 20.0
    while link.connection.is_open:  # reports keep the reader's housekeeping deadline away
        assert time.monotonic() < deadline_s, "the stalled slave was never closed"
        link.slave.report(0)
        link.connection._closed.wait(0.05)
    _closed(link)
    # Not before a whole interval without progress: a slow slave is given all of it.
    assert time.monotonic() - reported_s >= 0.4
    assert link.closes == ["send failed: slave took no bytes for 0.4 s"]
    # The batch never completed: it is not counted as sent, and the next one would restart it.
    assert (link.connection.bytes_sent_total, link.connection.transfer_from_offset) == (0, 0)


def test_view_counts_the_time_connected(store: MessageStore, open_link: OpenLink) -> None:
    """A slave's view says how long it has been connected, on the monotonic clock."""
    before_ms = time.monotonic_ns() // 1_000_000
    link = open_link()
    view = link.connection.view(store.max_offset, 10)
    after_ms = time.monotonic_ns() // 1_000_000
    assert 0 <= view.connected_for_ms <= after_ms - before_ms


# A process that opens a connection to a slave that never speaks and returns from its main
# thread with it still open. The handshake deadline is far longer than the test waits.
_EXIT_WITH_A_CONNECTION_OPEN = """
import socket
from ha import HAConfig
from ha.connection import HAConnection

listener = socket.create_server(("127.0.0.1", 0))
silent_slave = socket.create_connection(listener.getsockname()[:2])
sock, _ = listener.accept()
connection = HAConnection(
    sock, "silent-slave", HAConfig(ha_handshake_timeout_ms=60_000,
                                   ha_housekeeping_interval_ms=60_000),
    None, on_ack=lambda c: None, on_close=lambda c, reason: None,
    on_handshake=lambda c: "", agree=lambda history, slave_max: (None, ()))
connection.start()
print("started", flush=True)
"""


@pytest.mark.processes
def test_open_connection_does_not_hold_the_process_at_exit() -> None:
    """A process whose main thread returns while a slave's connection is still in its
    handshake exits at once: the connection's threads never make exit wait on a silent slave
    (stop's joins are bounded; a thread left over must not hang the broker's exit)."""
    # A hang shows as TimeoutExpired: with a non-daemon thread the child lives a minute.
    child = subprocess.run([sys.executable, "-c", _EXIT_WITH_A_CONNECTION_OPEN],
                           capture_output=True, text=True, timeout=20,
                           env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert (child.returncode, child.stdout, child.stderr) == (0, "started\n", "")
