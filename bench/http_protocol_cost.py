"""CPU cost per request of the guarded protocol (app/server/http_protocol.py) next to uvicorn's
plain httptools protocol, in process: no sockets, no wrk, so a busy host blurs it far less than
bench/http_produce.py.

    python bench/http_protocol_cost.py [--requests 20000] [--rounds 5]

Each round feeds the same keep-alive produce request (the headers wrk sends) through each
protocol class in turn, with a fake transport and an ASGI app that reads the body and answers
201, and reports the median paired difference: what the limits add per request.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import uvicorn  # noqa: E402
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol  # noqa: E402
from uvicorn.server import ServerState  # noqa: E402

from app.api.metrics import RefusalCounts  # noqa: E402
from app.server.http_protocol import ConnectionLimits, protocol_class  # noqa: E402

BODY = b'{"body": "' + b"x" * 100 + b'"}'
REQUEST = (b"POST /v1/topics/Bench/messages HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n"
           b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(BODY)) + BODY


class _Transport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.written = 0
        self._closing = False

    def write(self, data: Any) -> None:
        self.written += len(data)

    def close(self) -> None:
        self._closing = True

    def is_closing(self) -> bool:
        return self._closing

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 8080), "peername": ("127.0.0.1", 50000)}.get(
            name, default)

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


async def _app(scope: Any, receive: Any, send: Any) -> None:
    more = True
    while more:
        more = (await receive()).get("more_body", False)
    await send({"type": "http.response.start", "status": 201,
                "headers": [(b"content-type", b"application/json"), (b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"{}"})


async def _per_request_us(protocol_type: type[HttpToolsProtocol], requests: int) -> float:
    config = uvicorn.Config(_app, log_level="warning", access_log=False)
    config.load()
    state = ServerState()
    protocol = protocol_type(config=config, server_state=state, app_state={})
    protocol.connection_made(_Transport())
    started_s = time.perf_counter()
    for _ in range(requests):
        protocol.data_received(REQUEST)
        while state.tasks:
            await asyncio.gather(*state.tasks)
    return (time.perf_counter() - started_s) / requests * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    arguments = parser.parse_args()
    limits = ConnectionLimits(connections_max=1024, header_bytes_max=32 * 1024, headers_max=100,
                              header_timeout_s=10.0, body_timeout_s=30.0)
    guarded = protocol_class(limits, RefusalCounts())
    # Rounds alternate the two, and the median of the paired differences is reported: a busy
    # host slows whole rounds, which pairing cancels.
    plain_us: list[float] = []
    guarded_us: list[float] = []
    for _ in range(arguments.rounds):
        plain_us.append(asyncio.run(_per_request_us(HttpToolsProtocol, arguments.requests)))
        guarded_us.append(asyncio.run(_per_request_us(guarded, arguments.requests)))
    added_us = statistics.median(g - p for g, p in zip(guarded_us, plain_us, strict=True))
    plain = statistics.median(plain_us)
    print(f"per request (median of {arguments.rounds} rounds x {arguments.requests}): plain "
          f"httptools {plain:.1f} us, guarded {statistics.median(guarded_us):.1f} us, added "
          f"{added_us:.1f} us ({100 * added_us / plain:.1f}%)")

if __name__ == "__main__":
    main()
