"""CPU per message of batch produce through the broker's ASGI app, in-process (no sockets).

    PYTHONPATH=CHECKOUT python bench/batch_cpu.py [--batches 200] [--reps 5]

Runs the code on PYTHONPATH (bench/batch_ab.py --in-process runs it for two checkouts): an
ASYNC_MASTER in a temporary data dir, fed batches of 100 x 100 B through the app's ASGI
callable, one after the other. Prints the CPU per message of the event loop's thread (the
request path) and of the whole process, best and median of `--reps` measurements. CPU time,
unlike a rate, barely moves when other programs share the machine; the best of a few is
steadier still. It imports only the broker (`app`), so that it runs against older checkouts.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

_BATCH = json.dumps({"messages": [{"body": "x" * 100}] * 100}).encode()
_MESSAGES_PER_BATCH = 100
_PATH = "/v1/topics/Bench/messages:batch"
_WARM_UP_BATCHES = 50

Asgi = Callable[[dict[str, Any], Callable[[], Awaitable[dict[str, Any]]],
                 Callable[[dict[str, Any]], Awaitable[None]]], Awaitable[None]]


async def _post(app: Asgi, body: bytes) -> int:
    """One POST through the ASGI callable; its status."""
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
             "method": "POST", "scheme": "http", "path": _PATH, "raw_path": _PATH.encode(),
             "query_string": b"", "root_path": "", "state": {},
             "headers": [(b"host", b"127.0.0.1"), (b"content-type", b"application/json"),
                         (b"content-length", str(len(body)).encode())],
             "client": ("127.0.0.1", 5000), "server": ("127.0.0.1", 8080)}
    messages = [{"type": "http.request", "body": body, "more_body": False}]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        if messages:
            return messages.pop()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return int(sent[0]["status"])


def _create_app(data_dir: Path) -> Any:
    from app.settings import load_settings
    try:
        from app.api.main import create_app
    except ImportError:  # checkouts from before app/api
        from app.main import create_app
    return create_app(load_settings(data_dir=data_dir, mapped_file_size_bytes=1 << 30,
                                    ha_listen_port=0, ha_secret="bench-ha-secret",
                                    log_level="warning"))


async def _measure(batches: int, reps: int) -> tuple[list[float], list[float]]:
    scratch = Path(tempfile.mkdtemp(prefix="twinlog-batch-cpu-"))
    try:
        app = _create_app(scratch)
        async with app.router.lifespan_context(app):
            for _ in range(_WARM_UP_BATCHES):
                status = await _post(app, _BATCH)
                if status != 201:
                    raise SystemExit(f"a batch answered {status}")
            loop_us: list[float] = []
            process_us: list[float] = []
            for _ in range(reps):
                process_before_s, loop_before_s = time.process_time(), time.thread_time()
                for _ in range(batches):
                    await _post(app, _BATCH)
                messages = batches * _MESSAGES_PER_BATCH
                loop_us.append((time.thread_time() - loop_before_s) * 1e6 / messages)
                process_us.append((time.process_time() - process_before_s) * 1e6 / messages)
            return sorted(loop_us), sorted(process_us)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batches", type=int, default=200, help="per measurement")
    parser.add_argument("--reps", type=int, default=5)
    arguments = parser.parse_args()
    loop_us, process_us = asyncio.run(_measure(arguments.batches, arguments.reps))
    middle = len(loop_us) // 2
    figures = {"loop_best_us": loop_us[0], "loop_median_us": loop_us[middle],
               "process_best_us": process_us[0], "process_median_us": process_us[middle]}
    print(f"BATCH_CPU {json.dumps(figures)}")  # the line bench/batch_ab.py reads


if __name__ == "__main__":
    main()
