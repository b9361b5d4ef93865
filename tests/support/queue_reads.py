"""Produce and queue reads over HTTP, for e2e tests of any broker (a classic broker process
or a DLedger member: anything with an httpx `client` on its gateway)."""

from __future__ import annotations

from typing import Any, Protocol

import httpx


class Gateway(Protocol):
    @property
    def client(self) -> httpx.Client: ...


def produce(broker: Gateway, topic: str, body: str, statuses: tuple[int, ...] = (201,),
            **fields: Any) -> dict[str, Any]:
    """One message; its answer (asserted to be one of `statuses`)."""
    response = broker.client.post(f"/v1/topics/{topic}/messages",
                                  json={"body": body, **fields})
    assert response.status_code in statuses, response.text
    document: dict[str, Any] = response.json()
    return document


def queue(broker: Gateway, topic: str, queue_id: int = 0) -> list[tuple[int, str]]:
    """(queue offset, body) of the queue's first 100 messages; [] when the topic is unknown."""
    response = broker.client.get(f"/v1/topics/{topic}/queues/{queue_id}/messages",
                                 params={"offset": 0, "max_messages": 100,
                                         "body_encoding": "utf8"})
    if response.status_code == 404:
        return []
    assert response.status_code == 200, response.text
    return [(m["queue_offset"], m["body"]) for m in response.json()["messages"]]
