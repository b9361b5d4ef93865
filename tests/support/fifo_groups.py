"""A FIFO group's first receives on a master or leader, and what each replica's tables and
queue states say of them (the e2e tests of a group's `fifo` flag, issue 30)."""

from __future__ import annotations

from typing import Any

import httpx

from store.consumption.registry import RETRY_QUEUE_BIT
from tests.support.processes import wait_for

RECEIVE = {"invisible_ms": 60_000, "max_messages": 10, "body_encoding": "utf8"}


def pop_images(client: httpx.Client, group: str) -> list[dict[str, Any]]:
    """The broker's queue states of `group` (its consumer offsets' export carries them)."""
    response = client.get("/admin/sync/consumer-offsets")
    assert response.status_code == 200, response.text
    images = [image for image in response.json()["pop_queues"] or []
              if image["group"] == group]
    return sorted(images, key=lambda image: (image["topic"], image["queue_id"]))


def receive(client: httpx.Client, group: str, topic: str) -> list[dict[str, Any]]:
    response = client.post(f"/v1/groups/{group}/topics/{topic}/messages:receive", json=RECEIVE)
    assert response.status_code == 200, response.text
    messages: list[dict[str, Any]] = response.json()["messages"]
    return messages


def first_fifo_receive(primary: httpx.Client, group: str, topic: str) -> dict[str, Any]:
    """A FIFO `group` and a one-queue `topic` of m0, m1, m2 on `primary`: the first receive
    gets m0 alone, and the next nothing while m0 is in flight. m0's delivery."""
    for path, body in (("/v1/topics", {"name": topic, "read_queue_count": 1,
                                       "write_queue_count": 1}),
                       ("/v1/groups", {"name": group, "fifo": True})):
        response = primary.post(path, json=body)
        assert response.status_code == 201, response.text
    for number in range(3):
        response = primary.post(f"/v1/topics/{topic}/messages", json={"body": f"m{number}"})
        assert response.status_code == 201, response.text
    received: list[dict[str, Any]] = []

    def got_one() -> bool:  # dispatch makes the messages receivable a moment after the 201
        received.extend(receive(primary, group, topic))
        return bool(received)

    wait_for(got_one, what="the first message receivable")
    assert [message["body"] for message in received] == ["m0"]
    assert receive(primary, group, topic) == []
    return received[0]


def wait_replica_holds(primary: httpx.Client, replica: httpx.Client, group: str, *,
                       fifo: bool, what: str) -> None:
    """The replica's group says `fifo`, and its topic queue's state is the primary's, mode
    included (`fifo`). The primary's retry queue state is never FIFO (a replica creates one
    only once a record takes an offset into it)."""
    wait_for(lambda: replica.get(f"/v1/groups/{group}").json().get("fifo") is fifo,
             what=f"{what}: the group's fifo")
    images = pop_images(primary, group)
    assert [(image["queue_id"], image["fifo"]) for image in images] == [
        (0, fifo), (RETRY_QUEUE_BIT, False)], images
    wait_for(lambda: pop_images(replica, group)[:1] == images[:1],
             what=f"{what}: the queue state")
