"""The one mapping table: every store status and metadata error has an HTTP answer."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from app.api.errors import (
    PROBLEMS,
    PUT_HTTP_STATUS,
    ApiError,
    code_for_http_status,
    from_metadata_error,
    from_put_status,
    render,
)
from store import PutMessageStatus
from store.metadata import MetadataError, TopicNotFound


def _subclasses(cls: type[MetadataError]) -> list[type[MetadataError]]:
    found = []
    for sub in cls.__subclasses__():
        found.append(sub)
        found.extend(_subclasses(sub))
    return found


def test_every_put_status_is_mapped() -> None:
    """Stored statuses answer 201/202; every other status is an error code >= 400."""
    for status in PutMessageStatus:
        code = PUT_HTTP_STATUS[status]
        assert (code in (201, 202)) is status.is_stored, status
    assert PUT_HTTP_STATUS[PutMessageStatus.PUT_OK] == 201
    assert PUT_HTTP_STATUS[PutMessageStatus.OS_PAGE_CACHE_BUSY] == 429
    assert PUT_HTTP_STATUS[PutMessageStatus.SERVICE_NOT_AVAILABLE] == 503
    assert PUT_HTTP_STATUS[PutMessageStatus.CREATE_MAPPED_FILE_FAILED] == 507
    assert PUT_HTTP_STATUS[PutMessageStatus.UNKNOWN_ERROR] == 500


@pytest.mark.parametrize("error_class", _subclasses(MetadataError))
def test_every_metadata_error_is_mapped(error_class: type[MetadataError]) -> None:
    """Each MetadataError's error_code is in the table, as a client error (4xx)."""
    assert error_class.error_code in PROBLEMS
    assert 400 <= PROBLEMS[error_class.error_code].http_status < 500


def test_problem_body_and_retry_after() -> None:
    """A busy answer is 429 with Retry-After and the put status named in the body."""
    problem = render(ApiError("OS_PAGE_CACHE_BUSY", "busy",
                              put_status=PutMessageStatus.OS_PAGE_CACHE_BUSY), "/v1/x")
    document = json.loads(problem.body)
    assert problem.http_status == 429
    assert (b"retry-after", b"1") in problem.headers
    assert (b"content-type", b"application/problem+json") in problem.headers
    assert document == {"type": "urn:twinlog:problem:os-page-cache-busy",
                        "title": PROBLEMS["OS_PAGE_CACHE_BUSY"].title, "status": 429,
                        "detail": "busy", "error_code": "OS_PAGE_CACHE_BUSY",
                        "instance": "/v1/x", "put_status": "OS_PAGE_CACHE_BUSY"}


def test_metadata_error_keeps_its_message() -> None:
    """A metadata refusal keeps its code and message."""
    error = from_metadata_error(TopicNotFound("topic 'x' does not exist"))
    assert (error.code, error.http_status, error.detail) == (
        "TOPIC_NOT_FOUND", 404, "topic 'x' does not exist")


# RocketMQ's put statuses as HTTP answers: 201 stored with every guarantee met; 202 stored but
# a guarantee (flush, slave) not met, so a client must not read it as durable; refusals 4xx/5xx.
PUT_ANSWERS = {
    PutMessageStatus.PUT_OK: 201,
    PutMessageStatus.FLUSH_DISK_TIMEOUT: 202,
    PutMessageStatus.FLUSH_SLAVE_TIMEOUT: 202,
    PutMessageStatus.SLAVE_NOT_AVAILABLE: 202,
    PutMessageStatus.MESSAGE_ILLEGAL: 400,
    PutMessageStatus.PROPERTIES_SIZE_EXCEEDED: 413,
    PutMessageStatus.OS_PAGE_CACHE_BUSY: 429,
    PutMessageStatus.SERVICE_NOT_AVAILABLE: 503,
    PutMessageStatus.CREATE_MAPPED_FILE_FAILED: 507,
    PutMessageStatus.UNKNOWN_ERROR: 500,
    PutMessageStatus.IN_SYNC_REPLICAS_NOT_ENOUGH: 503,
    # DLedger mode: appended on the leader, its commit unknown (may still commit or be lost).
    PutMessageStatus.COMMIT_INDETERMINATE: 202,
}


@pytest.mark.parametrize(("status", "http_status"), list(PUT_ANSWERS.items()))
def test_each_put_status_has_its_http_status(
        status: PutMessageStatus, http_status: int) -> None:
    """Each put status answers its documented HTTP status, on the hot path and in a problem."""
    assert PUT_HTTP_STATUS[status] == http_status
    assert from_put_status(status, "").http_status == http_status
    assert set(PUT_ANSWERS) == set(PutMessageStatus)


def test_only_the_busy_answer_asks_to_retry_later() -> None:
    """Retry-After goes with the busy answers (OS_PAGE_CACHE_BUSY, TOO_MANY_CONNECTIONS,
    LONG_POLL_BUSY, TIMER_CANCELS_MAX_REACHED, the group consumption bounds), a DLedger
    follower's NOT_LEADER and a broker whose tables trail its log (METADATA_CATCHING_UP)
    only; WWW-Authenticate with 401 only."""
    busy = {"OS_PAGE_CACHE_BUSY", "TOO_MANY_CONNECTIONS", "LONG_POLL_BUSY", "NOT_LEADER",
            "TIMER_CANCELS_MAX_REACHED", "POP_IN_FLIGHT_MAX_REACHED",
            "POP_QUEUE_STATES_MAX_REACHED", "METADATA_CATCHING_UP"}
    for code, kind in PROBLEMS.items():
        headers = dict(render(ApiError(code, "d")).headers)
        assert (b"retry-after" in headers) is (code in busy), code
        assert (b"www-authenticate" in headers) is (kind.http_status == 401), code
    unauthorized = dict(render(ApiError("UNAUTHORIZED", "no token")).headers)
    assert unauthorized[b"www-authenticate"] == b'Bearer realm="twinlog"'


def test_problem_body_leaves_out_what_is_not_known() -> None:
    """Without an instance or a put status, and with extension members that are None, the
    body has only the members that carry something."""
    problem = render(ApiError("QUEUE_NOT_FOUND", "no queue 9", queue_id=9, hint=None))
    assert problem.http_status == 404
    assert json.loads(problem.body) == {
        "type": "urn:twinlog:problem:queue-not-found", "title": "No such queue",
        "status": 404, "detail": "no queue 9", "error_code": "QUEUE_NOT_FOUND", "queue_id": 9}


def test_put_refusal_detail_defaults_to_the_title() -> None:
    """A put refusal without a detail says the code's title; with one, it says the detail; both
    name the put status and keep extension members."""
    bare = from_put_status(PutMessageStatus.SERVICE_NOT_AVAILABLE, "", retry=True)
    assert bare.detail == PROBLEMS["SERVICE_NOT_AVAILABLE"].title
    assert bare.put_status is PutMessageStatus.SERVICE_NOT_AVAILABLE and bare.extra == {
        "retry": True}
    told = from_put_status(PutMessageStatus.MESSAGE_ILLEGAL, "topic too long")
    assert (told.code, told.detail, told.http_status) == ("MESSAGE_ILLEGAL", "topic too long",
                                                          400)


def test_unknown_codes_are_refused_or_mapped_to_a_generic_one() -> None:
    """ApiError takes only codes of the table; a metadata error with a code outside it
    answers METADATA_ERROR (400) with its message."""
    with pytest.raises(AssertionError):
        ApiError("NO_SUCH_CODE", "x")

    class Strange(MetadataError):
        error_code = "STRANGE"

    error = from_metadata_error(Strange("odd"))
    assert (error.code, error.http_status, error.detail) == ("METADATA_ERROR", 400, "odd")


@pytest.mark.parametrize(
    ("http_status", "code"),
    [
        (400, "VALIDATION_FAILED"), (401, "UNAUTHORIZED"), (403, "FORBIDDEN"),
        (404, "NOT_FOUND"), (405, "METHOD_NOT_ALLOWED"), (413, "REQUEST_TOO_LARGE"),
        (415, "UNSUPPORTED_MEDIA_TYPE"), (503, "NOT_READY"), (422, "VALIDATION_FAILED"),
        (499, "VALIDATION_FAILED"), (500, "INTERNAL_ERROR"), (502, "INTERNAL_ERROR"),
        (399, "INTERNAL_ERROR"),
    ],
)
def test_framework_statuses_map_to_gateway_codes(http_status: int, code: str) -> None:
    """A bare status raised by the framework becomes a gateway code: the known ones by name,
    other 4xx VALIDATION_FAILED, anything else INTERNAL_ERROR."""
    assert code_for_http_status(http_status) == code
    assert code in PROBLEMS


@pytest.mark.parametrize("http_status", [400, 401, 403, 404, 405, 413, 415, 503])
def test_a_framework_status_keeps_its_status(http_status: int) -> None:
    """A bare status the framework raises (405 for a wrong method, ...) is answered with that
    same status: its gateway code's problem carries it."""
    assert PROBLEMS[code_for_http_status(http_status)].http_status == http_status


ROOT = Path(__file__).resolve().parents[3]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# "431 `REQUEST_HEADERS_TOO_LARGE`", "202 (`FLUSH_SLAVE_TIMEOUT`": a status the docs tell a
# client to expect with a code.
DOCUMENTED_ANSWER = re.compile(r"\b([1-5]\d\d)\b[^|\n`]{0,3}`([A-Z][A-Z_]{3,})`")


def _documented_answers() -> list[tuple[str, int, str]]:
    answers = []
    for path in DOCS:
        for status, code in DOCUMENTED_ANSWER.findall(path.read_text(encoding="utf-8")):
            if code in PROBLEMS:
                answers.append((path.name, int(status), code))
    return answers


def test_the_docs_name_each_code_with_the_status_it_answers() -> None:
    """Where the README or docs/ say a code comes with an HTTP status (the gateway limits'
    431 and 408, the produce answers, ...), the table answers that status."""
    answers = _documented_answers()
    assert {"REQUEST_HEADERS_TOO_LARGE", "REQUEST_TIMEOUT", "TOO_MANY_CONNECTIONS"} <= {
        code for _, _, code in answers}
    wrong = [(name, status, code, PROBLEMS[code].http_status)
             for name, status, code in answers if PROBLEMS[code].http_status != status]
    assert wrong == []


def test_the_problem_bodies_the_api_docs_show_are_what_the_broker_renders() -> None:
    """Each problem+json example in docs/http-api.md is, member for member, what the broker
    renders for its code, detail and instance (type, title and status included)."""
    examples = [json.loads(line) for line in
                (ROOT / "docs" / "http-api.md").read_text(encoding="utf-8").splitlines()
                if line.startswith('{"type":"urn:twinlog:problem:')]
    assert len(examples) >= 5
    for example in examples:
        put_status = example.get("put_status")  # a refused produce names it
        members = {"type", "title", "status", "detail", "error_code", "instance", "put_status"}
        extra = {name: value for name, value in example.items() if name not in members}
        error = ApiError(example["error_code"], example["detail"],
                         put_status=PutMessageStatus(put_status) if put_status else None,
                         **extra)  # extension members (a refused ack's results)
        assert json.loads(render(error, example.get("instance")).body) == example
