"""CPU of a broker holding 1,000 long-poll reads over 10 idle seconds, next to the same broker
with none.

    python bench/long_poll_idle.py                 # 1,000 readers, 10 s windows
    python bench/long_poll_idle.py --readers 200 --idle-s 3

A waiting read is an asyncio event woken by dispatch, not a polling loop: the two windows
should cost about the same. Then one message per queue wakes every reader, and the time until
all have answered is printed.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import header, row  # noqa: E402
from bench.serve import cpu_seconds, serve  # noqa: E402

TOPIC = "LongPollIdle"
QUEUE_COUNT = 8
WAIT_MS = 120_000
PARK_TIMEOUT_S = 120.0


async def _waiters(client: httpx.AsyncClient) -> int:
    for line in (await client.get("/metrics")).text.splitlines():
        if line.startswith("twinlog_long_poll_waiters "):
            return int(float(line.split()[1]))
    raise RuntimeError("twinlog_long_poll_waiters missing from /metrics")


async def _run(url: str, pid: int, readers: int, idle_s: float) -> None:
    limits = httpx.Limits(max_connections=readers + 8, max_keepalive_connections=readers + 8)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=WAIT_MS / 1000 + 30) \
            as client:
        created = await client.post("/v1/topics", json={
            "name": TOPIC, "read_queue_count": QUEUE_COUNT, "write_queue_count": QUEUE_COUNT})
        created.raise_for_status()
        before = cpu_seconds(pid)
        await asyncio.sleep(idle_s)
        idle_cpu_s = cpu_seconds(pid) - before
        reads = [asyncio.create_task(client.get(
            f"/v1/topics/{TOPIC}/queues/{index % QUEUE_COUNT}/messages",
            params={"wait_ms": WAIT_MS})) for index in range(readers)]
        deadline = time.monotonic() + PARK_TIMEOUT_S
        while await _waiters(client) < readers:
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {await _waiters(client)} of {readers} reads parked")
            await asyncio.sleep(0.1)
        before = cpu_seconds(pid)
        await asyncio.sleep(idle_s)
        parked_cpu_s = cpu_seconds(pid) - before
        started = time.monotonic()
        for queue_id in range(QUEUE_COUNT):
            put = await client.post(f"/v1/topics/{TOPIC}/messages",
                                    json={"body": "wake", "queue_id": queue_id})
            put.raise_for_status()
        answers = await asyncio.gather(*reads)
        woken_s = time.monotonic() - started
    assert all(len(answer.json()["messages"]) == 1 for answer in answers)
    row(f"broker CPU over {idle_s:g} idle s, no reader", idle_cpu_s * 1000, "ms")
    row(f"broker CPU over {idle_s:g} idle s, {readers} parked", parked_cpu_s * 1000, "ms",
        idle_cpu_s * 1000 or None)
    row(f"{readers} reads woken and answered", woken_s * 1000, "ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--readers", type=int, default=1000)
    parser.add_argument("--idle-s", type=float, default=10.0)
    args = parser.parse_args()
    header(f"long poll: {args.readers} parked reads")
    with (tempfile.TemporaryDirectory(prefix="twinlog-long-poll-") as root,
          serve(Path(root) / "broker", long_poll_wait_ms_max=WAIT_MS,
                long_poll_waiters_max=args.readers + 8, http_connections_max=args.readers + 64,
                mapped_file_size_bytes=1 << 26) as served):
        asyncio.run(_run(served.url, served.pid, args.readers, args.idle_s))


if __name__ == "__main__":
    main()
