"""The one mapping table: every store status and metadata error has an HTTP answer."""

from __future__ import annotations

import json

import pytest

from app.errors import PROBLEMS, PUT_HTTP_STATUS, ApiError, from_metadata_error, render
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
