"""The broker's side of read workers: starts them, hands them read connections, adopts the
connections they hand back, restarts one that dies (boundedly), and keeps their counts.

Main never waits on a worker: a connection is handed in one non-blocking send (when it
fails, main keeps the connection and serves it), and a worker's death only takes it out of
the rotation until it is restarted (docs/read-workers.md).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from app.server.read_workers import handoff

log = logging.getLogger(__name__)

RESTART_PAUSE_S = 1.0
STOP_WAIT_S = 3.0
# Adopts a connection handed back: (socket, the bytes it sent that nobody answered).
Adopt = Callable[[socket.socket, bytes], None]


@dataclass(slots=True)
class _Worker:
    index: int
    process: subprocess.Popen[bytes] | None = None
    channel: socket.socket | None = None
    restarts: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    counted_before: dict[str, int] = field(default_factory=dict)  # its earlier lives' counts
    handed: int = 0
    ready: bool = False  # reported once: its reads are set up

    @property
    def live(self) -> bool:
        return self.channel is not None and self.ready


class ReadWorkers:
    def __init__(self, count: int, config: dict[str, object], store_dir: Path,
                 ends_path: Path, restarts_max: int, adopt: Adopt) -> None:
        self._config = json.dumps(config).encode()
        self._store_dir = store_dir
        self._ends_path = ends_path
        self._restarts_max = restarts_max
        self._adopt = adopt
        self._workers = [_Worker(index) for index in range(count)]
        self._next = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping = False
        self.handed_back = 0

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        for worker in self._workers:
            self._spawn(worker)

    def _spawn(self, worker: _Worker) -> None:
        assert self._loop is not None
        ours, theirs = handoff.control_pair()
        try:
            worker.process = subprocess.Popen(
                [sys.executable, "-m", "app.server.read_workers.worker",
                 "--channel-fd", str(theirs.fileno()), "--store-dir", str(self._store_dir),
                 "--ends", str(self._ends_path)], pass_fds=[theirs.fileno()])
        except OSError:
            ours.close()
            log.exception("read worker %d could not start", worker.index)
            return
        finally:
            theirs.close()
        handoff.send_message(ours, handoff.SETTINGS, self._config)
        ours.setblocking(False)
        worker.channel = ours
        self._loop.add_reader(ours.fileno(), self._on_channel, worker)
        log.info("read worker %d started (pid %d)", worker.index, worker.process.pid)

    def offer(self, connection: socket.socket, carried: bytes) -> bool:
        """Hand a connection to a live worker (round robin); False: none took it."""
        workers = self._workers
        for _ in range(len(workers)):
            worker = workers[self._next]
            self._next = (self._next + 1) % len(workers)
            channel = worker.channel
            if channel is not None and worker.ready \
                    and handoff.send_connection(channel, connection.fileno(), carried):
                worker.handed += 1
                return True
        return False

    def _on_channel(self, worker: _Worker) -> None:
        channel = worker.channel
        while channel is not None:
            try:
                message = handoff.receive(channel)
            except (EOFError, OSError):
                self._lost(worker)
                return
            if message is None:
                return
            if message.kind == handoff.COUNTS:
                worker.counts = json.loads(message.payload)
                worker.ready = True
            elif message.fd is not None:
                self.handed_back += 1
                connection = socket.socket(fileno=message.fd)
                connection.setblocking(False)
                self._adopt(connection, message.payload)

    def _lost(self, worker: _Worker) -> None:
        """A worker's channel closed: it died (or is stopping)."""
        assert self._loop is not None
        if worker.channel is not None:
            self._loop.remove_reader(worker.channel.fileno())
            worker.channel.close()
            worker.channel = None
        worker.ready = False
        for name, value in worker.counts.items():
            worker.counted_before[name] = worker.counted_before.get(name, 0) + value
        worker.counts = {}
        if worker.process is not None:
            try:
                worker.process.wait(STOP_WAIT_S)
            except subprocess.TimeoutExpired:
                worker.process.kill()
                worker.process.wait()
            code = worker.process.returncode
            worker.process = None
            if not self._stopping:
                log.warning("read worker %d ended (exit status %s)", worker.index, code)
        if self._stopping:
            return
        if worker.restarts >= self._restarts_max:
            log.warning("read worker %d stays down (%d restarts, read_worker_restarts_max): "
                        "the broker serves its reads", worker.index, worker.restarts)
            return
        worker.restarts += 1
        self._loop.call_later(RESTART_PAUSE_S, self._restart, worker)

    def _restart(self, worker: _Worker) -> None:
        if not self._stopping and worker.channel is None:
            self._spawn(worker)

    def counts(self) -> list[dict[str, int]]:
        """Each worker's counts over all its lives: reads served, connections handed to it,
        handed back, live (1/0), restarts."""
        found = []
        for worker in self._workers:
            reads = worker.counts.get("reads_served", 0) \
                + worker.counted_before.get("reads_served", 0)
            back = worker.counts.get("handed_back", 0) \
                + worker.counted_before.get("handed_back", 0)
            found.append({"reads_served": reads, "handed": worker.handed, "handed_back": back,
                          "live": int(worker.live), "restarts": worker.restarts})
        return found

    def pids(self) -> list[int | None]:
        return [worker.process.pid if worker.process is not None else None
                for worker in self._workers]

    def stop(self) -> None:
        self._stopping = True
        for worker in self._workers:
            if worker.process is not None:
                try:
                    os.kill(worker.process.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for worker in self._workers:
            self._lost(worker)
