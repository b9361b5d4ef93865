"""A topic's 404, answered only once this broker's tables hold every record its log held
when asked (app/broker/topic_catch_up.py): a slave whose dispatch trails its log, or whose
tables are being rebuilt after a cut, answers 503 METADATA_CATCHING_UP (Retry-After) for a
topic it has not applied yet when the wait runs out, never 404."""

from __future__ import annotations

from app.api.errors import ApiError
from app.broker.broker import Broker
from app.broker.topic_catch_up import Outcome, settle


def topic_known(broker: Broker, topic: str) -> bool:
    """In the tables' view, or in the consume queues (a slave holding messages of a topic
    whose config it has not applied)."""
    return (broker.metadata_store.topic_view(topic) is not None
            or topic in broker.store.queues.topics())


async def require_topic(broker: Broker, topic: str) -> None:
    """Return once `topic` is known; 404 TOPIC_NOT_FOUND when the tables caught up with the
    log and lack it; 503 METADATA_CATCHING_UP when they did not catch up in time."""
    outcome = await settle(broker.store, lambda: topic_known(broker, topic))
    if outcome is Outcome.ABSENT:
        raise ApiError("TOPIC_NOT_FOUND", f"topic {topic!r} does not exist")
    if outcome is Outcome.BEHIND:
        raise ApiError("METADATA_CATCHING_UP",
                       f"topic {topic!r} is not in this broker's tables, which have not yet "
                       "applied every record of its log (dispatch is behind, or they are "
                       "rebuilt after a cut of the log); retry")
