"""Consume reads with read workers on and off, in one run (docs/read-workers.md).

    python bench/read_workers.py                  # 5 s per case, 3 alternating rounds
    python bench/read_workers.py --quick          # 2 s per case, 1 round
    python bench/read_workers.py --workers 2

Two ASYNC_MASTERs (`twinlog serve`), each holding bench/http_consume.py's 10,000 messages of
100 bytes in queue 0 of topic C: one with read_workers=0 (the baseline), one with
read_workers=N. In each round, on each broker in turn:
  (c32)    wrk -t1 -c64 on the 32-message read, reads/s, and the broker's CPU per read in
           microseconds (every process of the broker: the main one and its workers);
  (r32)    Redis 7 `redis-benchmark -c 64 XRANGE s - + COUNT 32`, once a round: (c32) over
           (r32) is issue 27's target (>= 0.3); Redis's CPU per read over the broker's is
           the ratio each would reach with a core of its own;
  together a consumer (wrk -c1, 32 per read) and a producer (wrk -c1, single JSON) at once,
           each over its speed alone on the same broker in the same round (>= 0.7 each).
Medians of the rounds; the load average is printed (the machine may be shared).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import header, row  # noqa: E402
from bench.http_consume import (  # noqa: E402
    BODY_100,
    PRODUCE_PATH,
    READ_PATH,
    _listening_pid,
    _load_average,
    _median,
    _prepare,
    _together,
    redis_server,
    run_get,
    run_post,
    run_redis_xrange,
)
from bench.http_produce import broker, ensure_wrk  # noqa: E402

READY_TIMEOUT_S = 60.0


def _tree(pid: int) -> list[int]:
    """`pid` and its children (a broker's read workers)."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return [pid, *map(int, children)]


def _cpu_s(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


@contextmanager
def _cpu_used(pid: int) -> Iterator[list[float]]:
    """CPU seconds per second of the broker's processes while the block ran."""
    pids = _tree(pid)
    used: list[float] = []
    started_s, started_cpu_s = time.perf_counter(), _cpu_s(pids)
    yield used
    used.append((_cpu_s(pids) - started_cpu_s) / (time.perf_counter() - started_s))


def _wait_workers(url: str, count: int) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    with httpx.Client(base_url=url) as client:
        while time.monotonic() < deadline:
            live = [line for line in client.get("/metrics").text.splitlines()
                    if line.startswith("twinlog_read_worker_live") and line.endswith(" 1.0")]
            if len(live) == count:
                return
            time.sleep(0.2)
    raise RuntimeError(f"{count} read workers not live within {READY_TIMEOUT_S} s")


def _worker_reads(url: str) -> float:
    with httpx.Client(base_url=url) as client:
        return sum(float(line.rsplit(" ", 1)[1]) for line in client.get("/metrics").text
                   .splitlines() if line.startswith("twinlog_read_worker_reads_total"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="2 s per case, 1 round")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--workers", type=int, default=1)
    arguments = parser.parse_args()
    duration_s, rounds = (2.0, 1) if arguments.quick else (5.0, 3)
    rounds = arguments.rounds or rounds
    wrk = ensure_wrk()
    header(f"consume reads, read_workers 0 and {arguments.workers}, {duration_s:.0f} s per "
           f"case, medians of {rounds} rounds, {os.cpu_count()} CPUs, load average "
           f"{_load_average()}")
    scratch = Path(tempfile.mkdtemp(prefix="twinlog-bench-workers-"))
    figures: dict[str, list[float]] = {}
    single = json.dumps({"body": BODY_100}).encode()
    try:
        with ExitStack() as stack:
            urls = {"off": stack.enter_context(broker(scratch, "ASYNC_MASTER", name="-off")),
                    "on": stack.enter_context(broker(
                        scratch, "ASYNC_MASTER", name="-on",
                        settings=(f"read_workers={arguments.workers}",)))}
            for url in urls.values():
                _prepare(url)
            _wait_workers(urls["on"], arguments.workers)
            pids = {side: _listening_pid(int(url.rsplit(":", 1)[1]))
                    for side, url in urls.items()}
            redis_port, redis_pid = stack.enter_context(redis_server(scratch))
            for url in urls.values():  # warm-up
                run_get(wrk, url + READ_PATH.format(count=32), 1, scratch)
            served_before = _worker_reads(urls["on"])
            for _ in range(rounds):
                with _cpu_used(redis_pid) as redis_cpu:
                    redis_reads = run_redis_xrange(redis_port, duration_s)
                _note(figures, "r32", redis_reads)
                _note(figures, "r32 cpu us", redis_cpu[0] / redis_reads * 1e6)
                for side, url in urls.items():
                    with _cpu_used(pids[side]) as cpu:
                        reads = run_get(wrk, url + READ_PATH.format(count=32), duration_s,
                                        scratch)
                    _note(figures, f"{side} c32", reads.requests_per_s)
                    _note(figures, f"{side} c32/r32", reads.requests_per_s / redis_reads)
                    _note(figures, f"{side} cpu us", cpu[0] / reads.requests_per_s * 1e6)
                    _note(figures, f"{side} cpu c32", cpu[0])
                    _note(figures, f"{side} r32/c32 cpu", figures["r32 cpu us"][-1]
                          / figures[f"{side} cpu us"][-1])
                    alone_consume = run_get(wrk, url + READ_PATH.format(count=32), duration_s,
                                            scratch, connections=1)
                    alone_produce = run_post(wrk, url + PRODUCE_PATH, single, duration_s,
                                             scratch, connections=1)
                    with _cpu_used(pids[side]) as both_cpu:
                        both_consume, both_produce = _together(wrk, url, duration_s, scratch)
                    _note(figures, f"{side} consume kept",
                          both_consume.requests_per_s / alone_consume.requests_per_s)
                    _note(figures, f"{side} produce kept",
                          both_produce.requests_per_s / alone_produce.requests_per_s)
                    _note(figures, f"{side} cpu together", both_cpu[0])
            served = _worker_reads(urls["on"]) - served_before
        _show(figures, rounds, served)
        print(f"  load average at the end: {_load_average()}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _note(figures: dict[str, list[float]], name: str, value: float) -> None:
    figures.setdefault(name, []).append(value)


def _show(figures: dict[str, list[float]], rounds: int, worker_reads: float) -> None:
    median = {name: _median(values) for name, values in figures.items()}
    row("(r32) Redis XRANGE COUNT 32", median["r32"], "reads/s")
    print(f"  {'':<44} Redis's CPU per XRANGE {_listed(figures['r32 cpu us'])} us")
    for side in ("off", "on"):
        row(f"(c32) workers {side}, reads/s over (r32)", median[f"{side} c32"], "reads/s",
            median["r32"], "target >= 0.3")
        print(f"  {'':<44} per round {_listed(figures[f'{side} c32/r32'])}; CPU per read "
              f"{_listed(figures[f'{side} cpu us'])} us (all processes), "
              f"{_listed(figures[f'{side} cpu c32'])} CPU-s/s")
        print(f"  {'':<44} Redis's CPU per read over this: "
              f"{_listed(figures[f'{side} r32/c32 cpu'])} (median "
              f"{median[f'{side} r32/c32 cpu']:.2f}): the reads/s ratio a core each would give")
        print(f"  {'':<44} together, kept: consumer {_listed(figures[f'{side} consume kept'])}"
              f" (median {median[f'{side} consume kept']:.2f}), producer "
              f"{_listed(figures[f'{side} produce kept'])} (median "
              f"{median[f'{side} produce kept']:.2f}); CPU-s/s "
              f"{_listed(figures[f'{side} cpu together'])}")
    print(f"  reads the workers answered during the {rounds} rounds: {worker_reads:,.0f}")


def _listed(values: list[float]) -> str:
    return ", ".join(f"{value:.2f}" for value in values)


if __name__ == "__main__":
    main()
