"""What a read worker answers: the direct lane's consume read, over the store's read view.

The same checks in the same order as the broker's direct lane (app/api/routes/consume.py's
`consume_direct`): the token, the request's parameters, the read; and the same document. It
answers only a read main would answer with success at once: anything else (a bad token or
parameter, a tag filter, a queue not published readable, a read that would wait, a read
made while the store changed) gets None, and the connection goes back to main, which
answers it as it always did (docs/read-workers.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from starlette.routing import compile_path

from app.api.auth import Authenticator
from app.api.lean_lane import Headers, authorization_of, parsed_query
from app.api.routes.consume import ENCODERS, PATH, WAITABLE, answer_document, read_request
from app.settings import Scope as TokenScope
from store.reads import READ_MESSAGES_MAX
from store.shared_reads.read_view import StoreReadView

_PATH_REGEX = compile_path(PATH)[0]


@dataclass(frozen=True, slots=True)
class ReadLimits:
    """What of the broker's settings a worker's reads need."""

    auth_tokens: dict[str, list[str]]
    long_poll_wait_ms_max: int


class WorkerReads:
    def __init__(self, limits: ReadLimits, view: StoreReadView) -> None:
        self._auth = Authenticator({token: [TokenScope(scope) for scope in scopes]
                                    for token, scopes in limits.auth_tokens.items()})
        self._wait_ms_max = limits.long_poll_wait_ms_max
        self._view = view

    def answer(self, path: str, query_string: bytes, headers: Headers) -> bytes | None:
        """The ConsumeResult document of a GET of `path`; None when main is to answer."""
        match = _PATH_REGEX.match(path)
        if match is None:
            return None
        try:
            self._auth.check(authorization_of(headers), TokenScope.CONSUME)
            topic, queue_id, offset, max_messages, body_encoding, wait_ms, tags = read_request(
                match.groupdict(), parsed_query(query_string))
        except Exception:  # noqa: BLE001 - answered by main, as main answers it
            return None
        if tags is not None:
            return None
        ends = self._view.ends
        change_sequence = ends.change_sequence()
        if change_sequence % 2:
            return None  # the store is changing
        result = self._view.get_encoded(topic, queue_id, offset, max_messages,
                                        ENCODERS[body_encoding], READ_MESSAGES_MAX)
        if result is None:
            return None
        if min(wait_ms, self._wait_ms_max) > 0 and result.status in WAITABLE:
            return None  # a long poll: main waits
        document = answer_document(topic, queue_id, result)
        if ends.change_sequence() != change_sequence:
            return None  # read while the store changed: main reads it again
        return document
