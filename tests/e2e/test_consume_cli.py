"""The consume-side CLI (`twinlog message get|find`, `topic update|delete`, `group
delete|reset --timestamp`) against a real `twinlog serve`: output, and for bad input one line
on stderr with an exit code that says what failed."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.e2e.conftest import BrokerProcess, Launcher
from tests.e2e.test_admin_cli import TOKEN, ok, one_error_line, twinlog


@pytest.fixture(scope="module")
def broker(launch: Launcher) -> Iterator[BrokerProcess]:
    tokens = {"TWINLOG_AUTH_TOKENS": json.dumps({TOKEN: ["produce", "consume", "admin"]})}
    yield launch("consume-cli", "ASYNC_MASTER", environment=tokens)


def _produce(url: str, topic: str, *lines: str, key: str = "k") -> list[str]:
    """Produce `lines` with `key`; return their msg ids."""
    produced = ok(twinlog(url, "produce", topic, "--key", key,
                          stdin="\n".join(lines).encode() + b"\n")).splitlines()
    return [line.split()[1] for line in produced]


def test_message_get(broker: BrokerProcess) -> None:
    """`message get` prints a message's fields by its id; an unknown id exits 4, a malformed
    one exits 1, each with one line."""
    (msg_id,) = _produce(broker.url, "CliGet", "the body")
    shown = ok(twinlog(broker.url, "message", "get", msg_id))
    assert f"msg_id               {msg_id}" in shown and "body                 the body" in shown
    as_json = json.loads(ok(twinlog(broker.url, "message", "get", msg_id, "--json")))
    assert as_json["topic"] == "CliGet"
    unknown = msg_id[:16] + "00000000FFFFFFFF"
    assert "404 MESSAGE_NOT_FOUND" in one_error_line(
        twinlog(broker.url, "message", "get", unknown), 4)
    assert "400 INVALID_MESSAGE_ID" in one_error_line(
        twinlog(broker.url, "message", "get", "xyz"), 1)
