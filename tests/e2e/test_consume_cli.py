"""The consume-side CLI (`twinlog message get|find`, `topic update|delete`, `group
delete|reset --timestamp`) against a real `twinlog serve`: output, and for bad input one line
on stderr with an exit code that says what failed."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest

from tests.e2e.test_admin_cli import TOKEN, ok, one_error_line, twinlog
from tests.support.brokers import BrokerProcess, Launcher

pytestmark = pytest.mark.processes


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
    """`message get` prints a message's fields by its id as a person reads them (no Python
    reprs: "-" for no tags, keys as produce takes them, times in ISO 8601 UTC with the ms);
    an unknown id exits 4, a malformed one exits 1, each with one line."""
    (msg_id,) = _produce(broker.url, "CliGet", "the body", key="order-1")
    shown = ok(twinlog(broker.url, "message", "get", msg_id))
    assert f"msg_id               {msg_id}" in shown and "body                 the body" in shown
    fields = dict(line.split(None, 1) for line in shown.splitlines())
    assert fields["tags"] == "-" and fields["keys"] == "order-1", fields
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", fields["store_time"]), fields
    assert "None" not in shown and "[" not in shown and "{" not in shown, shown
    as_json = json.loads(ok(twinlog(broker.url, "message", "get", msg_id, "--json")))
    assert as_json["topic"] == "CliGet"
    unknown = msg_id[:16] + "00000000FFFFFFFF"
    assert "404 MESSAGE_NOT_FOUND" in one_error_line(
        twinlog(broker.url, "message", "get", unknown), 4)
    assert "400 INVALID_MESSAGE_ID" in one_error_line(
        twinlog(broker.url, "message", "get", "xyz"), 1)


def test_topic_update_and_delete(broker: BrokerProcess) -> None:
    """`topic update` grows the queues and sets the permission; shrinking exits 1 with the
    broker's reason; `topic delete` removes it (describe then exits 4), an unknown one too."""
    url = broker.url
    ok(twinlog(url, "topic", "create", "CliAdmin", "--queues", "2"))
    assert "updated CliAdmin: 4 read / 4 write queues, r" in ok(twinlog(
        url, "topic", "update", "CliAdmin", "--read-queues", "4", "--write-queues", "4",
        "--perm", "4"))
    assert "409 QUEUE_COUNT_SHRINKS" in one_error_line(
        twinlog(url, "topic", "update", "CliAdmin", "--write-queues", "1"), 1)
    one_error_line(twinlog(url, "topic", "update", "CliAdmin"), 2)
    assert "deleted CliAdmin" in ok(twinlog(url, "topic", "delete", "CliAdmin"))
    one_error_line(twinlog(url, "topic", "describe", "CliAdmin"), 4)
    assert "TOPIC_NOT_FOUND" in one_error_line(twinlog(url, "topic", "delete", "CliAdmin"), 4)


def test_group_delete_and_reset_to_a_time(broker: BrokerProcess) -> None:
    """`group reset --timestamp` moves each queue to its first message stored at or after
    the time (0: the first message, the future: the end); `group delete` removes the group,
    a second delete exits 4."""
    url = broker.url
    ok(twinlog(url, "topic", "create", "CliTimes", "--queues", "1"))
    _produce(url, "CliTimes", "a", "b", "c")
    earliest = json.loads(ok(twinlog(url, "group", "reset", "cli-times", "--topic", "CliTimes",
                                     "--timestamp", "0", "--json")))
    assert [o["offset"] for o in earliest["offsets"]] == [0]
    future = ok(twinlog(url, "group", "reset", "cli-times", "--topic", "CliTimes",
                        "--timestamp", "2100-01-01T00:00:00"))
    assert future.splitlines()[1].split() == ["CliTimes", "0", "3"]
    bad_time = twinlog(url, "group", "reset", "cli-times", "--topic", "CliTimes",
                       "--timestamp", "yesterday")
    assert bad_time.returncode == 2 and "neither epoch milliseconds" in bad_time.stderr
    assert "deleted cli-times" in ok(twinlog(url, "group", "delete", "cli-times"))
    assert "GROUP_NOT_FOUND" in one_error_line(twinlog(url, "group", "delete", "cli-times"), 4)


def test_message_find_by_key(broker: BrokerProcess) -> None:
    """`message find` lists a topic's messages with a key, newest first; an unknown topic
    exits 4 with one line."""
    url = broker.url
    ids = _produce(url, "CliKeys", "first", "second", key="order-9")
    _produce(url, "CliKeys", "unrelated", key="order-10")
    table = ok(twinlog(url, "message", "find", "--topic", "CliKeys", "--key", "order-9"))
    rows = table.splitlines()
    assert rows[0].split() == ["MSG_ID", "QUEUE", "OFFSET", "STORE_TIME", "BODY"]
    assert [row.split()[0] for row in rows[1:]] == ids[::-1]
    assert [row.split()[-1] for row in rows[1:]] == ["second", "first"]
    found = json.loads(ok(twinlog(url, "message", "find", "--topic", "CliKeys", "--key",
                                  "order-9", "--max-messages", "1", "--json")))
    assert [m["msg_id"] for m in found["messages"]] == ids[-1:]
    assert "TOPIC_NOT_FOUND" in one_error_line(
        twinlog(url, "message", "find", "--topic", "NoSuchTopic", "--key", "k"), 4)


def test_produce_delayed_then_timers_and_cancel(broker: BrokerProcess) -> None:
    """`produce --delay-ms` prints when each message is due; `timers` shows them pending on
    their lane; `message cancel` cancels one (a second cancel says it was already), a plain
    message's id exits 4; a bad --deliver-at exits 2 naming it."""
    url = broker.url
    produced = ok(twinlog(url, "produce", "CliLater", "--delay-ms", "600000",
                          stdin=b"first\nsecond\n")).splitlines()
    assert len(produced) == 2 and all(" due 20" in line for line in produced), produced
    shown = ok(twinlog(url, "timers"))
    assert "pending     2 (0 on delay levels, 2 timers)" in shown, shown
    assert re.search(r"^T:12\s+-\s+409600\s+2\s", shown, re.MULTILINE), shown
    msg_id = produced[0].split()[1]
    assert "cancelled " + msg_id + " to CliLater" in ok(twinlog(url, "message", "cancel",
                                                                msg_id))
    assert "(already cancelled)" in ok(twinlog(url, "message", "cancel", msg_id))
    (plain,) = _produce(url, "CliNow", "now")
    assert "404 NOT_A_SCHEDULED_MESSAGE" in one_error_line(
        twinlog(url, "message", "cancel", plain), 4)
    bad = twinlog(url, "produce", "CliLater", "--deliver-at", "tomorrow", stdin=b"x\n")
    assert bad.returncode == 2 and "'tomorrow' is neither epoch milliseconds" in bad.stderr
    as_json = json.loads(ok(twinlog(url, "timers", "--json")))
    assert as_json["cancels_pending"] == 1 and as_json["pending_timers"] == 2


def test_group_create_and_update_set_the_retry_policy(broker: BrokerProcess) -> None:
    """`group create|update --retry-max --backoff` set a group's retry policy; describe and
    list show it; `--backoff default` gives the broker's back; a bad backoff exits 2 before
    any request, one the broker refuses exits 1 with its reason."""
    url = broker.url
    assert "created CliPolicy: at most 16 retries, backoff exponential:2000:3:60000" in ok(
        twinlog(url, "group", "create", "CliPolicy", "--backoff", "exponential:2000:3:60000"))
    assert "updated CliPolicy: at most 4 retries, backoff table" in ok(twinlog(
        url, "group", "update", "CliPolicy", "--retry-max", "4", "--backoff", "table"))
    assert "at most 4 retries, backoff table" in ok(
        twinlog(url, "group", "describe", "CliPolicy"))
    described = json.loads(ok(twinlog(url, "group", "describe", "CliPolicy", "--json")))
    assert described["group"]["backoff"] == {"policy": "table", "initial_ms": None,
                                             "multiplier": None, "max_ms": None}
    assert "backoff default" in ok(
        twinlog(url, "group", "update", "CliPolicy", "--backoff", "default"))
    [row] = [line for line in ok(twinlog(url, "group", "list")).splitlines()
             if line.startswith("CliPolicy ")]
    assert row.split()[-3:] == ["4", "default", "no"], row
    one_error_line(twinlog(url, "group", "update", "CliPolicy", "--backoff", "levels"), 2)
    one_error_line(twinlog(url, "group", "update", "CliPolicy"), 2)
    assert "400 VALIDATION_FAILED" in one_error_line(twinlog(
        url, "group", "update", "CliPolicy", "--backoff", "exponential:9000:2:7200001"), 1)


def test_group_create_and_update_set_fifo(broker: BrokerProcess) -> None:
    """`group create --fifo` makes a FIFO group (create, describe and list say so); `group
    update --no-fifo` turns it off, `--fifo` on again; the flag alone is an update."""
    url = broker.url
    assert "created CliFifo: FIFO, at most 16 retries, backoff default" in ok(
        twinlog(url, "group", "create", "CliFifo", "--fifo"))
    assert "FIFO, at most" in ok(twinlog(url, "group", "describe", "CliFifo"))
    [row] = [line for line in ok(twinlog(url, "group", "list")).splitlines()
             if line.startswith("CliFifo ")]
    assert row.split()[-1] == "yes", row
    assert "updated CliFifo: at most 16 retries" in ok(
        twinlog(url, "group", "update", "CliFifo", "--no-fifo"))
    described = json.loads(ok(twinlog(url, "group", "describe", "CliFifo", "--json")))
    assert described["group"]["fifo"] is False
    assert "updated CliFifo: FIFO," in ok(twinlog(url, "group", "update", "CliFifo", "--fifo"))
