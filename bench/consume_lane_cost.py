"""CPU cost per consume read of the direct lane next to the ASGI (lean) lane, in process: a
real broker's app, the guarded protocol with a transport that only counts bytes, no socket,
no wrk, so the kernel's send (the same for both lanes) and a busy host blur it far less than
bench/http_consume.py.

    python bench/consume_lane_cost.py [--requests 5000] [--rounds 5]

One ASYNC_MASTER's app (its lifespan running, files in a temporary directory) holds MESSAGES
messages of 100 bytes in queue 0 of topic C. Each round feeds the same keep-alive read
(`offset=0&max_messages=N&body_encoding=utf8`, N = 1 and 32, the headers wrk sends) through
the protocol with the direct lane and through the protocol without it, alternately, and
reports the CPU time (time.process_time, every thread of this process) per read, on uvloop
as `twinlog serve` runs by default; the
medians of the rounds and of the paired ratios are printed. Every answer is checked: 200 and
the same length from both lanes.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import uvicorn  # noqa: E402
from uvicorn.server import ServerState  # noqa: E402

from app.api.asgi_route import TwinlogAPI  # noqa: E402
from app.api.main import create_app  # noqa: E402
from app.api.metrics import RefusalCounts  # noqa: E402
from app.server.http_protocol import ConnectionLimits, protocol_class  # noqa: E402
from app.settings import load_settings  # noqa: E402
from bench.http_protocol_cost import _Transport  # noqa: E402

MESSAGES = 1000
BATCH_MESSAGES = 100
LIMITS = ConnectionLimits(connections_max=1024, header_bytes_max=32 * 1024, headers_max=100,
                          header_timeout_s=10.0, body_timeout_s=30.0)


class _Answers(_Transport):
    """Counts the bytes written and the answers (heads) among them."""

    def __init__(self) -> None:
        super().__init__()
        self.heads = 0
        self.first = b""

    def write(self, data: Any) -> None:
        data = bytes(data)
        self.heads += data.count(b"HTTP/1.1 ")
        self.first = self.first or data
        self.written += len(data)

    def writelines(self, lines: Any) -> None:
        self.write(b"".join(lines))


def _request(count: int) -> bytes:
    return (f"GET /v1/topics/C/queues/0/messages?offset=0&max_messages={count}"
            "&body_encoding=utf8 HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n\r\n").encode()


async def _cpu_per_read_us(app: TwinlogAPI, direct: bool, request: bytes,
                           requests: int) -> tuple[float, int]:
    """CPU microseconds per read through one lane, and the bytes of one answer."""
    config = uvicorn.Config(app, lifespan="off", log_level="warning", access_log=False,
                            ws="none")
    config.load()
    state = ServerState()
    kind = protocol_class(LIMITS, RefusalCounts(), app.direct_lane if direct else None)
    protocol = kind(config=config, server_state=state, app_state={})
    transport = _Answers()
    protocol.connection_made(transport)
    started_s = time.process_time()
    for _ in range(requests):
        protocol.data_received(request)
        while state.tasks:  # the ASGI lane's task (and the direct lane's, for a long read)
            await asyncio.sleep(0)
    used_s = time.process_time() - started_s
    assert transport.heads == requests and transport.first.startswith(b"HTTP/1.1 200 OK"), \
        transport.first[:200]
    protocol.connection_lost(None)
    return used_s / requests * 1e6, transport.written // requests


async def _run(requests: int, rounds: int) -> None:
    directory = Path(tempfile.mkdtemp(prefix="twinlog-bench-lane-"))
    try:
        settings = load_settings(data_dir=directory, http_port=0, ha_listen_port=0,
                                 ha_secret="bench-ha-secret", log_level="warning")
        app = create_app(settings)
        assert isinstance(app, TwinlogAPI)
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:
                (await client.post("/v1/topics", json={"name": "C"})).raise_for_status()
                batch = {"messages": [{"body": "x" * 100, "queue_id": 0}] * BATCH_MESSAGES}
                for _ in range(MESSAGES // BATCH_MESSAGES):
                    (await client.post("/v1/topics/C/messages:batch",
                                       json=batch)).raise_for_status()
            deadline_s = time.monotonic() + 30
            while app.state.gateway.broker.store.queues.get("C", 0) is None \
                    or app.state.gateway.broker.store.queues.get("C", 0).max_queue_offset \
                    < MESSAGES:
                assert time.monotonic() < deadline_s, "not dispatched within 30 s"
                await asyncio.sleep(0.01)
            for count in (1, 32):
                request = _request(count)
                figures: dict[bool, list[float]] = {True: [], False: []}
                sizes = set()
                for _ in range(rounds):
                    for direct in (True, False):
                        cpu_us, size = await _cpu_per_read_us(app, direct, request, requests)
                        figures[direct].append(cpu_us)
                        sizes.add(size)
                assert len(sizes) == 1, sizes
                ratios = [d / a for d, a in zip(figures[True], figures[False], strict=True)]
                print(f"  {count:>2} per read ({sizes.pop():,} bytes an answer): direct lane "
                      f"{statistics.median(figures[True]):6.1f} us CPU a read, ASGI lane "
                      f"{statistics.median(figures[False]):6.1f} us; direct / ASGI "
                      f"{statistics.median(ratios):.2f} (per round "
                      f"{', '.join(f'{ratio:.2f}' for ratio in ratios)})")
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=5)
    arguments = parser.parse_args()
    print(f"consume read CPU in process, no socket: median of {arguments.rounds} alternating "
          f"rounds x {arguments.requests} reads")
    try:  # the loop `twinlog serve` runs by default (http_event_loop)
        import uvloop
    except ImportError:
        asyncio.run(_run(arguments.requests, arguments.rounds))
    else:
        uvloop.run(_run(arguments.requests, arguments.rounds))


if __name__ == "__main__":
    main()
