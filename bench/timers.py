"""Delayed messages: produce cost, delivery lateness, and what many pending timers cost.

    python bench/timers.py            # the issue's sizes (100,000 due at 5,000/s; 1,000,000)
    python bench/timers.py --quick    # 2 s per produce case, 20,000 due, 200,000 pending

Three parts, each next to a baseline measured in the same run, on `twinlog serve` processes
(ASYNC_MASTER, 1 GiB commit-log files, loopback):
  (a) single JSON produce with `delay_ms` (pending, due in an hour) next to plain single JSON
      produce, alternately on one broker, wrk -c64. Target: ratio >= 0.8.
  (b) lateness: N messages with `deliver_at_ms` spread so that 5,000 a second come due
      (timer lanes, with their rolls), produced in batches before the first is due; once all
      are delivered, each one's store time in its topic minus its due time (TWINLOG_DUE_MS).
      Target: p99 <= 250 ms. The baseline: messages produced plain, their store time minus
      their born time (the gateway's parse: what the path to the log costs without a delay).
  (c) M pending timers (due in two days) on one broker next to M plain messages of the same
      size on another: memory growth from start, resident (mapped log and queue pages
      included: a scheduled copy's record is larger, its properties name its topic and due
      time) and anonymous (the heap), and restart time (SIGTERM, start, /readyz 200), next
      to an empty broker's restart. Targets: growth difference <= 64 MiB, restart <= 3 s.
Data dirs are removed at the end; the load average is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import header, row, stop_process  # noqa: E402
from bench.http_produce import (  # noqa: E402
    CONNECTIONS,
    WRK_THREADS,
    _spawn,
    _wait_for,
    ensure_wrk,
    free_port,
    measure,
)

BATCH = 100
BODY = "x" * 100
DUE_PER_S = 5000


@dataclass
class Broker:
    name: str
    data_dir: Path
    settings: tuple[str, ...]
    process: subprocess.Popen[bytes] | None = None
    url: str = ""

    def start(self) -> float:
        """Start; seconds until /readyz answers 200."""
        port = free_port()
        started = time.perf_counter()
        self.process = _spawn(["-m", "app.cli.main", "serve", "--role", "ASYNC_MASTER",
                               "--http-port", str(port), "--ha-port", str(free_port()),
                               "--data-dir", str(self.data_dir), "--set", "log_level=warning",
                               "--set", "mapped_file_size_bytes=1073741824",
                               "--set", "ha_secret=bench-ha-secret",
                               *(part for s in self.settings for part in ("--set", s))])
        self.url = f"http://127.0.0.1:{port}"
        _wait_for(f"{self.url}/readyz", self.process)
        return time.perf_counter() - started

    def stop(self) -> None:
        if self.process is not None:
            stop_process(self.process)
            self.process = None

    def memory_bytes(self) -> tuple[int, int]:
        """(resident, of which anonymous: the heap, not mapped files) bytes."""
        assert self.process is not None
        found = {}
        with open(f"/proc/{self.process.pid}/status") as status:
            for line in status:
                name, _, value = line.partition(":")
                if name in ("VmRSS", "RssAnon"):
                    found[name] = int(value.split()[0]) * 1024
        return found["VmRSS"], found["RssAnon"]


@contextmanager
def running(root: Path, name: str, *settings: str) -> Iterator[Broker]:
    broker = Broker(name, root / name, settings)
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


def _produce(client: httpx.Client, topic: str, entries: list[dict[str, Any]]) -> None:
    for start in range(0, len(entries), BATCH):
        response = client.post(f"/v1/topics/{topic}/messages:batch",
                               json={"messages": entries[start : start + BATCH]})
        response.raise_for_status()


def _read_all(client: httpx.Client, topic: str, queue_count: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    for queue_id in range(queue_count):
        offset = 0
        while True:
            page = client.get(f"/v1/topics/{topic}/queues/{queue_id}/messages",
                              params={"offset": offset, "max_messages": 1024})
            if page.status_code == 404:
                break
            page.raise_for_status()
            document = page.json()
            messages += document["messages"]
            if document["next_offset"] >= document["max_offset"]:
                break
            offset = document["next_offset"]
    return messages


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def part_produce(wrk: str, root: Path, duration_s: float, rounds: int) -> None:
    print(f"(a) produce with a delay next to plain produce, wrk -t{WRK_THREADS} -c{CONNECTIONS},"
          f" {duration_s:.0f} s per case, {rounds} rounds")
    plain = json.dumps({"body": BODY}).encode()
    delayed = json.dumps({"body": BODY, "delay_ms": 3_600_000}).encode()
    ratios = []
    with running(root, "produce") as broker:
        url = broker.url + "/v1/topics/Bench/messages"
        for _ in range(rounds):
            base = measure(wrk, url, plain, "application/json", duration_s, root)
            late = measure(wrk, url, delayed, "application/json", duration_s, root)
            row("plain single JSON", base.requests_per_s, "req/s")
            row("with delay_ms", late.requests_per_s, "req/s", base.requests_per_s, ">= 0.8")
            ratios.append(late.requests_per_s / base.requests_per_s)
    ratios.sort()
    print(f"  ratios: {', '.join(f'{r:.2f}' for r in ratios)}; median "
          f"{ratios[len(ratios) // 2]:.2f} (target >= 0.8)")


def part_lateness(root: Path, count: int) -> None:
    print(f"(b) lateness: {count:,} messages with deliver_at_ms, {DUE_PER_S:,} due a second")
    with running(root, "lateness") as broker, \
            httpx.Client(base_url=broker.url, timeout=60.0) as client:
        client.post("/v1/topics", json={"name": "Due", "read_queue_count": 4,
                                        "write_queue_count": 4}).raise_for_status()
        client.post("/v1/topics", json={"name": "Plain", "read_queue_count": 4,
                                        "write_queue_count": 4}).raise_for_status()
        # the baseline: plain batches, each message's store time minus its born time (when
        # the gateway parsed it)
        _produce(client, "Plain", [{"body": BODY}] * min(count, 20_000))
        baseline = [float(m["store_timestamp_ms"] - m["born_timestamp_ms"])
                    for m in _read_all(client, "Plain", 4)]
        first_due_ms = time.time_ns() // 1_000_000 + 10_000 + count // 20
        entries = [{"body": BODY, "deliver_at_ms": first_due_ms + index * 1000 // DUE_PER_S}
                   for index in range(count)]
        produced_s = time.perf_counter()
        _produce(client, "Due", entries)
        produced_s = time.perf_counter() - produced_s
        head_room_ms = first_due_ms - time.time_ns() // 1_000_000
        print(f"  produced in {produced_s:.1f} s; the first is due {head_room_ms / 1000:.1f} s "
              "later")
        deadline = time.monotonic() + (first_due_ms - time.time_ns() // 1_000_000) / 1000 \
            + count / DUE_PER_S + 120
        while client.get("/admin/timers").json()["delivered_total"] < count:
            if time.monotonic() > deadline:
                raise SystemExit("not every message was delivered in time")
            time.sleep(0.5)
        timers = client.get("/admin/timers").json()
        delivered = _read_all(client, "Due", 4)
        lateness = [m["store_timestamp_ms"] - int(m["properties"]["TWINLOG_DUE_MS"])
                    for m in delivered]
    assert len(lateness) == count, (len(lateness), count)
    early = sum(1 for value in lateness if value < 0)
    row("plain produce: store time - born time, p50", _percentile(baseline, 0.5), "ms")
    row("plain produce: store time - born time, p99", _percentile(baseline, 0.99), "ms")
    row("delayed: store time - due time, p50", _percentile(lateness, 0.5), "ms")
    row("delayed: store time - due time, p99", _percentile(lateness, 0.99), "ms",
        None, "target <= 250")
    row("delayed: max", max(lateness), "ms")
    print(f"  delivered {len(lateness):,}, early {early}, rolls {timers['rolled_total']:,}, "
          f"write refusals {timers['write_refusals_total']}")


def part_pending(root: Path, count: int) -> None:
    print(f"(c) {count:,} pending timers next to {count:,} plain messages")
    due_ms = time.time_ns() // 1_000_000 + 2 * 86_400_000
    figures: dict[str, tuple[tuple[int, int], float]] = {}
    for name, entry in (("plain", {"body": BODY}),
                        ("pending", {"body": BODY, "deliver_at_ms": due_ms})):
        with running(root, name) as broker, \
                httpx.Client(base_url=broker.url, timeout=60.0) as client:
            before = broker.memory_bytes()
            _produce(client, "Many", [entry] * count)
            time.sleep(2)  # a checkpoint (and the timer state's save) after the last put
            after = broker.memory_bytes()
            grown = (after[0] - before[0], after[1] - before[1])
            if name == "pending":
                pending = client.get("/admin/timers").json()["pending_total"]
                assert pending == count, pending
            broker.stop()
            restart_s = broker.start()
            figures[name] = (grown, restart_s)
    for index, what in ((0, "resident"), (1, "anonymous (heap)")):
        plain, pending = figures["plain"][0][index], figures["pending"][0][index]
        row(f"plain: {what} memory growth", plain / 2**20, "MiB")
        row(f"pending: {what} memory growth", pending / 2**20, "MiB")
        row(f"pending - plain, {what}", (pending - plain) / 2**20, "MiB", None, "target <= 64")
    with running(root, "empty") as empty:
        empty.stop()
        empty_restart_s = empty.start()
    row("empty: restart", empty_restart_s, "s")
    row("plain: restart", figures["plain"][1], "s", empty_restart_s)
    row("pending: restart", figures["pending"][1], "s", empty_restart_s, "target <= 3 s")
    print("  (a plain broker's restart refills its idempotency window from the messages stored "
          "within idempotency_window_s; a pending timer is in a lane, which it skips)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="2 s per produce case, 1 round, 20,000 due, 200,000 pending")
    parser.add_argument("--parts", default="abc", help="which parts to run (default abc)")
    arguments = parser.parse_args()
    duration_s, rounds, due_count, pending_count = (
        (2.0, 1, 20_000, 200_000) if arguments.quick else (5.0, 3, 100_000, 1_000_000))
    header(f"Delayed messages; load average {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory(prefix="twinlog-bench-timers-") as scratch_name:
        root = Path(scratch_name)
        if "a" in arguments.parts:
            part_produce(ensure_wrk(), root, duration_s, rounds)
        if "b" in arguments.parts:
            part_lateness(root, due_count)
        if "c" in arguments.parts:
            part_pending(root, pending_count)
    print(f"  load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
