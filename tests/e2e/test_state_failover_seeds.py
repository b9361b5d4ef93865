"""State through the log, by seeds, with real processes (issue 26): a SYNC_MASTER and its slave
take a seeded mix of produces, a consumer group's commits, topic deletes and re-creates; the
master is killed with SIGKILL and the slave promoted. Then, on the survivor:

- every 201 is consumable exactly where its queue offset says, and the promoted broker's own
  produces continue each queue without a gap;
- no message of a deleted incarnation is served;
- the group's committed offsets are never beyond their queues, so no acknowledged message is
  skipped;
- before the kill, master and slave held equal SQL tables (topics, groups, offsets).

A failure prints the seed; `TWINLOG_STATE_SEEDS=7,8` runs chosen seeds.
"""

from __future__ import annotations

import os
import random
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.support.brokers import (
    BrokerProcess,
    Launcher,
    caught_up,
    kill_and_promote,
    wait_for,
)

pytestmark = [pytest.mark.processes, pytest.mark.slow]

SEEDS = [int(seed) for seed in os.environ.get("TWINLOG_STATE_SEEDS", "1,2,3").split(",")]
TOPICS = ("S0", "S1")
QUEUE_COUNT = 2
GROUP = "seeded"
STEPS = 60
TABLES = {"topic_config": "name", "subscription_group": "name",
          "consumer_offset": "group_name, topic, queue_id"}


@dataclass
class Model:
    """What the brokers acknowledged, as the test saw it."""
    rng: random.Random
    incarnation: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TOPICS, 0))
    # (topic, queue id, queue offset) -> body, of live incarnations only
    live: dict[tuple[str, int, int], str] = field(default_factory=dict)
    deleted_bodies: set[str] = field(default_factory=set)
    committed: dict[tuple[str, int], int] = field(default_factory=dict)
    existing: set[str] = field(default_factory=set)
    counter: int = 0

    def body(self, topic: str) -> str:
        self.counter += 1
        return f"{topic}.{self.incarnation[topic]}.{self.counter}"


def _produce(broker: BrokerProcess, model: Model, topic: str) -> None:
    body = model.body(topic)
    queue_id = model.rng.randrange(QUEUE_COUNT)
    response = broker.client.post(f"/v1/topics/{topic}/messages",
                                  json={"body": body, "queue_id": queue_id})
    assert response.status_code == 201, response.text
    put = response.json()
    model.existing.add(topic)  # a produce creates the topic
    model.live[(topic, queue_id, put["queue_offset"])] = body


def _commit(broker: BrokerProcess, model: Model, topic: str) -> None:
    """The group read a queue up to some point and commits what it read."""
    queue_id = model.rng.randrange(QUEUE_COUNT)
    held = [offset for (t, q, offset) in model.live if (t, q) == (topic, queue_id)]
    committed = model.committed.get((topic, queue_id), 0)
    offset = max(committed, model.rng.randint(0, max(held) + 1) if held else 0)
    response = broker.client.put(f"/v1/groups/{GROUP}/offsets/{topic}/queues/{queue_id}",
                                 json={"offset": offset})
    if topic not in model.existing:  # deleted and not made again
        assert response.status_code == 404, response.text
        return
    assert response.status_code == 200, response.text
    model.committed[(topic, queue_id)] = offset


def _delete_and_recreate(broker: BrokerProcess, model: Model, topic: str) -> None:
    deleted = broker.client.delete(f"/v1/topics/{topic}")
    assert deleted.status_code == (204 if topic in model.existing else 404), deleted.text
    for key in [key for key in model.live if key[0] == topic]:
        model.deleted_bodies.add(model.live.pop(key))
    for queue_key in [queue_key for queue_key in model.committed if queue_key[0] == topic]:
        del model.committed[queue_key]  # a deleted topic's offsets go with it
    model.incarnation[topic] += 1
    model.existing.discard(topic)
    if model.rng.random() < 0.7:  # else the next produce creates it
        model.existing.add(topic)
        created = broker.client.post("/v1/topics", json={"name": topic,
                                                         "read_queue_count": QUEUE_COUNT})
        assert created.status_code == 201, created.text


def _tables(broker: BrokerProcess) -> dict[str, list[tuple[Any, ...]]]:
    database = broker.data_dir / "metadata.sqlite3"
    with sqlite3.connect(f"file:{database}?mode=ro", uri=True) as connection:
        return {table: connection.execute(f"SELECT * FROM {table} ORDER BY {key}").fetchall()
                for table, key in TABLES.items()}


def _served(broker: BrokerProcess, topic: str, queue_id: int) -> dict[int, str]:
    response = broker.client.get(f"/v1/topics/{topic}/queues/{queue_id}/messages",
                                 params={"offset": 0, "max_messages": 1000,
                                         "body_encoding": "utf8"})
    if response.status_code == 404:
        return {}
    assert response.status_code == 200, response.text
    return {m["queue_offset"]: m["body"] for m in response.json()["messages"]}


def _run(seed: int, launch: Launcher, data_root: Path) -> None:
    model = Model(random.Random(seed))
    common = {"default_queue_count": QUEUE_COUNT}
    master = launch(f"seed{seed}-master", "SYNC_MASTER", **common)
    slave = launch(f"seed{seed}-slave", "SLAVE", master=master, **common)
    wait_for(lambda: caught_up(master), 30, "slave connected")
    assert master.client.post("/v1/groups", json={"name": GROUP}).status_code == 201
    for _ in range(STEPS):
        topic = model.rng.choice(TOPICS)
        action = model.rng.choices((_produce, _commit, _delete_and_recreate), (12, 4, 1))[0]
        action(master, model, topic)
    wait_for(lambda: caught_up(master), 30, "slave caught up")
    wait_for(lambda: _tables(slave) == _tables(master), 15, "slave's tables equal the master's")
    kill_and_promote(master, slave)
    for topic in TOPICS:
        for queue_id in range(QUEUE_COUNT):
            served = _served(slave, topic, queue_id)
            expected = {offset: body for (t, q, offset), body in model.live.items()
                        if (t, q) == (topic, queue_id)}
            for offset, body in expected.items():
                assert served.get(offset) == body, (topic, queue_id, offset, body)
            resurrected = set(served.values()) & model.deleted_bodies
            assert not resurrected, f"{topic}/{queue_id} serves deleted {sorted(resurrected)}"
            after = slave.client.post(f"/v1/topics/{topic}/messages",
                                      json={"body": "after", "queue_id": queue_id})
            assert after.status_code == 201, after.text
            assert after.json()["queue_offset"] == (max(served) + 1 if served else 0)
    offsets = slave.get_json(f"/v1/groups/{GROUP}/offsets")["offsets"]
    for entry in offsets:
        held = _served(slave, entry["topic"], entry["queue_id"])
        assert entry["offset"] <= max(held, default=-1) + 2, entry  # +1 "after", +1 the end
    slave.stop()


@pytest.mark.parametrize("seed", SEEDS)
def test_state_survives_kill_and_promotion(seed: int, launch_own: Launcher,
                                           tmp_path: Path) -> None:
    try:
        _run(seed, launch_own, tmp_path)
    except AssertionError as error:
        raise AssertionError(f"seed {seed} (TWINLOG_STATE_SEEDS={seed} replays it): "
                             f"{error}") from error
