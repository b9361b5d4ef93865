"""Group consumption (receive + ack) over HTTP, next to the per-queue consume with offset
commits and to Redis Streams consumer groups, and the lateness of redeliveries.

    python bench/group_consume.py            # 16,000 messages a case, 10,000 in flight
    python bench/group_consume.py --quick    # 4,000 messages a case, 2,000 in flight

One SYNC_MASTER with a live SLAVE process (every receive, ack and commit is a record its
slave holds before the answer); a real redis-server master with one replica. Each case
drains the same number of 100-byte messages produced beforehand, with 8 consumers on
asyncio (one connection each), 32 messages a request:
  (q) per-queue consume: each consumer owns one of the topic's 8 queues, reads 32 from its
      offset, then commits the offset after them (PUT .../offsets/...);
  (p) group consumption: each consumer receives up to 32 (the broker chooses queues), then
      acks their handles;
  (r) Redis Streams: XREADGROUP COUNT 32, then XACK of their ids and WAIT 1 (the replica
      holds the acks, as twinlog's slave does).
Targets: (p) >= 0.5 of (q), (p) >= 1.0 of (r).
Redelivery lateness: N messages received at once (invisible 2 s) and never acked; 8
receivers long-poll (1,024 a receive). End to end: for each message back, the time its
receive answered minus the invisible time its first receive answered (the same with one
message in flight is the baseline); it includes receiving N messages again, which takes
N / (receive throughput). Broker: when the master's expiry tick ended the delivery (the
message is receivable from then on) minus its invisible time, the bucket bounds of
twinlog_pop_redelivery_lateness_seconds. Target: p99 <= 250 ms with 10,000 in flight.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import header, row  # noqa: E402
from bench.http_produce import broker, free_port  # noqa: E402
from bench.redis_stream import ensure_redis_server, redis_pair  # noqa: E402

CONSUMERS = 8
BATCH = 32
QUEUES = 8
BODY = "x" * 100
INVISIBLE_MS = 2_000
SETTINGS = ("pop_invisible_ms_min=1000", "pop_in_flight_per_group_max=100000",
            "pop_window_max=4096", "max_batch_messages=1000")


@dataclass(frozen=True, slots=True)
class Drain:
    messages: int
    elapsed_s: float

    @property
    def per_s(self) -> float:
        return self.messages / self.elapsed_s


async def _produce(client: httpx.AsyncClient, topic: str, count: int) -> None:
    await client.post("/v1/topics", json={"name": topic, "read_queue_count": QUEUES,
                                          "write_queue_count": QUEUES})
    for start in range(0, count, 1000):
        batch = [{"body": BODY} for _ in range(min(1000, count - start))]
        response = await client.post(f"/v1/topics/{topic}/messages:batch",
                                     json={"messages": batch})
        response.raise_for_status()


async def _group(client: httpx.AsyncClient, name: str) -> None:
    (await client.post("/v1/groups", json={"name": name})).raise_for_status()


async def per_queue(url: str, topic: str, group: str, count: int) -> Drain:
    """(q): consumer i reads queue i from its offset and commits after each read."""
    done = [0]

    async def consumer(queue_id: int) -> None:
        offset = 0
        async with httpx.AsyncClient(base_url=url, timeout=30.0) as client:
            while True:
                answer = (await client.get(f"/v1/topics/{topic}/queues/{queue_id}/messages",
                                           params={"offset": offset,
                                                   "max_messages": BATCH})).json()
                if not answer["messages"]:
                    return
                offset = answer["next_offset"]
                response = await client.put(
                    f"/v1/groups/{group}/offsets/{topic}/queues/{queue_id}",
                    json={"offset": offset})
                response.raise_for_status()
                done[0] += len(answer["messages"])

    started = time.perf_counter()
    await asyncio.gather(*(consumer(queue_id) for queue_id in range(QUEUES)))
    elapsed = time.perf_counter() - started
    assert done[0] == count, (done[0], count)
    return Drain(done[0], elapsed)


async def receive_ack(url: str, topic: str, group: str, count: int) -> Drain:
    """(p): receive up to 32 (the broker chooses), ack their handles."""
    done = [0]
    path = f"/v1/groups/{group}/topics/{topic}/messages"

    async def consumer() -> None:
        async with httpx.AsyncClient(base_url=url, timeout=30.0) as client:
            while done[0] < count:
                response = await client.post(path + ":receive", json={
                    "max_messages": BATCH, "invisible_ms": 60_000})
                response.raise_for_status()
                messages = response.json()["messages"]
                if not messages:
                    return
                ack = await client.post(path + ":ack", json={
                    "receipt_handles": [message["receipt_handle"] for message in messages]})
                ack.raise_for_status()
                done[0] += len(messages)

    started = time.perf_counter()
    await asyncio.gather(*(consumer() for _ in range(CONSUMERS)))
    elapsed = time.perf_counter() - started
    assert done[0] == count, (done[0], count)
    return Drain(done[0], elapsed)


async def redis_streams(redis_url: str, count: int) -> Drain:
    """(r): XREADGROUP COUNT 32 + XACK + WAIT 1, 8 consumers, one connection each."""
    import redis.asyncio as redis_async

    setup = redis_async.Redis.from_url(redis_url)
    stream, group = "bench-group", "g"
    for start in range(0, count, 1000):
        pipe = setup.pipeline(transaction=False)
        for _ in range(min(1000, count - start)):
            pipe.xadd(stream, {"body": BODY})
        await pipe.execute()
    await setup.xgroup_create(stream, group, id="0")
    await setup.aclose()
    done = [0]

    async def consumer(name: str) -> None:
        pool = redis_async.BlockingConnectionPool.from_url(redis_url, max_connections=1)
        client = redis_async.Redis(connection_pool=pool)
        try:
            while True:
                answer = await client.xreadgroup(group, name, {stream: ">"}, count=BATCH)
                entries = answer[0][1] if answer else []
                if not entries:
                    return
                pipe = client.pipeline(transaction=False)
                pipe.xack(stream, group, *[entry_id for entry_id, _ in entries])
                pipe.execute_command("WAIT", 1, 5000)
                await pipe.execute()
                done[0] += len(entries)
        finally:
            await client.aclose()
            await pool.aclose()

    started = time.perf_counter()
    await asyncio.gather(*(consumer(f"c{number}") for number in range(CONSUMERS)))
    elapsed = time.perf_counter() - started
    assert done[0] == count, (done[0], count)
    return Drain(done[0], elapsed)


async def redelivery_lateness(url: str, topic: str, group: str, count: int) -> list[float]:
    """Receive `count` messages and ack none; the lateness (ms) of each one's redelivery."""
    path = f"/v1/groups/{group}/topics/{topic}/messages"
    until: dict[str, int] = {}
    late_ms: list[float] = []
    async with httpx.AsyncClient(base_url=url, timeout=30.0) as client:
        while len(until) < count:
            response = await client.post(path + ":receive", json={
                "max_messages": min(1024, count - len(until)), "invisible_ms": INVISIBLE_MS})
            response.raise_for_status()
            for message in response.json()["messages"]:
                until[message["msg_id"]] = message["invisible_until_ms"]

    async def receiver() -> None:
        async with httpx.AsyncClient(base_url=url, timeout=30.0) as client:
            while len(late_ms) < count:
                response = await client.post(path + ":receive", json={
                    "max_messages": 1024, "invisible_ms": 60_000, "wait_ms": 500})
                response.raise_for_status()
                now_ms = time.time() * 1000
                messages = response.json()["messages"]
                late_ms.extend(now_ms - until[message["msg_id"]] for message in messages)
                if messages:
                    await client.post(path + ":ack", json={
                        "receipt_handles": [message["receipt_handle"] for message in messages]})

    await asyncio.wait_for(asyncio.gather(*(receiver() for _ in range(CONSUMERS))),
                           INVISIBLE_MS / 1000 + 120)
    return sorted(late_ms)


async def _expiry_buckets(url: str) -> dict[float, float]:
    """The broker's twinlog_pop_redelivery_lateness_seconds buckets: bound (ms) -> count."""
    async with httpx.AsyncClient(base_url=url, timeout=30.0) as client:
        text = (await client.get("/metrics")).text
    buckets = {}
    for line in text.splitlines():
        if line.startswith("twinlog_pop_redelivery_lateness_seconds_bucket"):
            bound = line.split('le="', 1)[1].split('"', 1)[0]
            buckets[float("inf") if bound == "+Inf" else float(bound) * 1000] = \
                float(line.rsplit(" ", 1)[1])
    return buckets


def _bucket_quantile(before: dict[float, float], after: dict[float, float],
                     fraction: float) -> float:
    """The bucket bound (ms) the quantile of the observations between two scrapes is under."""
    counts = {bound: after[bound] - before.get(bound, 0.0) for bound in sorted(after)}
    total = counts[float("inf")]
    return next(bound for bound, count in counts.items() if count >= total * fraction)


def _quantile(values: list[float], fraction: float) -> float:
    return values[min(len(values) - 1, int(len(values) * fraction))]


async def _run(url: str, redis_url: str, count: int, in_flight: int) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=60.0) as client:
        for topic in ("PerQueue", "Pop", "Late", "Late1"):
            await _produce(client, topic, {"Late": in_flight, "Late1": 1}.get(topic, count))
        for group in ("q", "p", "late", "late1"):
            await _group(client, group)
    queue = await per_queue(url, "PerQueue", "q", count)
    pop = await receive_ack(url, "Pop", "p", count)
    streams = await redis_streams(redis_url, count)
    header(f"group consumption: {count:,} messages a case, {CONSUMERS} consumers, "
           f"{BATCH} a request (load average {os.getloadavg()[0]:.2f})")
    row("(q) per-queue consume + offset commits", queue.per_s, "msg/s")
    row("(p) receive + ack", pop.per_s, "msg/s", queue.per_s, "target >= 0.5 of (q)")
    row("(r) Redis XREADGROUP + XACK + WAIT 1", streams.per_s, "msg/s")
    row("(p) receive + ack, against (r)", pop.per_s, "msg/s", streams.per_s,
        "target >= 1.0 of (r)")
    one = await redelivery_lateness(url, "Late1", "late1", 1)
    before = await _expiry_buckets(url)
    many = await redelivery_lateness(url, "Late", "late", in_flight)
    after = await _expiry_buckets(url)
    header(f"redelivery lateness after a {INVISIBLE_MS} ms invisible time")
    row("end to end, 1 in flight", one[0], "ms")
    row(f"end to end, {in_flight:,} in flight: p50", _quantile(many, 0.5), "ms")
    row(f"end to end, {in_flight:,} in flight: p99", _quantile(many, 0.99), "ms", None,
        "target <= 250 ms")
    row(f"broker, {in_flight:,} in flight: p50 at most", _bucket_quantile(before, after, 0.5),
        "ms")
    row(f"broker, {in_flight:,} in flight: p99 at most", _bucket_quantile(before, after, 0.99),
        "ms", None, "target <= 250 ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    arguments = parser.parse_args()
    count, in_flight = (4_000, 2_000) if arguments.quick else (16_000, 10_000)
    server = ensure_redis_server()
    scratch = Path(tempfile.mkdtemp(prefix="twinlog-group-consume-"))
    try:
        with broker(scratch, "SYNC_MASTER", with_slave=True, settings=SETTINGS) as url, \
                redis_pair(server, scratch, free_port(), free_port()) as redis_url:
            asyncio.run(_run(url, redis_url, count, in_flight))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
