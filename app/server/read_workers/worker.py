"""A read worker process: `python -m app.server.read_workers.worker --channel-fd N ...`,
started by the broker (app/server/read_workers/pool.py), never by hand.

It reads its limits from the channel's first message, then serves the connections main
hands it (app/server/read_workers/connection.py) and hands back the ones it does not serve.
It reports its counts to main every second, and ends when main's end of the channel closes
(main stopped or died) or at SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import socket
import time
from collections.abc import Callable
from email.utils import formatdate
from pathlib import Path

from app.server.read_workers import handoff
from app.server.read_workers.connection import WorkerConnection
from app.server.read_workers.reads import ReadLimits, WorkerReads
from store.shared_reads.read_view import StoreReadView

TICK_S = 1.0


class Worker:
    def __init__(self, channel: socket.socket, config: dict[str, object],
                 view: StoreReadView) -> None:
        self._channel = channel
        self.reads = WorkerReads(ReadLimits(
            auth_tokens=config["auth_tokens"],  # type: ignore[arg-type]
            long_poll_wait_ms_max=int(config["long_poll_wait_ms_max"])),  # type: ignore[call-overload]
            view)
        self.connections_max = int(config["connections_max"])  # type: ignore[call-overload]
        self.head_bytes_max = int(config["header_bytes_max"])  # type: ignore[call-overload]
        self.idle_s = float(config["keep_alive_timeout_s"])  # type: ignore[arg-type]
        self.head_s = float(config["header_timeout_s"])  # type: ignore[arg-type]
        self.connections: set[WorkerConnection] = set()
        self.default_headers: list[tuple[bytes, bytes]] = []
        self.reads_served = 0
        self.handed_back = 0
        self.hand_backs_failed = 0
        self.refused = 0  # connections handed back at once: at connections_max
        self.done = asyncio.Event()
        self._date_s = 0

    def on_channel(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                message = handoff.receive(self._channel)
            except (EOFError, OSError):
                self.done.set()  # main is gone
                return
            if message is None:
                return
            if message.fd is None:
                continue
            if len(self.connections) >= self.connections_max:
                self.refused += 1
                self.hand_back(message.fd, message.payload)
                socket.close(message.fd)
                continue
            connection = socket.socket(fileno=message.fd)
            connection.setblocking(False)
            loop.create_task(loop.connect_accepted_socket(
                self._protocol_for(message.payload), connection))

    def _protocol_for(self, carried: bytes) -> Callable[[], WorkerConnection]:
        return lambda: WorkerConnection(self, carried)

    def hand_back(self, fd: int, carried: bytes) -> bool:
        self.handed_back += 1
        return handoff.send_connection(self._channel, fd, carried)

    def tick(self) -> None:
        now_s = time.time()
        if int(now_s) != self._date_s:  # uvicorn's date header: the second's, in GMT
            self._date_s = int(now_s)
            self.default_headers = [(b"date", formatdate(now_s, usegmt=True).encode())]

    def report(self) -> None:
        now_s = time.monotonic()
        for connection in list(self.connections):
            connection.expire(now_s, self.idle_s, self.head_s, WorkerConnection.hand_back)
        counts = {"reads_served": self.reads_served, "handed_back": self.handed_back,
                  "hand_backs_failed": self.hand_backs_failed, "refused": self.refused,
                  "connections": len(self.connections)}
        handoff.send_message(self._channel, handoff.COUNTS, json.dumps(counts).encode())


async def _run(channel: socket.socket, store_dir: Path, ends_path: Path) -> None:
    loop = asyncio.get_running_loop()
    first = await loop.run_in_executor(None, _first_message, channel)
    config = json.loads(first)
    view = StoreReadView(store_dir, ends_path, int(config["cache_bytes_max"]))
    channel.setblocking(False)
    worker = Worker(channel, config, view)
    worker.tick()
    loop.add_reader(channel.fileno(), worker.on_channel)
    worker.report()  # ready: main hands connections from now on
    loop.add_signal_handler(signal.SIGTERM, worker.done.set)
    ticker = loop.create_task(_tick(worker))
    await worker.done.wait()
    ticker.cancel()
    for connection in list(worker.connections):
        if connection.transport is not None:
            connection.transport.close()
    view.close()


def _first_message(channel: socket.socket) -> bytes:
    data = channel.recv(handoff.MESSAGE_BYTES_MAX)
    if data[:1] != handoff.SETTINGS:
        raise SystemExit("read worker: the channel's first message is not the settings")
    return data[1:]


async def _tick(worker: Worker) -> None:
    reported_s = time.monotonic()
    while True:
        await asyncio.sleep(0.05)
        worker.tick()
        if time.monotonic() - reported_s >= TICK_S:
            reported_s = time.monotonic()
            worker.report()


def main() -> None:
    parser = argparse.ArgumentParser(description="a twinlog read worker (started by the broker)")
    parser.add_argument("--channel-fd", type=int, required=True)
    parser.add_argument("--store-dir", type=Path, required=True)
    parser.add_argument("--ends", type=Path, required=True)
    arguments = parser.parse_args()
    channel = socket.socket(fileno=arguments.channel_fd)
    try:
        import uvloop
        uvloop.run(_run(channel, arguments.store_dir, arguments.ends))
    except ImportError:
        asyncio.run(_run(channel, arguments.store_dir, arguments.ends))


if __name__ == "__main__":
    main()
