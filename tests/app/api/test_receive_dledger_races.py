"""Group consumption in DLedger mode, in process (a one-member group): the races between a
decision and what the member's host thread does meanwhile. A decision plans from the states
and applies its record to them once the record is encoded; the host thread may rebuild the
states in between (a record the disk refused after it was encoded, a cut by a next leader's
log). Each race is forced by a seam around the appender or the member's puts, never by a
sleep: the states then hold only what the group's log holds, no record follows one the disk
refused into the log, and a client gets a refusal, never a 500."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from app.broker.dledger_consumption import DLedgerPopAppender
from ha.dledger.commit_log import DLedgerPut
from store import Message, PutCompletion, PutMessageResult, PutMessageStatus
from store.consumption.events import Candidate
from store.consumption.policy import RetryPolicy
from store.consumption.records import PopRecord, QueueKey, decode, is_pop_op
from store.consumption.tags import TagFilter
from store.status import AppendRawStatus
from store.system_topics import METADATA_TOPIC, PROPERTY_OP
from tests.app.api.test_dledger_metadata import _leading
from tests.app.api.test_receive import _ack, _receive, _setup
from tests.support.app import Served
from tests.support.store import wait_dispatched

pytestmark = pytest.mark.anyio

_POP = {"pop_invisible_ms_min": 1_000, "pop_expiry_interval_ms": 60_000,
        "pop_expiry_gap_ms": 60_000}
_WAIT_S = 10.0


def _pop_records(served: Served) -> list[PopRecord]:
    """The pop records of the member's committed log, decoded, in log order."""
    store = served.broker.store
    wait_dispatched(store)
    records = store.get_messages(METADATA_TOPIC, 0, 0, 10_000).messages
    return [decode(record.body) for record in records
            if is_pop_op(record.properties.get(PROPERTY_OP, ""))]


def _refuse_next_write(served: Served, monkeypatch: pytest.MonkeyPatch) -> None:
    """The member's disk refuses the next entry it writes (after its record was encoded)."""
    member = served.broker.dledger
    assert member is not None
    store = member.storage.store
    real_write = store.write_entry_record
    refusals = [AppendRawStatus.STORE_NOT_WRITABLE]

    def write_entry_record(position: int, records: bytes) -> AppendRawStatus:
        return refusals.pop() if refusals else real_write(position, records)

    monkeypatch.setattr(store, "write_entry_record", write_entry_record)


def _state(served: Served, group: str, topic: str) -> tuple[int, int] | None:
    """(scan offset, messages in flight) of queue 0's state, None when there is none."""
    state = served.broker.consumption.registry.state(QueueKey(group, topic, 0))
    return None if state is None else (state.scan_offset, state.in_flight_count)


async def test_a_record_the_disk_refused_is_not_applied_after_the_rebuild(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The disk refuses a receive's record after it was encoded; the member learns it (the
    states are rebuilt from the committed log, the term decides nothing more) before the
    decision applies the record: the record is not applied to the rebuilt states (they would
    hold m1 in flight under a record no log holds). The receive is refused, not a 500."""
    async with _leading(tmp_path, **_POP) as served:
        group, topic = await _setup(served, queues=1, messages=[{"body": "m0"}, {"body": "m1"}])
        [first] = await _receive(served, group, topic, max_messages=1)  # (topics created)
        assert first["body"] == "m0"
        consumption = served.broker.consumption
        appender = consumption.appender
        assert isinstance(appender, DLedgerPopAppender)

        def answered_first(messages: Sequence[Message]
                           ) -> list[tuple[PutMessageResult, PutCompletion]]:
            answers = appender(messages)
            for _, completion in answers:  # the host thread answered (and rebuilt) first
                completion.result(_WAIT_S)
            return answers

        consumption.appender = answered_first
        _refuse_next_write(served, monkeypatch)
        before = len(_pop_records(served))
        response = await served.client.post(
            f"/v1/groups/{group}/topics/{topic}/messages:receive",
            json={"invisible_ms": 10_000, "body_encoding": "utf8"})
        assert response.status_code == 503, response.text
        assert response.json()["error_code"] == "SERVICE_NOT_AVAILABLE"
        assert len(_pop_records(served)) == before  # nothing written
        assert _state(served, group, topic) == (1, 1)  # as the committed log says
        assert consumption.stale_applies_skipped == 1
        metrics = (await served.client.get("/metrics")).text
        assert "twinlog_pop_stale_applies_skipped_total 1.0" in metrics


async def test_no_record_decided_from_one_the_disk_refused_follows_it_into_the_log(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The disk refuses receive A's record (m1) after it was encoded; before the member
    answers it, receive B is decided from the states holding A's record (m1 in flight: B
    takes m2) and put. B's record must not be written after the refusal: every member's
    dispatch would apply it to states without A's (m1 lost, or a receive skipping an
    offset). B is refused too, and the states are as the committed log gives them."""
    async with _leading(tmp_path, **_POP) as served:
        group, topic = await _setup(served, queues=1, messages=[
            {"body": "m0"}, {"body": "m1"}, {"body": "m2"}])
        await _receive(served, group, topic, max_messages=1)  # m0 (the topics created)
        before = len(_pop_records(served))
        member = served.broker.dledger
        assert member is not None
        store = member.storage.store
        real_write = store.write_entry_record
        real_put = member.put
        b_put = threading.Event()
        puts: list[DLedgerPut] = []

        def put(*args: Any, **kwargs: Any) -> DLedgerPut:
            made = real_put(*args, **kwargs)
            puts.append(made)
            if len(puts) == 2:
                b_put.set()
            return made

        writes = 0

        def write_entry_record(position: int, records: bytes) -> AppendRawStatus:
            nonlocal writes
            writes += 1
            if writes == 1:  # A's entry: refused once B was put (the host thread waits)
                assert b_put.wait(_WAIT_S), "receive B was not put"
                return AppendRawStatus.STORE_NOT_WRITABLE
            return real_write(position, records)

        monkeypatch.setattr(member, "put", put)
        monkeypatch.setattr(store, "write_entry_record", write_entry_record)
        path = f"/v1/groups/{group}/topics/{topic}/messages:receive"
        document = {"invisible_ms": 10_000, "max_messages": 1, "body_encoding": "utf8"}
        receive_a = asyncio.ensure_future(served.client.post(path, json=document))
        for _ in range(10_000):  # A decided and put (its decision runs on this loop)
            if puts:
                break
            await asyncio.sleep(0)
        assert puts, "receive A was not put"
        receive_b = asyncio.ensure_future(served.client.post(path, json=document))
        answer_a, answer_b = await asyncio.wait_for(asyncio.gather(receive_a, receive_b),
                                                    _WAIT_S)
        assert len(puts) == 2
        assert answer_a.status_code == 503, answer_a.text
        assert answer_b.status_code == 503, answer_b.text
        assert len(_pop_records(served)) == before
        assert served.broker.store.dispatch.failures.held_position is None
        monkeypatch.undo()
        assert _state(served, group, topic) == (1, 1)


class _WatchedLock:
    """An RLock that says when the watched thread starts waiting for it while another holds
    it (the seam that lets a test go on once that thread is blocked on the lock)."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self.waiting = threading.Event()
        self.watched: int | None = None
        self._owner: int | None = None

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        me = threading.get_ident()
        if me == self.watched and self._owner not in (None, me):
            self.waiting.set()
        taken = self._lock.acquire(blocking, timeout)
        if taken:
            self._owner = threading.get_ident()
        return taken

    def release(self) -> None:
        self._lock.release()
        if not self._lock._is_owned():  # type: ignore[attr-defined]
            self._owner = None

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *_: object) -> None:
        self.release()


@pytest.fixture
def cut_while_planning(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """Patch the consumption's reads: while a receive plans (after its read of candidates)
    the host thread runs the cut it is given (`(on_cut, offset, lock)`), and the decision
    goes on once that cut is done or waits for the state lock. The cut's end is then
    appended to the list (an Event: the decision may finish before the cut takes the lock)."""
    given: list[Any] = []
    import app.broker.consumption as consumption_module

    real_candidates = consumption_module.candidates

    def candidates(*args: Any, **kwargs: Any) -> Any:
        reads = real_candidates(*args, **kwargs)
        if given:
            on_cut, offset, lock = given.pop()
            done = threading.Event()

            def cut() -> None:
                lock.watched = threading.get_ident()
                try:
                    on_cut(offset)
                finally:
                    done.set()

            threading.Thread(target=cut).start()
            for _ in range(int(_WAIT_S * 1000)):  # bounded: the cut is done, or it waits
                if done.wait(0.001) or lock.waiting.is_set():
                    break
            else:
                raise AssertionError("the cut neither ran nor waited for the state lock")
            given.append(done)
        return reads

    monkeypatch.setattr(consumption_module, "candidates", candidates)
    yield given


async def test_a_cut_while_a_receive_plans_gives_no_500(
        tmp_path: Path, cut_while_planning: list[Any]) -> None:
    """A receive plans from states holding m1 in flight under a record applied ahead of the
    commit; a next leader's log cuts that record while the receive plans (the states are
    rebuilt: m1 is waiting again) and the receive's own record was encoded, then cut too.
    The decision must not apply its record to the rebuilt states (it skips offsets there:
    a 500 before), and the states stay as the committed log gives them."""
    async with _leading(tmp_path, **_POP) as served:
        group, topic = await _setup(served, queues=1,
                                    messages=[{"body": f"m{n}"} for n in range(3)])
        broker = served.broker
        consumption = broker.consumption
        member = broker.dledger
        assert member is not None
        [first] = await _receive(served, group, topic, max_messages=1)
        assert (await _ack(served, group, topic, [first["receipt_handle"]])).status_code == 200
        wait_dispatched(broker.store)
        key = QueueKey(group, topic, 0)
        state = consumption.registry.state(key)
        assert state is not None and state.scan_offset == 1
        # m1 in flight under a record applied ahead that no log will keep.
        event = state.plan_receive(now_ms=consumption.clock_ms(), max_messages=1,
                                   invisible_ms=60_000, candidates=[Candidate(1)],
                                   tag_filter=TagFilter.parse("*"), policy=RetryPolicy())
        lock = _WatchedLock()
        consumption.state_lock = lock  # type: ignore[assignment]
        with lock:
            consumption.registry.apply(PopRecord(key, (event,), consumption.clock_ms()))
        appender = consumption.appender
        assert isinstance(appender, DLedgerPopAppender)
        end = broker.store.max_offset
        appender.ahead_end_offset = end + 200  # as if appended there

        def cut_record(messages: Sequence[Message]
                       ) -> list[tuple[PutMessageResult, PutCompletion]]:
            # Encoded at the log's end, then cut with it (the next leader lacks both).
            indeterminate = PutCompletion.done(PutMessageStatus.COMMIT_INDETERMINATE)
            return [(PutMessageResult(PutMessageStatus.PUT_OK), indeterminate)] * len(messages)

        consumption.appender = cut_record
        on_cut = member.storage.log.on_cut
        assert on_cut is not None
        cut_while_planning.append((on_cut, end, lock))
        response = await served.client.post(
            f"/v1/groups/{group}/topics/{topic}/messages:receive",
            json={"invisible_ms": 10_000, "body_encoding": "utf8", "max_messages": 1})
        assert response.status_code == 202, response.text
        cut_done = cut_while_planning.pop()
        assert cut_done.wait(_WAIT_S)  # the lock is not fair: the decision may end first
        assert _state(served, group, topic) == (1, 0)  # as the committed log says
        consumption.appender = appender
        again = await _receive(served, group, topic, max_messages=4)
        assert [(item["body"], item["delivery_attempt"]) for item in again] == [
            ("m1", 1), ("m2", 1)]


async def test_a_leader_takes_no_writes_before_its_dispatch_reaches_its_commit(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A leader taking over decides receives from the states dispatch gave it: while its
    dispatch is behind its commit (here: held still, a receive's committed record not
    dispatched) they lack committed pop records, and a receive would hand out again what
    the previous leader handed out. It takes no writes then (it did after a 2 s wait), and
    does once dispatch caught up."""
    import app.broker.broker as broker_module

    async with _leading(tmp_path, **_POP) as served:
        group, topic = await _setup(served, queues=1, messages=[{"body": "m0"}, {"body": "m1"}])
        await _receive(served, group, topic, max_messages=1)  # (the topics created)
        broker = served.broker
        store = broker.store
        assert broker.dledger is not None
        term = broker.dledger.leading_term()
        assert term is not None
        held, release = threading.Event(), threading.Event()

        def hold() -> int:
            held.set()
            release.wait(_WAIT_S)
            return 0

        holder = threading.Thread(target=store.dispatch.hold_still, args=(hold,))
        holder.start()
        try:
            assert held.wait(_WAIT_S)
            [second] = await _receive(served, group, topic, max_messages=1)  # committed
            assert second["body"] == "m1"
            assert store.dispatch.dispatched_offset < (store.commit_limit or 0)
            monkeypatch.setattr(broker_module, "_DISPATCH_WAIT_S", 0.05)
            broker._writable_term = None  # as at a take-over, before it is caught up
            assert broker._refill_idempotency(term) is False
            assert not broker.takes_dledger_writes
            refused = await served.client.post(
                f"/v1/groups/{group}/topics/{topic}/messages:receive",
                json={"invisible_ms": 10_000})
            assert refused.status_code == 503, refused.text
            assert refused.json()["error_code"] == "NOT_LEADER"
        finally:
            release.set()
            holder.join(_WAIT_S)
        wait_dispatched(store)
        assert broker._refill_idempotency(term) is True
        assert broker.takes_dledger_writes
        assert await _receive(served, group, topic) == []  # m0 and m1 in flight
