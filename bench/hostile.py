"""Hostile clients against a real `twinlog serve`, while normal producers run (issue 12).

    python bench/hostile.py            # 500 slowloris, 50 x 100 MB floods, 16 producers
    python bench/hostile.py --quick    # the same, shorter phases

One broker (ASYNC_MASTER, a token, the default gateway limits unless given), then two phases of
the same 16 keep-alive producers (single JSON produce, 100-byte bodies):
  1. baseline: the producers alone;
  2. attack: the producers, plus 500 slowloris connections (a partial request head, one more
     byte a second) and 50 flood clients without a token, half sending a 100 MB header, half a
     100 MB `POST /v1/topics` body; every attacker that is refused or cut reconnects at once.
Printed: the producers' p50/p99 in each phase and their ratio (target: attack p99 <= 3x the
baseline p99), the broker's resident memory before and at its peak (bound: +RSS_GROWTH_MAX),
and how every attacker connection ended: refused (an HTTP answer: 401, 408, 431, 503), cut (a
close without one), or overdue (still open past its deadline: must be 0). Stops by itself.
tests/e2e/test_hostile_clients.py runs a smaller version of the same.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from multiprocessing.synchronize import Event as ProcessEvent
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.server.port_file import read_port_file  # noqa: E402
from bench.common import stop_process  # noqa: E402

TOKEN = "hostile-bench-token"
RSS_GROWTH_MAX = 64 * 1024 * 1024
FLOOD_BYTES = 100 * 1024 * 1024
FLOOD_BLOCK = b"a" * (256 * 1024)
TOPIC_PATH = "/v1/topics/Hostile/messages"
PRODUCE_BODY = json.dumps({"body": "x" * 100}).encode()
# An attacker may outlive its deadline by the sweep interval (0.5 s) and a loaded host's slack.
DEADLINE_SLACK_S = 3.0
# A flood client that was refused or cut tries again after this (a client honouring
# Retry-After would wait longer); a slowloris reconnects at once.
FLOOD_RETRY_S = 0.5
START_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Plan:
    slowloris: int = 500
    floods: int = 50
    producers: int = 16
    baseline_s: float = 10.0
    attack_s: float = 15.0
    flood_bytes: int = FLOOD_BYTES
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0


@dataclass
class Latencies:
    seconds: list[float] = field(default_factory=list)
    errors: int = 0

    def percentile_ms(self, fraction: float) -> float:
        ordered = sorted(self.seconds)
        if not ordered:
            return float("nan")
        return 1000 * ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


@dataclass
class Report:
    plan: Plan
    baseline: Latencies
    attack: Latencies
    rss_before_bytes: int
    rss_peak_bytes: int
    outcomes: Counter[str]
    answers: Counter[int]
    broker_counts: dict[str, float]

    @property
    def p99_ratio(self) -> float:
        return self.attack.percentile_ms(0.99) / self.baseline.percentile_ms(0.99)

    def lines(self) -> list[str]:
        b, a, plan = self.baseline, self.attack, self.plan
        return [
            f"hostile clients: {plan.slowloris} slowloris, {plan.floods} floods of "
            f"{plan.flood_bytes >> 20} MB (half headers, half bodies, no token), "
            f"{plan.producers} producers; head deadline {plan.header_timeout_s:g} s",
            f"  producers, baseline ({plan.baseline_s:g} s): {len(b.seconds)} puts, "
            f"p50 {b.percentile_ms(0.5):.2f} ms, p99 {b.percentile_ms(0.99):.2f} ms, "
            f"{b.errors} errors",
            f"  producers, attack   ({plan.attack_s:g} s): {len(a.seconds)} puts, "
            f"p50 {a.percentile_ms(0.5):.2f} ms, p99 {a.percentile_ms(0.99):.2f} ms, "
            f"{a.errors} errors",
            f"  p99 attack / baseline: {self.p99_ratio:.2f} (target <= 3)",
            f"  broker RSS: {self.rss_before_bytes / 2**20:.0f} MiB before, peak "
            f"{self.rss_peak_bytes / 2**20:.0f} MiB (bound: +{RSS_GROWTH_MAX >> 20} MiB)",
            f"  attacker connections: {dict(sorted(self.outcomes.items()))}, answers "
            f"{dict(sorted(self.answers.items()))}",
            f"  broker counts: {self.broker_counts}",
        ]


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


# -- the broker ----------------------------------------------------------------------------------


@contextlib.contextmanager
def broker(plan: Plan, root: Path) -> Iterator[tuple[int, int]]:
    """A `twinlog serve` on fresh ports: (http port, pid); stopped at the end."""
    port_file = root / "ports.json"
    environment = {key: value for key, value in os.environ.items()
                   if not key.startswith("TWINLOG_")}
    environment["PYTHONPATH"] = str(ROOT)
    environment["TWINLOG_AUTH_TOKENS"] = json.dumps({TOKEN: ["produce", "admin"]})
    settings = {"ha_secret": "hostile-bench-secret", "log_level": "warning",
                "http_header_timeout_s": plan.header_timeout_s,
                "http_body_timeout_s": plan.body_timeout_s,
                "mapped_file_size_bytes": 64 << 20, "disk_max_used_ratio": 0.99}
    arguments = [sys.executable, "-m", "app.cli.main", "serve", "--data-dir", str(root / "data"),
                 "--http-port", "0", "--ha-port", "0", "--port-file", str(port_file)]
    for name, value in settings.items():
        arguments += ["--set", f"{name}={value}"]
    with (root / "broker.log").open("wb") as log:
        process = subprocess.Popen(arguments, cwd=ROOT, env=environment, stdout=log,
                                   stderr=subprocess.STDOUT)
    try:
        deadline_s = time.monotonic() + START_TIMEOUT_S
        while (ports := read_port_file(port_file)) is None:
            if process.poll() is not None or time.monotonic() > deadline_s:
                raise RuntimeError(f"the broker did not start:\n{_tail(root / 'broker.log')}")
            time.sleep(0.05)
        yield ports[0], process.pid
    finally:
        stop_process(process)


def _tail(path: Path) -> str:
    return path.read_text(errors="replace")[-3000:]


# -- clients -------------------------------------------------------------------------------------


async def _read_answer(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    return status, await reader.readexactly(length)


async def producer(port: int, stop: asyncio.Event, phase: list[Latencies]) -> None:
    """Keep-alive single produces, one at a time; each latency goes to the current phase."""
    request = (f"POST {TOPIC_PATH} HTTP/1.1\r\nhost: 127.0.0.1\r\n"
               f"authorization: Bearer {TOKEN}\r\ncontent-type: application/json\r\n"
               f"content-length: {len(PRODUCE_BODY)}\r\n\r\n").encode() + PRODUCE_BODY
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            phase[0].errors += 1
            await asyncio.sleep(0.05)
            continue
        try:
            while not stop.is_set():
                started_s = loop.time()
                writer.write(request)
                status, _ = await _read_answer(reader)
                latencies = phase[0]
                latencies.seconds.append(loop.time() - started_s)
                if status != 201:
                    latencies.errors += 1
        except (OSError, asyncio.IncompleteReadError):
            phase[0].errors += 1
        finally:
            writer.close()


@dataclass
class Attack:
    port: int
    plan: Plan
    stop: asyncio.Event
    outcomes: Counter[str] = field(default_factory=Counter)
    answers: Counter[int] = field(default_factory=Counter)

    async def _ended(self, reader: asyncio.StreamReader, opened_s: float,
                     deadline_s: float) -> None:
        """Wait for the server to answer and close; record how the connection ended."""
        loop = asyncio.get_running_loop()
        answered = False
        while True:
            remaining_s = opened_s + deadline_s + DEADLINE_SLACK_S - loop.time()
            try:
                if self.stop.is_set() or remaining_s <= 0:
                    raise TimeoutError
                if not answered:
                    status, _ = await asyncio.wait_for(_read_answer(reader), remaining_s)
                    self.answers[status] += 1
                    answered = True
                elif not await asyncio.wait_for(reader.read(65536), remaining_s):
                    break
            except TimeoutError:
                over = loop.time() - opened_s > deadline_s + DEADLINE_SLACK_S
                self.outcomes["overdue" if over else "open at the end"] += 1
                return
            except (OSError, asyncio.IncompleteReadError):
                break
        self.outcomes["refused" if answered else "cut"] += 1

    async def _attempts(self, head: bytes,
                        feed: Callable[[asyncio.StreamWriter], Coroutine[Any, Any, None]],
                        retry_s: float) -> None:
        """Connect, send `head`, keep feeding, until the server ends it; then again."""
        loop = asyncio.get_running_loop()
        while not self.stop.is_set():
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
            except OSError:
                self.outcomes["connect failed"] += 1
                await asyncio.sleep(0.2)
                continue
            writer.write(head)
            feeding = asyncio.create_task(feed(writer))
            await self._ended(reader, loop.time(), self.plan.header_timeout_s)
            feeding.cancel()
            writer.close()
            await asyncio.sleep(retry_s)

    async def slowloris(self) -> None:
        """A partial request head, one more byte each second; reconnects at once."""
        head = f"POST {TOPIC_PATH} HTTP/1.1\r\nhost: 127.0.0.1\r\nx-slow: ".encode()
        await self._attempts(head, self._trickle, 0.0)

    @staticmethod
    async def _trickle(writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError):
            while True:
                await asyncio.sleep(1.0)
                writer.write(b"s")
                await writer.drain()

    async def flood(self, header: bool) -> None:
        """A 100 MB header (GET /healthz) or body (POST /v1/topics, no token), streamed."""
        if header:
            head = b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\nx-filler: "
        else:
            head = (f"POST /v1/topics HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: "
                    f"application/json\r\ncontent-length: {self.plan.flood_bytes}\r\n\r\n"
                    ).encode()
        await self._attempts(head, self._stream, FLOOD_RETRY_S)

    async def _stream(self, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError):
            for _ in range(self.plan.flood_bytes // len(FLOOD_BLOCK)):
                writer.write(FLOOD_BLOCK)
                await writer.drain()


async def _sample_rss(pid: int, stop: asyncio.Event, peak: list[int]) -> None:
    while not stop.is_set():
        peak[0] = max(peak[0], rss_bytes(pid))
        await asyncio.sleep(0.1)


async def _broker_counts(port: int) -> dict[str, float]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET /metrics HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer {TOKEN}"
                 "\r\n\r\n".encode())
    _, body = await _read_answer(reader)
    writer.close()
    counts = {}
    for line in body.decode().splitlines():
        if line.startswith("twinlog_http_connections_cut_total{"):
            reason = line.split('"')[1]
            counts[reason] = float(line.rsplit(" ", 1)[1])
    return counts


async def _attack(plan: Plan, port: int, started: ProcessEvent, stop: ProcessEvent,
                  results: multiprocessing.SimpleQueue[tuple[Counter[str], Counter[int]]]
                  ) -> None:
    attack = Attack(port, plan, asyncio.Event())
    attackers = [asyncio.create_task(attack.slowloris()) for _ in range(plan.slowloris)]
    attackers += [asyncio.create_task(attack.flood(header=n % 2 == 0))
                  for n in range(plan.floods)]
    started.set()
    while not stop.is_set():
        await asyncio.sleep(0.1)
    attack.stop.set()
    await asyncio.gather(*attackers, return_exceptions=True)
    results.put((attack.outcomes, attack.answers))


def _attack_process(plan: Plan, port: int, started: ProcessEvent, stop: ProcessEvent,
                    results: multiprocessing.SimpleQueue[tuple[Counter[str], Counter[int]]]
                    ) -> None:
    asyncio.run(_attack(plan, port, started, stop, results))


async def _run(plan: Plan, port: int, pid: int, started: ProcessEvent,
               stop_attack: ProcessEvent) -> tuple[Latencies, Latencies, int, int]:
    """The producers' two phases; the attack (another process) starts between them."""
    stop_producers = asyncio.Event()
    phase = [Latencies()]
    producers = [asyncio.create_task(producer(port, stop_producers, phase))
                 for _ in range(plan.producers)]
    await asyncio.sleep(1.0)  # warm up: topic auto-created, connections open
    baseline = phase[0] = Latencies()
    await asyncio.sleep(plan.baseline_s)
    rss_before = rss_bytes(pid)
    peak = [rss_before]
    sampling = asyncio.Event()
    sampler = asyncio.create_task(_sample_rss(pid, sampling, peak))
    started.set()  # the attack process waits for this
    under_attack = phase[0] = Latencies()
    await asyncio.sleep(plan.attack_s)
    stop_producers.set()
    stop_attack.set()
    sampling.set()
    await asyncio.gather(*producers, sampler, return_exceptions=True)
    return baseline, under_attack, rss_before, peak[0]


def run(plan: Plan) -> Report:
    """Start a broker, run both phases with the attack in a process of its own (its client
    work must not delay the producers' event loop), and report."""
    context = multiprocessing.get_context("fork")
    go, stop = context.Event(), context.Event()
    results: multiprocessing.SimpleQueue[tuple[Counter[str], Counter[int]]] = \
        context.SimpleQueue()
    with tempfile.TemporaryDirectory(prefix="twinlog-hostile-") as root, \
            broker(plan, Path(root)) as (port, pid):
        attacker = context.Process(target=_attack_process, args=(plan, port, go, stop, results),
                                   daemon=True)
        attacker.start()
        try:
            baseline, under_attack, rss_before, rss_peak = asyncio.run(
                _run(plan, port, pid, go, stop))
            outcomes, answers = results.get()
        finally:
            stop.set()
            attacker.join(30)
            if attacker.is_alive():
                attacker.kill()
        counts = asyncio.run(_broker_counts(port))
    return Report(plan, baseline, under_attack, rss_before, rss_peak, outcomes, answers,
                  counts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="5 s phases instead of 10/15 s")
    arguments = parser.parse_args()
    plan = Plan(baseline_s=5.0, attack_s=12.0) if arguments.quick else Plan()
    report = run(plan)
    print("\n".join(report.lines()))


if __name__ == "__main__":
    main()
