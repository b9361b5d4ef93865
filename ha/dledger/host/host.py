"""DLedgerHost: the loop that runs one DLedgerNode in a real process, on one thread.

Threads: the host thread (a ServiceThread) is the only one that touches the node and the
storage. Other threads only put events in its bounded inbox: the transport's reading threads
(`receive`, peer messages), clients (`append`) and the admin (`transfer_leadership`); the
admin view reads the snapshot the host publishes after every round (`status`), so a busy or
stuck host never blocks it (its per-peer figures are refreshed once a tick: `_publish`).

One round: take up to `round_events_max` events from the inbox, run the ticks that are due
by the injected monotonic clock, run every action in order, then group commit: when writes
were issued, one `storage.sync()` and `node.persisted(last write id)` (ha/dledger/core/storage.py).
Client appends that follow one another in the inbox go to the node as one run (encoded in
order, each record placed after the one before: one write), and the round's appends are pushed
to the peers once, after its events (one push a peer rather than one an append). Without
`sync_before_ack` (ASYNC_FLUSH) the round's writes count as persisted from the page cache and
`storage.sync()` runs every `sync_interval_ms`.
Actions: `Send` -> the transport's bounded per-peer queue (never blocks); `PersistTermVote` ->
`storage.persist_term_vote`; the log writes are already in the NodeLog and wait for the sync;
`AdvanceCommit` -> `storage.set_committed`, then the commit listeners; `CompleteAppend` ->
the caller's future. A round that moved the commit ends by writing what is queued for the
peers, then `storage.after_round()` (a store's consume-queue dispatch of what it committed).

Bounds: the inbox holds `inbox_max` events (a peer message past it is dropped and counted: Raft
re-sends); at most `pending_appends_max` client appends are unanswered at once (past it,
LEADER_PENDING_FULL at once); at most a few ticks are caught up per round after a stall (the
rest are skipped, which only lengthens timeouts).

Stop: the thread is joined, then every unanswered append completes: LEADERSHIP_LOST when the
node had it (it may still commit under another leader: indeterminate), NOT_LEADER when it never
reached the node (nothing appended). Appends after stop are NOT_LEADER at once. A running
transfer ends LEADERSHIP_LOST, one still in the inbox NOT_LEADER.
"""

from __future__ import annotations

import enum
import logging
import random
import threading
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Protocol

from ha.dledger.core.actions import (
    Action,
    AdvanceCommit,
    AppendStatus,
    CompleteAppend,
    CompleteTransfer,
    PersistTermVote,
    Send,
    TransferStatus,
)
from ha.dledger.core.config import DLedgerConfig
from ha.dledger.core.member import Role
from ha.dledger.core.messages import Message
from ha.dledger.core.node import DLedgerNode
from ha.dledger.core.progress import EntryDispatcher
from ha.dledger.core.storage import DLedgerStorage
from ha.dledger.host.append_future import AppendFuture
from ha.dledger.host.host_config import HostConfig
from ha.dledger.host.host_status import HostStatus, PeerSample, Snapshot
from ha.dledger.stored.stored_log import StoredLog
from store.service import ServiceThread

log = logging.getLogger(__name__)

_TICKS_PER_ROUND_MAX = 4


@dataclass(slots=True)
class AppendResult:  # never changed; one per client append, so not frozen (messages.Entry)
    status: AppendStatus
    index: int
    term: int


@dataclass(slots=True)
class _Append:
    request_id: int
    encode: Callable[[], bytes]
    future: AppendFuture[AppendResult]
    term: int | None = None  # appended only while the node leads this term


@dataclass(slots=True)
class _Transfer:
    target_id: str
    future: Future[TransferStatus]


_Event = Message | _Append | _Transfer


class HostIO(Protocol):
    """Where the host thread waits between rounds when it also does the peer I/O (the
    transport's `poll`; ha/dledger/host/transport.py): woken by `wake` from any thread."""

    def poll(self, timeout_s: float) -> None: ...

    def flush(self) -> None:
        """Write what is queued for the peers now, as far as the sockets take it."""

    def wake(self) -> None: ...


class HostState(enum.Enum):
    NEW = "NEW"
    RUNNING = "RUNNING"
    STOPPED = "STOPPED"


class DLedgerHost(ServiceThread):
    def __init__(self, self_id: str, member_ids: Sequence[str], config: HostConfig,
                 storage: DLedgerStorage, send: Callable[[str, Message], None],
                 clock_ms: Callable[[], float], rng: random.Random | None = None,
                 node_base_config: DLedgerConfig | None = None) -> None:
        super().__init__()
        self.name = f"dledger-host-{self_id}"
        self.self_id = self_id
        self.config = config
        self._member_ids = tuple(member_ids)
        self._node_config = config.node_config(node_base_config)
        self._storage = storage
        self._send = send
        self._clock_ms = clock_ms
        self._rng = rng or random.Random()
        # Bounded by inbox_max, checked under _lock (a deque: no Condition per event as a
        # queue.Queue has; only the host thread takes events out).
        self._inbox: deque[_Event] = deque()
        self._lock = threading.Lock()  # state, inbox bound, futures and request ids
        self.state = HostState.NEW
        self._futures: dict[int, AppendFuture[AppendResult]] = {}
        self._in_node: set[int] = set()  # request ids handed to the node (host thread)
        self._transfer: Future[TransferStatus] | None = None  # the one the node runs
        self._next_request_id = 1
        self._commit_listeners: list[Callable[[int], None]] = []
        self._node: DLedgerNode | None = None
        self._next_tick_ms = 0.0
        self._last_write_id = 0
        self._persisted_write_id = 0
        self._unsynced = False  # log writes not yet synced (only without sync_before_ack)
        self._synced_at_ms = 0.0
        self._last_contact_ms: dict[str, float] = {}
        self._snapshot: Snapshot | None = None
        self.inbox_dropped_count = 0
        # Elections this member started (each new term it stood in as a candidate).
        self.elections_started_count = 0
        self._candidate_term = 0
        self._appended = False  # this round appended: push once after its events
        self._committed = False  # this round moved the commit: storage.after_round() at its end
        self._retained_min_offset = -1  # the log's first offset when last compacted to it
        self._io: HostIO | None = None

    def use_io(self, io: HostIO) -> None:
        """Wait in `io.poll` between rounds (before start): the host thread does the peer
        I/O, so messages reach the node and leave it without a thread switch."""
        assert self.state is HostState.NEW, "use_io after start"
        self._io = io

    def wake(self) -> None:
        if self._io is None:
            super().wake()
        else:
            self._io.wake()

    def _wait(self, wait_s: float) -> None:
        if self._io is None:
            super()._wait(wait_s)
        else:
            self._io.poll(wait_s)

    # ----- lifecycle -----

    def start(self) -> None:
        self.open()
        super().start()

    def open(self) -> None:
        """Recover the node from storage without starting the thread: `start()` runs this, and
        tests drive `run_once()` themselves from here (a seam, no thread, no sleeps)."""
        with self._lock:
            if self.state is not HostState.NEW:
                raise RuntimeError(f"{self.name} is {self.state.value}, cannot start")
            hard_state, node_log = self._storage.open()
            self._node = DLedgerNode(self.self_id, self._member_ids, self._node_config,
                                     self._rng, hard_state, node_log)
            self._next_tick_ms = self._clock_ms() + self.config.tick_ms
            self._synced_at_ms = self._clock_ms()
            self._publish()
            self.state = HostState.RUNNING

    def stop(self) -> None:
        with self._lock:
            if self.state is not HostState.RUNNING:
                return
            self.state = HostState.STOPPED
        super().stop()
        with self._lock:  # a transport thread may still add a peer message
            stranded = list(self._inbox)
            futures, self._futures = self._futures, {}
        for request_id, future in futures.items():
            status = (AppendStatus.LEADERSHIP_LOST if request_id in self._in_node
                      else AppendStatus.NOT_LEADER)
            future.set_result(AppendResult(status, 0, 0))  # no-op when already decided
        if self._transfer is not None and not self._transfer.done():
            self._transfer.set_result(TransferStatus.LEADERSHIP_LOST)
        for event in stranded:
            if isinstance(event, _Transfer):
                event.future.set_result(TransferStatus.NOT_LEADER)
        log.info("dledger: host %s stopped (%d appends answered, %d events dropped)",
                 self.self_id, len(futures), len(stranded))
        self._storage.close()

    def add_commit_listener(self, listener: Callable[[int], None]) -> None:
        """`listener(commit_index)` runs on the host thread after storage.set_committed."""
        self._commit_listeners.append(listener)

    # ----- other threads -----

    def receive(self, message: Message) -> None:
        """A message from a peer (the transport's callback); dropped when the inbox is full."""
        with self._lock:
            if not self._offer(message):
                self.inbox_dropped_count += 1
                return
        self.wake()

    def append(self, encode: Callable[[], bytes],
               term: int | None = None) -> AppendFuture[AppendResult]:
        """A client append. `encode()` runs on the host thread right before the node appends
        the entry (never when this member is not the leader, nor, given `term`, when it leads
        another term: NOT_LEADER then); the future completes on the host thread with the
        node's AppendStatus."""
        future: AppendFuture[AppendResult] = AppendFuture()
        with self._lock:
            if self.state is not HostState.RUNNING:
                return _resolved(future, AppendStatus.NOT_LEADER)
            if len(self._futures) >= self.config.pending_appends_max \
                    or not self._offer(_Append(self._next_request_id, encode, future, term)):
                return _resolved(future, AppendStatus.LEADER_PENDING_FULL)
            self._futures[self._next_request_id] = future
            self._next_request_id += 1
        self.wake()
        return future

    def append_run(self, encodes: Sequence[Callable[[], bytes]],
                   term: int | None = None) -> list[AppendFuture[AppendResult]]:
        """Client appends queued together, in order, with nothing between them: each encode
        runs right after the one before on the host thread, so their entries are
        consecutive in the log (a metadata snapshot's parts). All are queued or, past the
        pending or inbox bound, none (each answered LEADER_PENDING_FULL)."""
        futures: list[AppendFuture[AppendResult]] = [AppendFuture() for _ in encodes]
        with self._lock:
            if self.state is not HostState.RUNNING:
                return [_resolved(future, AppendStatus.NOT_LEADER) for future in futures]
            if len(self._futures) + len(encodes) > self.config.pending_appends_max \
                    or len(self._inbox) + len(encodes) > self.config.inbox_max:
                return [_resolved(future, AppendStatus.LEADER_PENDING_FULL)
                        for future in futures]
            for encode, future in zip(encodes, futures, strict=True):
                self._inbox.append(_Append(self._next_request_id, encode, future, term))
                self._futures[self._next_request_id] = future
                self._next_request_id += 1
        self.wake()
        return futures

    def transfer_leadership(self, target_id: str) -> Future[TransferStatus]:
        """Hand leadership to `target_id` (the admin request); the future completes with the
        node's TransferStatus, IN_PROGRESS at once while another transfer runs."""
        future: Future[TransferStatus] = Future()
        with self._lock:
            if self.state is not HostState.RUNNING:
                future.set_result(TransferStatus.NOT_LEADER)
                return future
            if not self._offer(_Transfer(target_id, future)):
                future.set_result(TransferStatus.IN_PROGRESS)
                return future
        self.wake()
        return future

    def _offer(self, event: _Event) -> bool:
        """Queue `event` unless the inbox holds inbox_max already (the caller holds _lock)."""
        if len(self._inbox) >= self.config.inbox_max:
            return False
        self._inbox.append(event)
        return True

    def leading_term(self) -> int | None:
        """The term this member leads in, or None: what a produce checks, read from the last
        published snapshot without building the admin view (peers, clock) that status() does."""
        snapshot = self._snapshot
        assert snapshot is not None, "status before start"
        return snapshot.term if snapshot.role is Role.LEADER else None

    def status(self) -> HostStatus:
        snapshot = self._snapshot
        assert snapshot is not None, "status before start"
        return snapshot.view(self._clock_ms(), self.inbox_dropped_count,
                             self.elections_started_count)

    # ----- the host thread -----

    def run_once(self) -> float:
        node = self._node
        assert node is not None
        inbox = self._inbox
        appends: list[_Append] = []  # a run of client appends, taken together
        for _ in range(self.config.round_events_max):
            try:
                event = inbox.popleft()
            except IndexError:
                break
            if isinstance(event, _Append):
                appends.append(event)
                continue
            if appends:
                self._run(self._append_run(node, appends))
                appends = []
            self._run(self._handle(node, event))
        if appends:
            self._run(self._append_run(node, appends))
        if self._appended:
            self._appended = False
            self._run(node.dispatch())
        ticked = self._run_due_ticks(node)
        self._group_commit(node)
        if ticked:
            self._retain(node)
        self._publish(with_peers=ticked)
        if self._committed:
            # The round's acks and answers first: they are what the peers and clients wait
            # for. Then what its commits made due (a store's consume-queue dispatch).
            self._committed = False
            if self._io is not None:
                self._io.flush()
            self._storage.after_round()
        if inbox:
            return 0.0
        return max(0.0, self._next_tick_ms - self._clock_ms()) / 1000

    def _handle(self, node: DLedgerNode, event: Message | _Transfer) -> list[Action]:
        if isinstance(event, _Transfer):
            if self._transfer is not None:
                event.future.set_result(TransferStatus.IN_PROGRESS)
                return []
            # Set first: a refusal comes back in these very actions and completes it.
            self._transfer = event.future
            return node.transfer_leadership(event.target_id)
        self._last_contact_ms[event.source_id] = self._clock_ms()
        return node.receive(event)

    def _append_run(self, node: DLedgerNode, appends: list[_Append]) -> list[Action]:
        """Encode a run of client appends in order, each placed after the one before, and
        hand them to the node together: one write, one push a peer."""
        if node.role is not Role.LEADER:
            return [CompleteAppend(event.request_id, AppendStatus.NOT_LEADER, 0, 0)
                    for event in appends]
        self._storage.start_appends()
        requests: list[tuple[int, bytes]] = []
        refused: list[Action] = []
        for event in appends:
            if event.term is not None and event.term != node.term:
                refused.append(CompleteAppend(event.request_id, AppendStatus.NOT_LEADER, 0, 0))
                continue
            try:
                payload = event.encode()
            except Exception as error:  # the caller's bug: its future says so, the host goes on
                self._fail(event.request_id, error)
                continue
            requests.append((event.request_id, payload))
            self._in_node.add(event.request_id)
        self._appended = True
        return [*refused, *node.client_append_many(requests, push=False)]

    def _run_due_ticks(self, node: DLedgerNode) -> bool:
        """Run the ticks that are due; whether any was."""
        now_ms = self._clock_ms()
        if now_ms < self._next_tick_ms:
            return False
        for _ in range(_TICKS_PER_ROUND_MAX):
            if now_ms < self._next_tick_ms:
                return True
            self._next_tick_ms += self.config.tick_ms
            self._run(node.tick())
        if now_ms >= self._next_tick_ms:
            # A stall: skip the missed ticks rather than replay them in a burst.
            self._next_tick_ms = now_ms + self.config.tick_ms
        return True

    def _retain(self, node: DLedgerNode) -> None:
        """Retention, once a tick, on a store-backed log: a leader holds the commit-log files
        its peers still need (the lowest match; a follower holds nothing), and once the
        store's retention removed files the node forgets the entries they held (its base
        moves: a peer below it is then reset from the base, `from_base`)."""
        stored = node.log
        if not isinstance(stored, StoredLog):
            return
        dispatchers = node.dispatchers.values()
        stored.hold_retention_for([d.match_index for d in dispatchers]
                                  if node.role is Role.LEADER else [],
                                  self.config.retention_hold_behind_bytes_max)
        min_offset = stored.retained_min_offset
        if min_offset == self._retained_min_offset:
            return
        target = stored.compactable_index()
        index = min(target, node.commit_index, node.durable_index)
        if index > stored.base_index:
            node.compact(index)
        if index == target:
            self._retained_min_offset = min_offset  # done until retention removes more

    def _group_commit(self, node: DLedgerNode) -> None:
        if self._last_write_id == self._persisted_write_id:
            self._sync_if_due()
            return
        if self.config.sync_before_ack:
            self._sync()
        else:
            self._unsynced = True
            self._sync_if_due()
        self._persisted_write_id = self._last_write_id
        actions = node.persisted(self._last_write_id)
        self._run(actions)
        # Answering a durable write never issues another one.
        assert self._last_write_id == self._persisted_write_id, actions

    def _sync_if_due(self) -> None:
        """Without sync_before_ack: the log writes reach the disk every sync_interval_ms."""
        if self._unsynced and \
                self._clock_ms() - self._synced_at_ms >= self.config.sync_interval_ms:
            self._sync()

    def _sync(self) -> None:
        self._storage.sync()
        self._unsynced = False
        self._synced_at_ms = self._clock_ms()

    def _run(self, actions: list[Action]) -> None:
        completions: list[CompleteAppend] = []  # a run of them, answered together
        for action in actions:
            if isinstance(action, CompleteAppend):
                completions.append(action)
                continue
            if completions:
                self._complete(completions)
                completions = []
            if isinstance(action, Send):
                self._send(action.target_id, action.message)
            elif isinstance(action, AdvanceCommit):
                self._storage.set_committed(action.commit_index)
                self._committed = True
                for listener in self._commit_listeners:
                    listener(action.commit_index)
            elif isinstance(action, CompleteTransfer):
                if self._transfer is not None:
                    self._transfer.set_result(action.status)
                    self._transfer = None
            else:
                if isinstance(action, PersistTermVote):
                    self._storage.persist_term_vote(action.term, action.voted_for)
                    if action.voted_for == self.self_id and action.term > self._candidate_term:
                        # A candidate's vote for itself in a new term: one election started.
                        self._candidate_term = action.term
                        self.elections_started_count += 1
                assert action.write_id == self._last_write_id + 1, action
                self._last_write_id = action.write_id
        if completions:
            self._complete(completions)

    def _complete(self, completions: list[CompleteAppend]) -> None:
        """Answer appends: their futures taken in one hold of the lock, decided after it."""
        with self._lock:
            pop = self._futures.pop
            futures = [pop(action.request_id, None) for action in completions]
        in_node = self._in_node
        for action, future in zip(completions, futures, strict=True):
            if action.status is AppendStatus.DISK_ERROR:
                # Nothing of it was written (ha/dledger/core/storage.py, LogWriteError): the member
                # goes on, a disk that recovers takes the next append.
                log.error("dledger: %s: the disk refused append %d", self.self_id,
                          action.request_id)
            in_node.discard(action.request_id)
            if future is not None:
                future.set_result(AppendResult(action.status, action.index, action.term))

    def _fail(self, request_id: int, error: Exception) -> None:
        with self._lock:
            future = self._futures.pop(request_id, None)
        if future is not None:
            future.set_exception(error)

    def _publish(self, with_peers: bool = True) -> None:
        """Publish the member's state; the peers' samples (match, pushes in flight, last
        contact) only in a round that ran a tick, or when role or term changed: a busy leader
        runs hundreds of rounds a tick, and a dashboard needs them no fresher than a tick.
        Their lags are worked out against this round's end when viewed (PeerSample.view)."""
        node = self._node
        assert node is not None
        stored = node.log if isinstance(node.log, StoredLog) else None
        previous = self._snapshot
        if with_peers or previous is None or previous.role is not node.role \
                or previous.term != node.term:
            samples: list[PeerSample] = []
            for peer_id in node.peer_ids:
                dispatcher = node.dispatchers.get(peer_id)
                samples.append(PeerSample.of(peer_id, dispatcher,
                                             self._last_contact_ms.get(peer_id),
                                             _match_end_position(stored, dispatcher)))
            peers = tuple(samples)
        else:
            peers = previous.peers
        self._snapshot = Snapshot(self.self_id, node.role, node.term, node.member.leader_id,
                                  node.commit_index, node.log.last_index, node.log.base_index,
                                  None if stored is None else stored.end_position,
                                  len(self._futures), peers, self.last_error, node.diverged,
                                  0 if stored is None else stored.forks_cut_count)


def _match_end_position(stored: StoredLog | None,
                        dispatcher: EntryDispatcher | None) -> int | None:
    """Where the record of the peer's match ends in the leader's commit log (-1: unknown, as
    after a reset); None when there is no such record to measure from (not the leader, not
    a store-backed log, or a match below the log's base)."""
    if dispatcher is None or stored is None or dispatcher.match_index < stored.base_index:
        return None
    return stored.end_of(dispatcher.match_index)


def _resolved(future: AppendFuture[AppendResult],
              status: AppendStatus) -> AppendFuture[AppendResult]:
    future.set_result(AppendResult(status, 0, 0))
    return future
