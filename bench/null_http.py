"""A null receive-and-ack server: the ceiling of any Python HTTP gateway for the group bench.

It answers the two requests of bench/group_consume.py's (p) case in the shape and size of
twinlog's answers, and does nothing else: no log, no decision, no replication. Each request is
parsed by httptools (llhttp, as uvicorn's fastest protocol), its JSON body by orjson, and each
answer is built with orjson from per-message documents, on uvloop when it is installed: the
least a Python server does to answer these requests. What it drains, next to Redis in the same
run, is how far a Python HTTP server can go on this machine with the broker's work taken out.

`python -m bench.null_http PORT COUNT LIFETIME_S`: listens on 127.0.0.1:PORT, hands out COUNT
messages in all (then empty answers, as a drained topic), and stops by itself after LIFETIME_S
(a bench stops it earlier). Bench code, not part of the product.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httptools
import orjson

REQUEST_BYTES_MAX = 4 * 1024 * 1024
MESSAGES_MAX = 1024
_BODY = "eHh4" * 33  # 100 bytes, base64: the bench's body
_HEAD = (b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\n"
         b"content-length: %d\r\n\r\n")


def _message(number: int, now_ms: int) -> dict[str, Any]:
    """A received message as twinlog answers it (the fields, and sizes alike)."""
    return {"msg_id": f"7F00000100008A1F{number:016X}", "topic": "Pop", "queue_id": number % 8,
            "queue_offset": number, "commit_log_offset": 287 + 194 * number, "size_bytes": 194,
            "body": _BODY, "body_encoding": "base64", "keys": [], "tags": None,
            "properties": {}, "idempotency_key": None, "born_timestamp_ms": now_ms,
            "store_timestamp_ms": now_ms, "reconsume_times": 0,
            "receipt_handle": f"AQAAAAAAAAAAAAAAAAABAAAAAQAAAAAAAXAAA1Bv{number:012d}",
            "delivery_attempt": 1, "invisible_until_ms": now_ms + 60_000}


def receive_answer(request: dict[str, Any], first: int, left: int) -> tuple[bytes, int]:
    """The answer, and how many messages it hands out (at most `left`)."""
    count = max(0, min(int(request.get("max_messages", 32)), MESSAGES_MAX, left))
    now_ms = time.time_ns() // 1_000_000
    return orjson.dumps({"status": "PUT_OK", "messages": [
        _message(first + n, now_ms) for n in range(count)]}), count


def ack_answer(request: dict[str, Any]) -> bytes:
    return orjson.dumps({"status": "PUT_OK", "results": [
        {"receipt_handle": handle, "status": 200, "error_code": None, "detail": None}
        for handle in request.get("receipt_handles", [])[:MESSAGES_MAX]]})


class _Connection(asyncio.Protocol):
    """One keep-alive connection: a request at a time, answered when its body is whole."""

    def __init__(self, counter: list[int], total: int) -> None:
        self._counter = counter
        self._total = total
        self._parser = httptools.HttpRequestParser(self)
        self._transport: Any = None  # uvloop's transport is not an asyncio.Transport
        self._url = b""
        self._body: list[bytes] = []
        self._size = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError:
            self._answer(400, b'{"detail":"malformed request"}')
            self._close()

    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_body(self, body: bytes) -> None:
        self._size += len(body)
        if self._size > REQUEST_BYTES_MAX:
            self._answer(413, b'{"detail":"too large"}')
            self._close()
            return
        self._body.append(body)

    def on_message_complete(self) -> None:
        url, body = self._url, b"".join(self._body)
        self._url, self._body, self._size = b"", [], 0
        try:
            request = orjson.loads(body) if body else {}
        except orjson.JSONDecodeError:
            self._answer(400, b'{"detail":"malformed JSON"}')
            return
        if url.endswith(b":receive"):
            first = self._counter[0]
            answer, count = receive_answer(request, first, self._total - first)
            self._counter[0] = first + count
            self._answer(200, answer)
        elif url.endswith(b":ack"):
            self._answer(200, ack_answer(request))
        else:
            self._answer(404, b'{"detail":"not found"}')

    def _answer(self, status: int, body: bytes) -> None:
        if self._transport is not None and not self._transport.is_closing():
            reason = {200: b"OK", 400: b"Bad Request", 404: b"Not Found"}.get(status, b"Error")
            self._transport.write(_HEAD % (status, reason, len(body)) + body)

    def _close(self) -> None:
        if self._transport is not None:
            self._transport.close()


async def serve(port: int, total: int, lifetime_s: float) -> None:
    loop = asyncio.get_running_loop()
    counter = [0]
    server = await loop.create_server(lambda: _Connection(counter, total), "127.0.0.1", port)
    async with server:
        await asyncio.sleep(lifetime_s)


@contextmanager
def null_server(total: int, lifetime_s: float = 600.0
                ) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """This server in a process of its own, handing out `total` messages; yields its URL and
    the process."""
    from bench.http_produce import listening_process
    with listening_process(lambda port: ["-m", "bench.null_http", str(port), str(total),
                                         str(lifetime_s)]) as served:
        yield served


def main() -> None:
    port, total, lifetime_s = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    try:
        import uvloop
    except ImportError:
        asyncio.run(serve(port, total, lifetime_s))
    else:
        uvloop.run(serve(port, total, lifetime_s))


if __name__ == "__main__":
    main()
