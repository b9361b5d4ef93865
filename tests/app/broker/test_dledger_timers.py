"""The timer scheduler's DLedger writer, over a fake member: what it reports to the scheduler
for each answer, the term and the chain each put names, and the cases where it stops writing
in its term (an append past a refused one; an append not answered in time)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from app.broker.dledger_timers import DLedgerTimerWriter
from ha.dledger.host.append_future import AppendFuture
from store import Message, PutMessageResult, PutMessageStatus

OK = PutMessageStatus.PUT_OK
INDETERMINATE = PutMessageStatus.COMMIT_INDETERMINATE
BUSY = PutMessageStatus.OS_PAGE_CACHE_BUSY


@dataclass
class FakePut:
    status: PutMessageStatus | None  # None: never answered
    offset: int
    term: int | None
    after: FakePut | None
    future: AppendFuture[Any] = field(default_factory=AppendFuture)

    def __post_init__(self) -> None:
        if self.status is not None:
            self.future.set_result(self.status)

    def outcome(self) -> tuple[PutMessageResult, PutMessageStatus]:
        assert self.status is not None
        stored = self.status in (OK, INDETERMINATE)
        return PutMessageResult(self.status, 0, self.offset,
                                self.offset * 100 if stored else -1), self.status


@dataclass
class FakeMember:
    answers: list[PutMessageStatus | None]
    puts: list[FakePut] = field(default_factory=list)

    def put(self, message: Message, term: int | None = None,
            after: FakePut | None = None) -> FakePut:
        put = FakePut(self.answers[len(self.puts)], len(self.puts), term, after)
        self.puts.append(put)
        return put


def _writer(*answers: PutMessageStatus | None) -> tuple[DLedgerTimerWriter, FakeMember]:
    member = FakeMember(list(answers))
    fake: Any = member
    writer = DLedgerTimerWriter(fake, answer_wait_s=0.05)
    writer.fence(7)
    return writer, member


def _messages(count: int) -> list[Message]:
    return [Message("T", b"", {}, 0) for _ in range(count)]


def test_an_indeterminate_append_is_in_the_log_for_the_scheduler() -> None:
    """COMMIT_INDETERMINATE is appended in this term: PUT_OK to the scheduler (it moves on),
    the completion keeps what is known; each put names the term and the put before it."""
    writer, member = _writer(OK, INDETERMINATE)
    answers = writer(_messages(2))
    assert [(put.status, completion.result(0)) for put, completion in answers] == [
        (OK, OK), (OK, INDETERMINATE)]
    assert answers[1][0].commit_log_offset == 100
    assert [(put.term, put.after) for put in member.puts] == [(7, None), (7, member.puts[0])]
    assert writer.term == 7


def test_a_refusal_ends_the_prefix_and_the_writer_keeps_its_term() -> None:
    """A busy member refuses the rest of the run: the scheduler sees the prefix appended and
    tries again; the writer still writes in its term."""
    writer, _ = _writer(OK, BUSY, BUSY)
    assert [put.status for put, _ in writer(_messages(3))] == [OK, BUSY, BUSY]
    assert writer.term == 7


def test_an_append_past_a_refused_one_stops_the_term() -> None:
    """A hole (appended after a refused one): the scheduler's cursor cannot say so, so the
    writer writes nothing more in this term, and refuses without asking the member."""
    writer, member = _writer(OK, BUSY, OK)
    writer(_messages(3))
    assert writer.term is None
    refused = writer(_messages(2))
    assert [put.status for put, _ in refused] == [PutMessageStatus.SERVICE_NOT_AVAILABLE] * 2
    assert len(member.puts) == 3


def test_an_append_not_answered_in_time_stops_the_term() -> None:
    """No answer within answer_wait_s: it may be appended unseen, so nothing more is written
    in this term; a new term's fence writes again."""
    writer, member = _writer(None, OK)
    (answer,) = writer(_messages(1))
    assert answer[0].status is PutMessageStatus.SERVICE_NOT_AVAILABLE
    assert writer.term is None and writer.unanswered_total == 1
    writer.fence(8)
    assert [put.status for put, _ in writer(_messages(1))] == [OK]
    assert member.puts[-1].term == 8
