"""Delayed messages across kill -9 and failover (real `twinlog serve` processes): every due
message is in its topic exactly once, none before its due time, none lost."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from tests.support.brokers import BrokerProcess, Launcher, caught_up, read_queues
from tests.support.processes import wait_for

pytestmark = pytest.mark.processes  # real `twinlog serve` masters and slaves

MESSAGE_COUNT = 60


def _produce_delayed(broker: BrokerProcess, topic: str, count: int) -> dict[str, int]:
    """`count` delayed messages due over about 4 s (timers and level 1), by body -> due."""
    due: dict[str, int] = {}
    for number in range(count):
        delay: dict[str, int] = ({"delay_level": 1} if number % 5 == 0
                                 else {"delay_ms": 400 + 60 * number})
        response = broker.client.post(f"/v1/topics/{topic}/messages",
                                      json={"body": f"m-{number}", "keys": [f"k-{number}"],
                                            **delay})
        assert response.status_code in (201, 202), response.text
        due[f"m-{number}"] = response.json()["deliver_at_ms"]
    return due


def _delivered(broker: BrokerProcess, topic: str) -> list[dict[str, Any]]:
    return [message for queue in read_queues(broker, topic, 1) for message in queue]


def _wait_delivered(broker: BrokerProcess, topic: str, count: int) -> None:
    wait_for(lambda: len(_delivered(broker, topic)) >= count, 30, f"{count} delivered")


def _check_exactly_once_never_early(messages: list[dict[str, Any]],
                                    due: dict[str, int]) -> None:
    counts = Counter(message["body"] for message in messages)
    assert {body for body, count in counts.items() if count > 1} == set(), "delivered twice"
    assert set(counts) == set(due), f"lost: {sorted(set(due) - set(counts))}"
    for message in messages:
        body = message["body"]
        assert message["properties"]["TWINLOG_DUE_MS"] == str(due[body])
        assert message["store_timestamp_ms"] >= due[body], f"{body} delivered early"
        assert message["keys"] == [f"k-{body[2:]}"]


def _kill(broker: BrokerProcess) -> None:
    assert broker.process is not None
    broker.process.kill()
    broker.process.wait(10)


def test_delayed_messages_across_kill_9_and_restart(launch_own: Launcher) -> None:
    """SYNC_FLUSH: kill -9 twice while messages come due (after a third and two thirds were
    delivered), restart each time: each message once, none early."""
    broker = launch_own("timers-kill", "ASYNC_MASTER", flush_disk_type="SYNC_FLUSH",
                        default_queue_count=1)
    due = _produce_delayed(broker, "Later", MESSAGE_COUNT)
    for target in (MESSAGE_COUNT // 3, MESSAGE_COUNT // 2):
        _wait_delivered(broker, "Later", target)
        _kill(broker)
        broker.start()
    _wait_delivered(broker, "Later", MESSAGE_COUNT)
    _check_exactly_once_never_early(_delivered(broker, "Later"), due)
    timers = broker.get_json("/admin/timers")
    assert timers["delivered_total"] == MESSAGE_COUNT and timers["pending_total"] == 0


def test_delayed_messages_across_a_classic_kill_9_and_promote(launch: Launcher) -> None:
    """SYNC_MASTER and slave: kill -9 the master while messages come due, promote the slave:
    it delivers the rest, each message once (what the master delivered and the slave holds is
    not delivered again), none early."""
    master = launch("timers-master", "SYNC_MASTER", default_queue_count=1)
    slave = launch("timers-slave", "SLAVE", master=master, default_queue_count=1)
    wait_for(lambda: caught_up(master), 30, "slave connected")
    due = _produce_delayed(master, "Failover", MESSAGE_COUNT)
    _wait_delivered(master, "Failover", MESSAGE_COUNT // 2)
    _kill(master)

    def promote() -> bool:
        response = slave.client.post("/admin/ha/promote", json={"role": "SYNC_MASTER"})
        assert response.status_code in (200, 409), response.text
        return response.status_code == 200

    wait_for(promote, 15, "promotion (the dead master's link must drop first)")
    _wait_delivered(slave, "Failover", MESSAGE_COUNT)
    _check_exactly_once_never_early(_delivered(slave, "Failover"), due)
    timers = slave.get_json("/admin/timers")
    assert timers["scheduler_active"] and timers["delivered_total"] == MESSAGE_COUNT
    assert timers["pending_total"] == 0
