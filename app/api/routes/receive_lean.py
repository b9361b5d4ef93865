"""The lean lane of group consumption (app/api/lean_lane.py): receive, ack and change of
invisibility without FastAPI's per-request machinery (its dependency solving runs the token
check on a worker thread, and its body validation builds a pydantic model per request).

Each handler makes the checks in the order the body guard and FastAPI make them: the token,
the body's size (413) and the body; a body that is not the plain JSON object of its request
model (a field missing, unknown or out of its bounds, a value of another type, another
content type) or a path parameter out of its plain form falls back to FastAPI's lane, which
answers its validation problem as it always did. The answers are the routes' own
(app/api/routes/receive.py).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.types import Receive, Scope, Send

from app.api.gateway import Gateway
from app.api.lean_lane import (
    Fallback,
    LeanRoute,
    admitted_body,
    name_matching,
    plain_json,
    send_json,
)
from app.api.routes.receive import PATH, ack_answer, change_answer, receive_answer
from app.api.schemas.fields import GROUP_PATTERN, TOPIC_PATTERN
from app.api.schemas.receive import (
    ACK_HANDLES_MAX,
    INVISIBLE_MS_LIMIT,
    RECEIVE_MESSAGES_MAX,
    WAIT_MS_LIMIT,
)
from app.settings import Scope as TokenScope
from store.consumption.handles import HANDLE_CHARS_MAX
from store.consumption.tags import TAG_EXPRESSION_LENGTH_MAX

_GROUP = re.compile(GROUP_PATTERN)
_TOPIC = re.compile(TOPIC_PATTERN)
_ENCODINGS = ("base64", "utf8")
# field -> (default, low, high) of ReceiveRequest's whole numbers
_RECEIVE_NUMBERS = {"max_messages": (32, 1, RECEIVE_MESSAGES_MAX),
                    "invisible_ms": (60_000, 1, INVISIBLE_MS_LIMIT),
                    "wait_ms": (0, 0, WAIT_MS_LIMIT)}
_RECEIVE_FIELDS = frozenset({*_RECEIVE_NUMBERS, "tags", "body_encoding"})

# (gateway, group, topic, the request's fields) -> (HTTP status, JSON body)
_Answer = Callable[[Gateway, str, str, dict[str, Any]], Awaitable[tuple[int, bytes]]]
# the body's document -> the request's fields, or None when FastAPI must judge it
_Plain = Callable[[Any], dict[str, Any] | None]


def _whole(value: Any, low: int, high: int) -> bool:
    return type(value) is int and low <= value <= high


def _plain_receive(document: Any) -> dict[str, Any] | None:
    if type(document) is not dict or not document.keys() <= _RECEIVE_FIELDS:
        return None
    fields: dict[str, Any] = {}
    for name, (default, low, high) in _RECEIVE_NUMBERS.items():
        value = document.get(name, default)
        if not _whole(value, low, high):
            return None
        fields[name] = value
    tags = document.get("tags")
    body_encoding = document.get("body_encoding", "base64")
    if tags is not None and (type(tags) is not str or len(tags) > TAG_EXPRESSION_LENGTH_MAX) \
            or body_encoding not in _ENCODINGS:
        return None
    fields.update(tags=tags, body_encoding=body_encoding)
    return fields


def _plain_ack(document: Any) -> dict[str, Any] | None:
    if type(document) is not dict or document.keys() != {"receipt_handles"}:
        return None
    handles = document["receipt_handles"]
    if type(handles) is not list or not 1 <= len(handles) <= ACK_HANDLES_MAX \
            or any(type(handle) is not str for handle in handles):
        return None
    return {"handles": handles}


def _plain_change(document: Any) -> dict[str, Any] | None:
    if type(document) is not dict or document.keys() != {"receipt_handle", "invisible_ms"}:
        return None
    handle, invisible_ms = document["receipt_handle"], document["invisible_ms"]
    if type(handle) is not str or not 1 <= len(handle) <= HANDLE_CHARS_MAX \
            or not _whole(invisible_ms, 0, INVISIBLE_MS_LIMIT):
        return None
    return {"handle": handle, "invisible_ms": invisible_ms}


def _lean(plain: _Plain, answer: _Answer) -> Callable[..., Awaitable[None]]:
    async def handler(scope: Scope, path_params: dict[str, str], receive: Receive, send: Send,
                      gateway: Gateway) -> None:
        body = await admitted_body(scope, receive, gateway, TokenScope.CONSUME)
        fields = _plain_body(scope["headers"], body, plain)
        try:
            if fields is None:
                raise Fallback
            group = name_matching(path_params["group"], _GROUP)
            topic = name_matching(path_params["topic"], _TOPIC)
        except Fallback:
            raise Fallback(body) from None
        http_status, answer_body = await answer(gateway, group, topic, fields)
        await send_json(send, answer_body, http_status)

    return handler


def _plain_body(headers: list[tuple[bytes, bytes]], body: bytes,
                plain: _Plain) -> dict[str, Any] | None:
    parsed, document = plain_json(headers, body)
    return plain(document) if parsed else None


async def _receive(gateway: Gateway, group: str, topic: str,
                   fields: dict[str, Any]) -> tuple[int, bytes]:
    return await receive_answer(gateway, group, topic, **fields)


async def _ack(gateway: Gateway, group: str, topic: str,
               fields: dict[str, Any]) -> tuple[int, bytes]:
    return await ack_answer(gateway, group, topic, fields["handles"])


async def _change(gateway: Gateway, group: str, topic: str,
                  fields: dict[str, Any]) -> tuple[int, bytes]:
    return await change_answer(gateway, group, topic, fields["handle"], fields["invisible_ms"])


LEAN_ROUTES = (LeanRoute("POST", PATH + ":receive", _lean(_plain_receive, _receive)),
               LeanRoute("POST", PATH + ":ack", _lean(_plain_ack, _ack)),
               LeanRoute("POST", PATH + ":change-invisibility", _lean(_plain_change, _change)))
