"""Group consumption (receive + ack) over HTTP, next to the per-queue consume with offset
commits and to Redis Streams consumer groups, and the lateness of redeliveries.

    python bench/group_consume.py            # 16,000 messages a case, 10,000 in flight
    python bench/group_consume.py --quick    # 4,000 messages a case, 2,000 in flight
    python bench/group_consume.py --old-tree ../wt-old   # and that checkout's broker, in turn

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
receivers long-poll (1,024 a receive). Two figures, which mean different things:
  broker: when the master's expiry tick ended the delivery (the message is receivable from
      then on: its retry copy is in the retry queue once dispatch has passed it) minus its
      invisible time; the bucket bounds of twinlog_pop_redelivery_lateness_seconds. This is
      the broker's own lateness.
  end to end: for each message back, the time its receive answered minus the invisible time
      its first receive answered (the same with one message in flight is the baseline). It
      includes receiving all N again, which takes N / (receive throughput), shown as the
      redelivery drain rate: with N expiring in one burst, the last of them cannot be
      answered before N / rate.
Target: p99 <= 250 ms with 10,000 in flight.
Master CPU per message of (p) is the master process's CPU (user + system) over the case,
the figure load moves least; with --old-tree each tree's broker runs every case in turn
(old, new, ...) and the new/old ratios of one round are printed.
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

from bench.common import cpu_s, header, row  # noqa: E402
from bench.http_produce import broker_processes, free_port  # noqa: E402
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


async def redelivery_lateness(url: str, topic: str, group: str,
                              count: int) -> tuple[list[float], Drain]:
    """Receive `count` messages and ack none; the lateness (ms) of each one's redelivery, and
    the drain of the redelivery (from the first invisible time to the last one back)."""
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
    drain_s = (time.time() * 1000 - min(until.values())) / 1000
    return sorted(late_ms), Drain(count, drain_s)


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


@dataclass(frozen=True, slots=True)
class Figures:
    """One broker's cases."""

    queue: Drain
    pop: Drain
    pop_cpu_us: float  # master CPU per message of (p)
    batch_mean: float | None  # receives and acks a decision answered (None: not counted)
    one_ms: float
    many_ms: list[float]
    drain: Drain  # the redelivery: N messages received again
    broker_p50_ms: float
    broker_p99_ms: float


async def _counter(url: str, name: str) -> float | None:
    async with httpx.AsyncClient(base_url=url, timeout=30.0) as client:
        text = (await client.get("/metrics")).text
    values = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
              if line.startswith(name + " ")]
    return values[0] if values else None


async def _cases(url: str, master_pid: int, count: int, in_flight: int) -> Figures:
    async with httpx.AsyncClient(base_url=url, timeout=60.0) as client:
        for topic in ("PerQueue", "Pop", "Late", "Late1"):
            await _produce(client, topic, {"Late": in_flight, "Late1": 1}.get(topic, count))
        for group in ("q", "p", "late", "late1"):
            await _group(client, group)
    queue = await per_queue(url, "PerQueue", "q", count)
    decisions = await _counter(url, "twinlog_pop_decisions_total")
    requests = await _counter(url, "twinlog_pop_decided_requests_total")
    cpu_before = cpu_s(master_pid)
    pop = await receive_ack(url, "Pop", "p", count)
    pop_cpu_us = (cpu_s(master_pid) - cpu_before) / count * 1e6
    batch_mean = None
    if decisions is not None and requests is not None:
        decided = (await _counter(url, "twinlog_pop_decisions_total") or 0.0) - decisions
        answered = (await _counter(url, "twinlog_pop_decided_requests_total") or 0.0) - requests
        batch_mean = answered / decided if decided else None
    one, _ = await redelivery_lateness(url, "Late1", "late1", 1)
    before = await _expiry_buckets(url)
    many, drain = await redelivery_lateness(url, "Late", "late", in_flight)
    after = await _expiry_buckets(url)
    return Figures(queue, pop, pop_cpu_us, batch_mean, one[0], many, drain,
                   _bucket_quantile(before, after, 0.5), _bucket_quantile(before, after, 0.99))


def _report(title: str, figures: Figures, streams: Drain, in_flight: int,
            old: Figures | None) -> None:
    header(f"{title} (load average {os.getloadavg()[0]:.2f})")
    queue, pop = figures.queue, figures.pop
    row("(q) per-queue consume + offset commits", queue.per_s, "msg/s")
    row("(p) receive + ack", pop.per_s, "msg/s", queue.per_s, "target >= 0.5 of (q)")
    row("(p) receive + ack, against (r)", pop.per_s, "msg/s", streams.per_s,
        "target >= 1.0 of (r)")
    row("(p) master CPU per message", figures.pop_cpu_us, "us")
    if figures.batch_mean is not None:
        row("(p) receives and acks a decision answered", figures.batch_mean, "mean")
    row("redelivery: end to end, 1 in flight", figures.one_ms, "ms")
    row(f"redelivery: end to end, {in_flight:,} in flight: p50", _quantile(figures.many_ms, 0.5),
        "ms")
    row(f"redelivery: end to end, {in_flight:,} in flight: p99",
        _quantile(figures.many_ms, 0.99), "ms", None, "target <= 250 ms")
    row(f"redelivery: drain rate of the {in_flight:,}", figures.drain.per_s, "msg/s")
    row("redelivery: broker (expiry tick) p50 at most", figures.broker_p50_ms, "ms")
    row("redelivery: broker (expiry tick) p99 at most", figures.broker_p99_ms, "ms")
    if old is not None:
        row("new / old: (p) receive + ack", pop.per_s, "msg/s", old.pop.per_s)
        row("new / old: (p) master CPU per message", figures.pop_cpu_us, "us",
            old.pop_cpu_us)
        row("new / old: (q) per-queue consume", queue.per_s, "msg/s", old.queue.per_s)
        row("new / old: end to end p99", _quantile(figures.many_ms, 0.99), "ms",
            _quantile(old.many_ms, 0.99))


def _broker_cases(scratch: Path, tree: Path, name: str, count: int,
                  in_flight: int) -> Figures:
    with broker_processes(scratch, "SYNC_MASTER", with_slave=True, name=name,
                          settings=SETTINGS, tree=tree) as (url, processes):
        return asyncio.run(_cases(url, processes[0].pid, count, in_flight))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--old-tree", type=Path, default=None,
                        help="another checkout: its broker runs the same cases in turn")
    parser.add_argument("--rounds", type=int, default=1,
                        help="with --old-tree: old then new, this many times")
    arguments = parser.parse_args()
    count, in_flight = (4_000, 2_000) if arguments.quick else (16_000, 10_000)
    server = ensure_redis_server()
    scratch = Path(tempfile.mkdtemp(prefix="twinlog-group-consume-"))
    try:
        with redis_pair(server, scratch, free_port(), free_port()) as redis_url:
            streams = asyncio.run(redis_streams(redis_url, count))
        header(f"group consumption: {count:,} messages a case, {CONSUMERS} consumers, "
               f"{BATCH} a request; redelivery after a {INVISIBLE_MS} ms invisible time")
        row("(r) Redis XREADGROUP + XACK + WAIT 1", streams.per_s, "msg/s")
        old_tree = arguments.old_tree
        for number in range(arguments.rounds if old_tree is not None else 1):
            old = None
            if old_tree is not None:
                old = _broker_cases(scratch, old_tree.resolve(), "old", count, in_flight)
                _report(f"round {number + 1}: old ({old_tree})", old, streams, in_flight,
                        None)
            new = _broker_cases(scratch, ROOT, "new", count, in_flight)
            _report(f"round {number + 1}: new ({ROOT})", new, streams, in_flight, old)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
