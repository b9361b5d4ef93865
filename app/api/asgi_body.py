"""Reading a request body from ASGI `receive` under a size limit, counted as it arrives.

The declared Content-Length is checked before the first read; a chunked body (no length) is
counted chunk by chunk and refused as soon as it passes the limit, so at most one chunk past
the limit is ever held.
"""

from __future__ import annotations

from collections.abc import Callable

from starlette.types import Receive

from app.api.errors import ApiError

# (size seen, size_max) -> the refusal to raise
TooLarge = Callable[[int, int], ApiError]


class Disconnected(Exception):
    """The client went away before its body arrived: nothing to answer."""


def check_declared_size(content_length: bytes | None, size_max: int,
                        too_large: TooLarge) -> None:
    """Raise `too_large(length, size_max)` when the declared Content-Length is over `size_max`."""
    if content_length is not None and content_length.isdigit() \
            and int(content_length) > size_max:
        raise too_large(int(content_length), size_max)


async def read_body(receive: Receive, content_length: bytes | None, size_max: int,
                    too_large: TooLarge) -> bytes:
    check_declared_size(content_length, size_max, too_large)
    message = await receive()
    if message["type"] != "http.request":
        raise Disconnected
    body: bytes = message.get("body", b"")
    if not message.get("more_body", False):
        if len(body) > size_max:
            raise too_large(len(body), size_max)
        return body
    chunks = [body]
    size = len(body)
    while True:
        message = await receive()
        if message["type"] != "http.request":
            raise Disconnected
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > size_max:
            raise too_large(size, size_max)
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)
