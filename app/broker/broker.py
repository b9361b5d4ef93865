"""One broker: the message store, its metadata, replication by role, slave metadata sync, the
idempotency window, periodic snapshots and put rates, started and stopped together (DESIGN,
"One broker = one process"). `Broker.start` and `Broker.stop` own every background activity
of the process; the app starts none of its own.

Start order:
1. the store (recovery; in DLedger mode the group member, which starts the store), then the
   data dir's broker file (role, name, group: store/broker_file.py, rewritten at every role
   change);
2. the metadata (migrations, then its consumer-offset persister);
3. replication (classic mode: the HA service of a master, the HA client of a slave);
4. by role: the leader sync and the idempotency rebuild (DLedger), the slave metadata sync
   (a slave), or the idempotency rebuild (a master);
5. periodic snapshots (a master, when `snapshot_interval_s` is not 0);
6. the put-rate sampler (a first sample now, then one every second).
Stop runs the reverse (6 to 1), every step even if one fails, and always reaches
`store.shutdown()`, which removes the abort marker.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import logging
import threading
import time
from typing import TYPE_CHECKING

from app.broker import pop_expiry, pop_snapshots
from app.broker.consumption import GroupConsumption, epoch_delivery_id_floor
from app.broker.dledger_consumption import dledger_consumption, watch_cuts
from app.broker.dledger_member import build_dledger, leader_http_address
from app.broker.dledger_snapshots import snapshots_for_mode
from app.broker.dledger_timers import DLedgerTimerWriter
from app.broker.idempotency import IdempotencyWindow, checked_in_log, rebuild
from app.broker.leader_sync import LeaderSync, dispatched_to_commit
from app.broker.metadata_log import MetadataLog
from app.broker.pop_batches import PopBatches
from app.broker.put_rates import PutRateSampler
from app.broker.slave_sync import SlaveSync, queue_max_offset, start_queues
from app.broker.snapshots import PeriodicSnapshots, Snapshots
from app.broker.system_records import SystemRecords
from app.broker.writable_topics import WritableTopics
from app.settings import ReplicationMode, Settings
from ha import Replication
from store import BrokerRole, Lifecycle, MessageStore, PutMessageStatus
from store.broker_file import BrokerFile, write_broker_file
from store.clock import ClockMs, wall_ms
from store.metadata import MetadataStore
from store.metadata.log_records import SNAPSHOT_PART_BYTES_MAX
from store.service import DueService, IntervalService
from store.timers.scheduler import TimerScheduler, Writer

if TYPE_CHECKING:
    from ha.dledger.commit_log import DLedgerCommitLog  # loaded by a broker in DLedger mode only

log = logging.getLogger(__name__)

# A new leader waits at most this a check for its committed records to reach the consume
# queues (then takes no writes until a later check finds them there).
_DISPATCH_WAIT_S = 2.0
_DELAY_OFFSET_TABLE_INTERVAL_MS = 1000
_METADATA_SNAPSHOT_CHECK_INTERVAL_MS = 5000
# DLedger: how much longer than dledger_quorum_deadline_ms the scheduler waits for an append's
# answer (app/broker/dledger_timers.py).
_TIMER_ANSWER_MARGIN_S = 5.0


class BrokerState(enum.Enum):
    CREATED = "CREATED"
    STARTING = "STARTING"
    RUNNING = "RUNNING"
    STOPPING = "STOPPING"
    STOPPED = "STOPPED"


class BrokerStateError(RuntimeError):
    """start/stop used out of order: a bug in the caller."""


class RoleChangeRefused(Exception):
    """A promotion or demotion that would be unsafe or makes no sense now; the message says
    why (an expected answer, not a bug)."""


class Broker:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.role = settings.broker_role
        self._is_slave = settings.broker_role is BrokerRole.SLAVE
        # Where writes go while this broker is a slave; a demotion points them elsewhere.
        self.master_http_address = settings.master_http_address
        self.master_ha_address = settings.ha_master_address
        self._role_lock = threading.Lock()
        # DLedger mode: the group member owns the write path and starts the store itself.
        self.dledger: DLedgerCommitLog | None = None
        self._writable_term: int | None = None  # the term this member takes writes in
        if settings.replication_mode is ReplicationMode.DLEDGER:
            self.dledger = build_dledger(settings)
            self.store = self.dledger.store
        else:
            self.store = MessageStore(settings.to_store_config())
        self.metadata: MetadataStore | None = None
        self.replication: Replication | None = None
        self.slave_sync: SlaveSync | None = None
        self.leader_sync: LeaderSync | None = None  # DLedger mode: metadata follows the leader
        self.idempotency = IdempotencyWindow(settings.idempotency_window_s,
                                             settings.idempotency_keys_max)
        if self.dledger is not None:
            self.idempotency.check_indeterminate = functools.partial(checked_in_log,
                                                                     self.store)
        self.state = BrokerState.CREATED
        self.started_at_ms = 0
        self.put_rates = PutRateSampler(self.put_counts, self.put_bytes_total)
        # Metadata changes are records of the log (app/broker/metadata_log.py); in DLedger
        # mode the group member puts them, as it puts messages.
        self.metadata_log = MetadataLog(self.store, dledger=self.dledger)
        self.writable_topics = WritableTopics(self.store, self.metadata_log,
                                              lambda: self.metadata_store)
        # Classic modes: retention keeps the last metadata snapshot's file, and a master
        # writes a newer snapshot when retention reaches it (app/broker/metadata_snapshots.py).
        # DLedger mode: the leader writes them through its member, and every member's
        # retention keeps its last one's file (app/broker/dledger_snapshots.py).
        self.metadata_snapshots = snapshots_for_mode(
            self.store, self.dledger, self.metadata_log, lambda: self.metadata_store,
            part_bytes_max=min(SNAPSHOT_PART_BYTES_MAX, settings.message_size_max_bytes // 2),
            pop_images=lambda: pop_snapshots.images(self.consumption))
        self.store.retention.metadata_floor = self.store.metadata_retention_floor
        self.store.retention.on_metadata_floor = self._snapshot_for_retention
        # ... and, on a master, one once metadata_snapshot_records_max records follow the last.
        self._metadata_snapshot_check = IntervalService(
            "metadata-snapshots", _METADATA_SNAPSHOT_CHECK_INTERVAL_MS, self.snapshot_if_due)
        self.snapshots = Snapshots(self)  # on request (the admin route) or periodically
        self._periodic_snapshots: PeriodicSnapshots | None = None
        # Delayed messages' scheduler, active on the master (classic) or the leader of a
        # term once caught up (DLedger: it writes through `_timer_writer`).
        self.timers: TimerScheduler | None = None
        self._timer_writer: DLedgerTimerWriter | None = None
        # "Now" for delayed messages: when a produce is due, and when the scheduler delivers
        # (tests set a fake clock).
        self.timer_clock_ms: ClockMs = wall_ms
        # The delay-offset table shows each level's progress as this broker's log says it.
        self._delay_offset_table = IntervalService("delay-offset-table",
                                                   _DELAY_OFFSET_TABLE_INTERVAL_MS,
                                                   self.save_delay_offsets)
        # Group consumption (receive / ack, app/broker/consumption.py): its states follow the
        # log's pop records on every replica; the master's tick ends expired deliveries.
        self.consumption = GroupConsumption(settings, self.store, lambda: self.metadata_store) \
            if self.dledger is None else dledger_consumption(
                settings, self.dledger, lambda: self.metadata_store, self._pop_term)
        # Dispatch's hand-off of the log's metadata records to the layers above.
        self.system_records = SystemRecords(lambda: self.metadata_store, self.consumption,
                                            self.writable_topics)
        if self.dledger is None:  # a promoted slave never hands out its old master's ids
            self.consumption.delivery_id_floor = \
                lambda: epoch_delivery_id_floor(self.replication)
        # The receives and acks of one event-loop turn are decided together (fewer appends).
        self.pop_batches = PopBatches(self.consumption.decide)
        interval_ms = settings.pop_expiry_interval_ms
        self._pop_expiry = DueService("pop-expiry", interval_ms=interval_ms,
                                      gap_ms=min(settings.pop_expiry_gap_ms, interval_ms),
                                      action=self._expiry_tick)

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        if self.state is not BrokerState.CREATED:
            raise BrokerStateError(f"start() on a broker that is {self.state.value}")
        self.state = BrokerState.STARTING
        settings = self.settings
        try:
            self._start_store()
            self._write_broker_file()
            self.metadata = MetadataStore(
                settings.metadata_database_url,
                auto_create_topics=settings.auto_create_topics,
                default_queue_count=settings.default_queue_count,
                consumer_offset_persist_interval_ms=settings.consumer_offset_persist_interval_ms,
                topics_max=settings.topics_max,
                groups_max=settings.groups_max,
                queues_per_topic_max=settings.queues_per_topic_max,
            )
            self.metadata.start()
            # Records the metadata has not applied yet (recovery redispatched them before
            # it was there), then each one dispatch reaches, in log order.
            applied = self.metadata.log_position
            # Group consumption's states from the pop records the tables passed already (the
            # feed hands those after them to both).
            replayed = self.consumption.replay(applied.queue_offset)
            if replayed:
                log.info("group consumption: %d pop records of the log applied at start",
                         replayed)
            caught_up = self.store.attach_system_records(
                self.system_records.apply, applied.queue_offset, applied.commit_log_offset,
                reset=self._reset_metadata, cut=self.metadata.cut_ahead,
                snapshot=self.metadata.applied_snapshot,
                run_handler=self.system_records.apply_run)
            if self.dledger is None:  # a commit's answer waits for its entry's commit there
                self.metadata_log.apply_ahead = self.metadata.apply_ahead
            if caught_up:
                log.info("metadata: %d records of the log applied at start", caught_up)
            for topic in self.metadata.list_topics():
                self.store.set_queue_count(topic.name, topic.write_queue_count)
            if self.dledger is None:
                self.replication = Replication(settings.to_ha_config(), self.store)
                self.replication.start()
                self._start_timers()
            if self.dledger is not None:
                watch_cuts(self.dledger, self.consumption)
                rebuild(self.idempotency, self.store)
                self._start_dledger_timers(self.dledger)  # active once it leads, caught up
                self._start_leader_sync(self.dledger)
            elif self.is_slave:
                assert settings.master_http_address is not None
                self._start_slave_sync(settings.master_http_address)
            else:
                rebuild(self.idempotency, self.store)
            if settings.snapshot_interval_s > 0 and not self.is_slave:
                self._periodic_snapshots = PeriodicSnapshots(self.snapshots,
                                                             settings.snapshot_interval_s)
                self._periodic_snapshots.start()
            self.put_rates.sample()  # the first sample now; the sampler's come every interval
            self.put_rates.service.start()
            self._metadata_snapshot_check.start()
        except BaseException:
            self._stop_parts()
            self.state = BrokerState.STOPPED
            raise
        self.started_at_ms = time.time_ns() // 1_000_000
        self.state = BrokerState.RUNNING
        log.info("broker running: %s, HTTP %s:%d, data %s", self.describe_role(),
                 settings.http_host, settings.http_port, settings.data_dir)

    def _start_store(self) -> None:
        if self.dledger is None:
            report = self.store.start()
            log.info("store recovered %s: %s", self.settings.data_dir, report)
            return
        self.dledger.start()
        log.info("store recovered %s: %s; DLedger member %s on port %d", self.settings.data_dir,
                 self.dledger.storage.recovery, self.dledger.self_id, self.dledger.listen_port)

    @property
    def name(self) -> str:
        """What snapshots and the data dir's broker file call this broker: its gateway."""
        return f"{self.settings.http_host}:{self.settings.http_port}"

    def _write_broker_file(self) -> None:
        """Record role, name and group in the data dir (store/broker_file.py), for tools that
        read it while the broker is stopped; at start and after every role change. A failure
        is logged: the file is informational, the broker runs without it."""
        role = "DLEDGER" if self.dledger is not None else self.role.value
        try:
            write_broker_file(self.settings.data_dir,
                              BrokerFile(self.name, role, self.settings.broker_group))
        except OSError as error:
            log.warning("could not write %s: %s", self.store.paths.broker_file, error)

    @property
    def role_name(self) -> str:
        """What views call the role: the classic role, or the DLedger member's (LEADER,
        FOLLOWER, PRE_CANDIDATE, CANDIDATE)."""
        if self.dledger is None:
            return self.role.value
        return self.dledger.status().role

    def describe_role(self) -> str:
        if self.dledger is None:
            return self.role.value
        return f"DLedger {self.dledger.status().role} {self.dledger.self_id}"

    def stop(self) -> None:
        """Stop everything; a clean store shutdown removes the abort marker."""
        if self.state is BrokerState.STOPPED:
            return
        if self.state is BrokerState.CREATED:
            raise BrokerStateError("stop() on a broker that never started")
        self.state = BrokerState.STOPPING
        try:
            self._stop_parts()
        finally:
            self.state = BrokerState.STOPPED
        log.info("broker stopped cleanly")

    def _stop_parts(self) -> None:
        """Stop what was started, newest first (the module's list, 6 to 1); every step runs
        even if one fails."""
        steps = []
        if self._metadata_snapshot_check.is_running:
            steps.append(self._metadata_snapshot_check.stop)
        if self.put_rates.service.is_running:
            steps.append(self.put_rates.service.stop)
        if self._periodic_snapshots is not None:
            steps.append(self._periodic_snapshots.stop)
        if self.leader_sync is not None:
            steps.append(self.leader_sync.stop)  # and the metadata sync it runs
        if self.slave_sync is not None:
            steps.append(self.slave_sync.stop)
        if self._delay_offset_table.is_running:
            steps.append(self._delay_offset_table.stop)
        if self._pop_expiry.is_running:
            steps.append(self._pop_expiry.stop)
        if self.timers is not None:
            steps.append(self.timers.stop)
        if self.replication is not None:
            steps.append(self.replication.stop)
        if self.metadata is not None:
            # Records dispatched from here on are applied at the next start (the metadata's
            # persisted position is below them).
            steps.append(self.store.detach_system_records)
            steps.append(self.metadata.stop)
        if self.dledger is not None and self.dledger.is_started:
            steps.append(self.dledger.stop)  # the store's clean shutdown is part of it
        elif self.store.state is Lifecycle.RUNNING:
            steps.append(self.store.shutdown)
        errors: list[BaseException] = []
        for step in steps:
            try:
                step()
            except Exception as error:  # keep stopping the rest, then report
                log.exception("stopping %s failed", step)
                errors.append(error)
        if errors:
            raise errors[0]

    def _start_timers(self, write: Writer | None = None) -> None:
        self.timers = self.store.timer_scheduler(
            self.writable_topics.timer_queue_count, clock=lambda: self.timer_clock_ms(),
            cancels_pending_max=self.settings.timer_cancels_pending_max, write=write)
        self.timers.start()
        if not self._is_slave and self.dledger is None:
            self.timers.activate()
        self._delay_offset_table.start()
        self._pop_expiry.start()

    def expire_deliveries(self) -> int:
        """The pop-expiry tick's work, now: on the master, deliveries past their invisible
        time end, in bounded rounds (app/broker/pop_expiry.py); how many ended."""
        return pop_expiry.expire_rounds(self.consumption, self.takes_pop_decisions).ended

    def _expiry_tick(self) -> int | None:
        return pop_expiry.expire_rounds(self.consumption, self.takes_pop_decisions).due_in_ms

    def takes_pop_decisions(self) -> bool:
        """Whether this broker decides receives and acks: a running master, or the DLedger
        leader taking writes."""
        return not self.is_slave and self.is_running

    def _pop_term(self) -> int | None:
        """DLedger: the term group consumption writes in (None: it writes nothing)."""
        return self._writable_term if self.takes_dledger_writes else None

    def pop_topics_exist(self, group: str, topic: str) -> bool:
        return self.writable_topics.pop_topics_exist(group, topic)

    def ensure_pop_topics(self, group: str, topic: str) -> None:
        """The group's retry and dead-letter topics exist (WritableTopics.ensure_pop_topics)."""
        self.writable_topics.ensure_pop_topics(group, topic,
                                               self.consumption.retry_queue_count(group))

    def _start_dledger_timers(self, member: DLedgerCommitLog) -> None:
        """DLedger mode: the scheduler writes through the member, fenced by the term it is
        activated in (app/broker/dledger_timers.py); `_refill_idempotency` activates it."""
        wait_s = self.settings.dledger_quorum_deadline_ms / 1000 + _TIMER_ANSWER_MARGIN_S
        self._timer_writer = DLedgerTimerWriter(member, wait_s)
        self._start_timers(self._timer_writer)

    def _timers_stepped_down(self) -> None:
        """DLedger: this member no longer leads the term its scheduler was activated in."""
        if self._timer_writer is not None:
            self._timer_writer.fence(None)
        if self.timers is not None:
            self.timers.deactivate()

    def save_delay_offsets(self) -> int:
        """Write each delay level's progress (derived from the log, store/timers/state.py)
        into the delay-offset table; how many rows changed."""
        progress = self.store.timer_state.progress()
        offsets = {level: progress[f"S:{level - 1}"]
                   for level in range(1, self.store.config.timers.level_count + 1)
                   if f"S:{level - 1}" in progress}
        return self.metadata_store.set_delay_offsets(offsets=offsets) if offsets else 0

    def _start_slave_sync(self, master_http_address: str) -> None:
        self.slave_sync = self._started_sync(master_http_address)

    def _started_sync(self, master_http_address: str) -> SlaveSync:
        settings = self.settings
        sync = SlaveSync(
            master_http_address, self.metadata_store,
            interval_s=settings.slave_sync_interval_s, timeout_s=settings.slave_sync_timeout_s,
            auth_token=settings.master_auth_token, ca_file=settings.master_ca_file,
            broker_group=settings.broker_group,
            queue_max_offset=functools.partial(queue_max_offset, self.store),
            log_min_offset=lambda: self.store.min_offset,
            start_queues=functools.partial(start_queues, self.store),
            load_pops=lambda export: pop_snapshots.bootstrap(self.consumption, export),
            tables_in_the_log=True)
        sync.start()
        return sync

    def _start_leader_sync(self, member: DLedgerCommitLog) -> None:
        self.leader_sync = LeaderSync(
            member, lambda leader_id: leader_http_address(self.settings, leader_id),
            self._started_sync, self.writable_topics.clear, self._refill_idempotency,
            stepped_down=self._timers_stepped_down)
        self.leader_sync.start()

    def _refill_idempotency(self, term: int) -> bool:
        """A new leader learns the keys the previous one stored (a follower's window never
        saw them), once what it committed is dispatched; only then does it take writes in
        `term` (True): a retry with the same key is replayed here, not stored twice, and no
        receive is decided from states missing committed pop records. As a promotion does."""
        store = self.store
        if not dispatched_to_commit(store, _DISPATCH_WAIT_S):
            return False  # asked again at the next check
        # The window as the committed log gives it, in place of the one this member had: an
        # entry whose record a truncation removed (it led before, its tail was cut since)
        # must not answer a retry.
        window = self.idempotency
        fresh = IdempotencyWindow(self.settings.idempotency_window_s,
                                  self.settings.idempotency_keys_max)
        restored = rebuild(fresh, store)
        window.replace_entries(fresh)
        self._writable_term = term
        if self.timers is not None and self._timer_writer is not None:
            # Its log is committed up to its end as it took over, and dispatched: the
            # scheduler takes its cursors from that state (it checks dispatch once more).
            self._timer_writer.fence(term)
            self.timers.activate()
        log.info("dledger: leader of term %d takes writes (idempotency window: %d keys)", term,
                 restored)
        return True

    # -- failover by hand --------------------------------------------------------------------

    def promote(self, role: BrokerRole, *, force: bool) -> int:
        """Turn this slave into a master of `role`, in a new epoch; return that epoch.

        Refused while the master is still heard from (two masters would each take writes)
        unless `force`: the operator then takes the risk that the old master goes on
        acknowledging writes this broker will never have.
        """
        if role is BrokerRole.SLAVE:
            raise RoleChangeRefused("promote to SYNC_MASTER or ASYNC_MASTER, not SLAVE")
        with self._role_lock:
            if not self.is_running or not self.is_slave or self.dledger is not None:
                raise RoleChangeRefused(f"this broker is {self.describe_role()}, not a running "
                                        "slave (a DLedger group elects its leader)")
            assert self.replication is not None and self.replication.client is not None
            link = self.replication.client.view()
            heard_ms = link.last_read_age_ms
            if not force and link.connected:
                raise RoleChangeRefused(
                    f"the master at {link.master_address} is still connected (heard "
                    f"{heard_ms} ms ago); stop it first, or promote with force")
            if self.slave_sync is not None:
                self.slave_sync.stop()
                self.slave_sync = None
            self.replication.stop()
            self.store.change_role(role)
            config = dataclasses.replace(self.settings.to_ha_config(), broker_role=role,
                                         ha_master_address=None)
            self.replication = Replication(config, self.store)
            self.replication.start()
            self.role, self._is_slave = role, False
            rebuild(self.idempotency, self.store)
            if self.timers is not None:  # from what this log says was done (all dispatched)
                self.timers.activate()
            self._write_broker_file()
            assert self.replication.service is not None
            epoch = self.replication.service.epochs[-1]
            log.warning("PROMOTED to %s: epoch %d from offset %d (forced: %s)", role.value,
                        epoch.number, epoch.start_offset, force)
            return epoch.number

    def demote(self, master_ha_address: str, master_http_address: str) -> None:
        """Turn this master into a slave of another broker: pending replication waits fail,
        and the new master's epochs decide what of this log is kept."""
        with self._role_lock:
            if not self.is_running or self.is_slave or self.dledger is not None:
                raise RoleChangeRefused(f"this broker is {self.describe_role()}, not a running "
                                        "master (a DLedger group elects its leader)")
            config = dataclasses.replace(self.settings.to_ha_config(),
                                         broker_role=BrokerRole.SLAVE,
                                         ha_master_address=master_ha_address)
            assert self.replication is not None
            if self.timers is not None:
                self.timers.deactivate()
            self.replication.stop()
            self.store.change_role(BrokerRole.SLAVE)
            self.role, self._is_slave = BrokerRole.SLAVE, True
            self.master_ha_address = master_ha_address
            self.master_http_address = master_http_address
            self.replication = Replication(config, self.store)
            self.replication.start()
            self._start_slave_sync(master_http_address)
            self._write_broker_file()
            log.warning("DEMOTED to SLAVE of %s (%s)", master_ha_address, master_http_address)

    @property
    def is_running(self) -> bool:
        return self.state is BrokerState.RUNNING

    @property
    def is_slave(self) -> bool:
        """Whether writes go elsewhere: a classic SLAVE, or a DLedger member that does not
        lead now (its leader, if known, is `write_address()`)."""
        if self.dledger is not None:
            return not self.takes_dledger_writes
        return self._is_slave

    @property
    def takes_dledger_writes(self) -> bool:
        """DLedger mode: this member leads and has caught up as leader of this term (its
        idempotency window refilled: `_refill_idempotency`)."""
        assert self.dledger is not None
        term = self.dledger.leading_term()
        return term is not None and term == self._writable_term

    def write_address(self) -> str | None:
        """The HTTP address writes go to: the master's, or the current DLedger leader's."""
        if self.dledger is not None:
            return leader_http_address(self.settings, self.dledger.status().leader_id)
        return self.master_http_address

    @property
    def metadata_store(self) -> MetadataStore:
        assert self.metadata is not None, "the broker is not started"
        return self.metadata

    # -- topics ------------------------------------------------------------------------------

    def cached_write_queue_count(self, topic: str) -> int | None:
        return self.writable_topics.cached_queue_count(topic)

    def snapshot_if_due(self) -> bool:
        """The master's (a DLedger leader's) check: a metadata snapshot once
        metadata_snapshot_records_max records follow the last (MetadataSnapshots)."""
        if self.metadata is None or self.is_slave or self.state is not BrokerState.RUNNING:
            return False
        return self.metadata_snapshots.write_if_due(
            self.settings.metadata_snapshot_records_max)

    def _snapshot_for_retention(self) -> bool:
        """Retention reached the last metadata snapshot's file: a master (a DLedger leader)
        writes a newer one (True once dispatched); a slave (follower) waits for its master's."""
        if self.metadata is None or self.is_slave or self.state is not BrokerState.RUNNING:
            return False
        return self.metadata_snapshots.write()

    def _reset_metadata(self) -> None:
        """The log lost records the tables applied: empty them (the store feeds the records
        it still holds again), and forget the writable queue counts they gave."""
        self.metadata_store.reset_applied_state()
        self.consumption.reset()
        self.writable_topics.clear()

    def ensure_writable_topic(self, topic: str) -> int:
        """The topic's write queue count, creating it if allowed (WritableTopics.ensure)."""
        return self.writable_topics.ensure(topic)

    # -- rates -------------------------------------------------------------------------------

    def put_counts(self) -> dict[PutMessageStatus, int]:
        """Puts by status: the store's (classic), or the DLedger member's answers."""
        if self.dledger is not None:
            return dict(self.dledger.put_counts.by_status)
        return {PutMessageStatus.PUT_OK: self.store.put_ok_count, **self.store.put_counts}

    def put_bytes_total(self) -> int:
        if self.dledger is not None:
            return self.dledger.put_counts.stored_bytes_total
        return self.store.put_bytes_total

