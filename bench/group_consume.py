"""Group consumption (receive + ack) over HTTP, next to the per-queue consume with offset
commits and to Redis Streams consumer groups, and the lateness of redeliveries.

    python bench/group_consume.py            # 16,000 messages a case, 10,000 in flight
    python bench/group_consume.py --quick    # 4,000 messages a case, 2,000 in flight
    python bench/group_consume.py --clients lean   # one client library (default: both)
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
  (n) the ceiling: (p)'s requests against a null Python server (bench/null_http.py: the
      same answers, parsed and built as cheaply as Python does it, no broker behind them).
Targets: (p) >= 0.5 of (q), (p) >= 1.0 of (r).

Client libraries. The consumers run in this one process, so their library's cost is part of
each figure (with httpx, the largest CPU cost of the twinlog side). Every case runs with two:
  httpx, next to redis-py with its pure-Python reply parser: the rows (q), (p), (r) (each
      case makes its 8 httpx clients inside its time; the CPU that takes is printed);
  lean (bench/lean_http.py: requests written as bytes, answers parsed by httptools' C
      parser, JSON by orjson), next to redis-py with hiredis (its C parser): the rows
      (q-lean), (p-lean), (r-h).
The ratios pair like with like: (p)/(r) and (p-lean)/(r-h). Under each throughput, the CPU
per message of every process in the case: this bench's client process (time.process_time),
the master and the slave, or the two redis-servers (/proc). On a shared machine that is the
figure load moves least, and it says where each side's time goes; the sum over the processes,
against Redis's ("all CPU per message"), is what the throughput ratio tends to the inverse of
when every core is busy.

Redelivery lateness: N messages received at once (invisible 2 s) and never acked; 8
receivers long-poll (1,024 a receive). With httpx by default: at 1,024 messages a receive its
CPU per message is small next to the master's, which bounds the drain (--lateness-clients
lean,httpx runs the case with each). The N invisible times spread over the time the first
receives took (printed; mostly the master's time, and the load's): the tighter that burst,
the later its last messages come back after their own invisible time, so end-to-end figures
compare at similar spreads. Two figures, which mean different things:
  broker: when the master's expiry tick ended the delivery (the message is receivable from
      then on: its retry copy is in the retry queue once dispatch has passed it) minus its
      invisible time; the bucket bounds of twinlog_pop_redelivery_lateness_seconds. This is
      the broker's own lateness.
  end to end: for each message back, the time its receive answered minus the invisible time
      its first receive answered (the same with one message in flight is the baseline). It
      includes receiving all N again, which takes N / (receive throughput), shown as the
      redelivery drain rate: with N expiring in one burst, the last of them cannot be
      answered before N / rate. The drain runs from the first invisible time to the last
      message back, with the CPU per message of the receivers' span; "to the receivers'
      end" is what earlier runs printed as the drain (it also waits for the receivers'
      last long polls, up to 500 ms after the last message).
Target: p99 <= 250 ms with 10,000 in flight.
Master CPU per message of (p): the master process's CPU (user + system) over the case. With
--old-tree each tree's broker runs every case in turn, and one round's new/old ratios print.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import CpuMeter, cpu_line, header, row  # noqa: E402
from bench.http_produce import broker_processes, free_port  # noqa: E402
from bench.lean_http import LeanHttp  # noqa: E402
from bench.null_http import null_server  # noqa: E402
from bench.redis_stream import ensure_redis_server, redis_pair_processes  # noqa: E402

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
    cpu_us: dict[str, float] = field(default_factory=dict)  # per message, by process

    @property
    def per_s(self) -> float:
        return self.messages / self.elapsed_s


@dataclass(frozen=True, slots=True)
class Client:
    """An HTTP client library the consumers use, and its Redis counterpart."""

    name: str  # the rows' suffix: "" for httpx (the rows earlier runs printed), "-lean"
    title: str
    connect: Callable[[str], Any]  # base URL -> an async context manager client
    redis_parser: str  # "python" or "hiredis"


CLIENTS = {
    "httpx": Client("", "httpx", lambda url: httpx.AsyncClient(base_url=url, timeout=30.0),
                    "python"),
    "lean": Client("-lean", "lean client (bench/lean_http.py)",
                   lambda url: LeanHttp(url, timeout_s=30.0), "hiredis"),
}


class _Meter:
    """Wall time and CPU (the bench's client process and the watched ones) of one case."""

    def __init__(self, watched: dict[str, int]) -> None:
        self._cpu = CpuMeter(watched)
        self._started_s = time.perf_counter()

    def drain(self, messages: int) -> Drain:
        elapsed_s = time.perf_counter() - self._started_s
        return Drain(messages, elapsed_s, self._cpu.per_operation_us(messages))


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


async def per_queue(url: str, topic: str, group: str, count: int, client_kind: Client,
                    watched: dict[str, int]) -> Drain:
    """(q): consumer i reads queue i from its offset and commits after each read."""
    done = [0]

    async def consumer(queue_id: int) -> None:
        offset = 0
        async with client_kind.connect(url) as client:
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

    meter = _Meter(watched)
    await asyncio.gather(*(consumer(queue_id) for queue_id in range(QUEUES)))
    assert done[0] == count, (done[0], count)
    return meter.drain(done[0])


async def receive_ack(url: str, topic: str, group: str, count: int, client_kind: Client,
                      watched: dict[str, int]) -> Drain:
    """(p): receive up to 32 (the broker chooses), ack their handles."""
    done = [0]
    path = f"/v1/groups/{group}/topics/{topic}/messages"

    async def consumer() -> None:
        async with client_kind.connect(url) as client:
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

    meter = _Meter(watched)
    await asyncio.gather(*(consumer() for _ in range(CONSUMERS)))
    assert done[0] == count, (done[0], count)
    return meter.drain(done[0])


def _redis_parser_class(parser: str) -> type:
    """redis-py's asyncio parser: hiredis's C one, or its own pure-Python RESP3 one (the
    protocol redis-py speaks by default). redis-py takes hiredis whenever it is importable,
    so the pure-Python row names its class."""
    from redis._parsers import _AsyncHiredisParser, _AsyncRESP3Parser
    from redis.utils import HIREDIS_AVAILABLE

    if parser == "python":
        return _AsyncRESP3Parser
    if not HIREDIS_AVAILABLE:
        raise SystemExit("hiredis (>= 3.2) is not installed: pip install -e '.[bench]'")
    return _AsyncHiredisParser


async def redis_streams(redis_url: str, count: int, parser: str,
                        watched: dict[str, int]) -> Drain:
    """(r): XREADGROUP COUNT 32 + XACK + WAIT 1, 8 consumers, one connection each; redis-py
    with the given reply parser."""
    import redis.asyncio as redis_async

    parser_class = _redis_parser_class(parser)
    setup = redis_async.Redis.from_url(redis_url)
    stream, group = f"bench-group-{parser}", "g"
    for start in range(0, count, 1000):
        pipe = setup.pipeline(transaction=False)
        for _ in range(min(1000, count - start)):
            pipe.xadd(stream, {"body": BODY})
        await pipe.execute()
    await setup.xgroup_create(stream, group, id="0")
    await setup.aclose()
    done = [0]

    async def consumer(name: str) -> None:
        pool = redis_async.BlockingConnectionPool.from_url(redis_url, max_connections=1,
                                                           parser_class=parser_class)
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

    meter = _Meter(watched)
    await asyncio.gather(*(consumer(f"c{number}") for number in range(CONSUMERS)))
    assert done[0] == count, (done[0], count)
    return meter.drain(done[0])


@dataclass(frozen=True, slots=True)
class Redelivery:
    late_ms: list[float]  # each message's, sorted
    drain: Drain  # from the first invisible time to the last message back
    to_end_s: float  # from the first invisible time to the receivers' end
    spread_ms: float  # from the first invisible time to the last


async def redelivery_lateness(url: str, topic: str, group: str, count: int,
                              client_kind: Client, watched: dict[str, int]) -> Redelivery:
    """Receive `count` messages and ack none, then receive them again (8 receivers) and ack.
    The drain's CPU is that of the receivers' span, per message received again; the
    receivers end once each one's long poll has ended after the last message (up to
    `wait_ms` later)."""
    path = f"/v1/groups/{group}/topics/{topic}/messages"
    until: dict[str, int] = {}
    late_ms: list[float] = []
    last_back_ms = [0.0]
    async with client_kind.connect(url) as client:
        while len(until) < count:
            response = await client.post(path + ":receive", json={
                "max_messages": min(1024, count - len(until)), "invisible_ms": INVISIBLE_MS})
            response.raise_for_status()
            for message in response.json()["messages"]:
                until[message["msg_id"]] = message["invisible_until_ms"]

    async def receiver(client: Any) -> None:
        async with client:
            while len(late_ms) < count:
                response = await client.post(path + ":receive", json={
                    "max_messages": 1024, "invisible_ms": 60_000, "wait_ms": 500})
                response.raise_for_status()
                now_ms = time.time() * 1000
                messages = response.json()["messages"]
                late_ms.extend(now_ms - until[message["msg_id"]] for message in messages)
                if messages:
                    last_back_ms[0] = max(last_back_ms[0], now_ms)
                    await client.post(path + ":ack", json={
                        "receipt_handles": [message["receipt_handle"] for message in messages]})

    # The receivers' clients are made before the meter starts, so that the drain's CPU is
    # that of receiving again, not of making clients (an httpx client's TLS context is
    # about 20 ms of CPU: 8 of them are 16 us a message of 10,000, 80 of 2,000).
    clients = [client_kind.connect(url) for _ in range(CONSUMERS)]
    meter = CpuMeter(watched)
    await asyncio.wait_for(asyncio.gather(*(receiver(client) for client in clients)),
                           INVISIBLE_MS / 1000 + 120)
    first_ms = min(until.values())
    to_end_s = (time.time() * 1000 - first_ms) / 1000
    drain = Drain(count, (last_back_ms[0] - first_ms) / 1000, meter.per_operation_us(count))
    return Redelivery(sorted(late_ms), drain, to_end_s, max(until.values()) - first_ms)


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
class Consumption:
    """(q) and (p) with one client library."""

    queue: Drain
    pop: Drain
    batch_mean: float | None  # receives and acks a decision answered (None: not counted)
    setup_ms: float  # CPU to make the consumers' clients (each case makes its own)


async def _setup_cpu_ms(url: str, client_kind: Client) -> float:
    """The CPU this process spends making one case's clients (no request sent): part of
    each case's client CPU and of its wall time, as it happens inside the case."""
    started_s = time.process_time()
    clients = [client_kind.connect(url) for _ in range(CONSUMERS)]
    spent_s = time.process_time() - started_s
    for client in clients:
        await client.aclose()
    return spent_s * 1000


@dataclass(frozen=True, slots=True)
class Lateness:
    one_ms: float
    many_ms: list[float]
    drain: Drain  # the redelivery: N messages received again, to the last one back
    to_end_per_s: float  # N over the time to the receivers' end (what earlier runs printed)
    spread_ms: float  # of the N invisible times
    broker_p50_ms: float
    broker_p99_ms: float


@dataclass(frozen=True, slots=True)
class Figures:
    """One broker's cases, by client (the keys of CLIENTS)."""

    consumption: dict[str, Consumption]
    lateness: dict[str, Lateness]

    @property
    def first(self) -> Consumption:
        return next(iter(self.consumption.values()))


async def _counter(url: str, name: str) -> float | None:
    async with httpx.AsyncClient(base_url=url, timeout=30.0) as client:
        text = (await client.get("/metrics")).text
    values = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
              if line.startswith(name + " ")]
    return values[0] if values else None


async def _consumption(url: str, client_kind: Client, count: int,
                       watched: dict[str, int]) -> Consumption:
    suffix = client_kind.name.replace("-", "")
    queue = await per_queue(url, "PerQueue" + suffix, "q" + suffix, count, client_kind,
                            watched)
    decisions = await _counter(url, "twinlog_pop_decisions_total")
    requests = await _counter(url, "twinlog_pop_decided_requests_total")
    pop = await receive_ack(url, "Pop" + suffix, "p" + suffix, count, client_kind, watched)
    batch_mean = None
    if decisions is not None and requests is not None:
        decided = (await _counter(url, "twinlog_pop_decisions_total") or 0.0) - decisions
        answered = (await _counter(url, "twinlog_pop_decided_requests_total") or 0.0) - requests
        batch_mean = answered / decided if decided else None
    return Consumption(queue, pop, batch_mean, await _setup_cpu_ms(url, client_kind))


async def _lateness(url: str, client_kind: Client, in_flight: int,
                    watched: dict[str, int]) -> Lateness:
    suffix = client_kind.name.replace("-", "")
    one = await redelivery_lateness(url, "Late1" + suffix, "late1" + suffix, 1, client_kind,
                                    watched)
    before = await _expiry_buckets(url)
    many = await redelivery_lateness(url, "Late" + suffix, "late" + suffix, in_flight,
                                     client_kind, watched)
    after = await _expiry_buckets(url)
    return Lateness(one.late_ms[0], many.late_ms, many.drain, in_flight / many.to_end_s,
                    many.spread_ms, _bucket_quantile(before, after, 0.5),
                    _bucket_quantile(before, after, 0.99))


async def _cases(url: str, watched: dict[str, int], count: int, in_flight: int,
                 clients: list[str], lateness_clients: list[str]) -> Figures:
    async with httpx.AsyncClient(base_url=url, timeout=60.0) as client:
        for key in clients:
            suffix = CLIENTS[key].name.replace("-", "")
            for topic in ("PerQueue", "Pop"):
                await _produce(client, topic + suffix, count)
            for group in ("q", "p"):
                await _group(client, group + suffix)
        for key in lateness_clients:
            suffix = CLIENTS[key].name.replace("-", "")
            await _produce(client, "Late" + suffix, in_flight)
            await _produce(client, "Late1" + suffix, 1)
            for group in ("late", "late1"):
                await _group(client, group + suffix)
    consumption = {key: await _consumption(url, CLIENTS[key], count, watched)
                   for key in clients}
    lateness = {key: await _lateness(url, CLIENTS[key], in_flight, watched)
                for key in lateness_clients}
    return Figures(consumption, lateness)


def _report_consumption(key: str, figures: Consumption, streams: dict[str, Drain]) -> None:
    client_kind = CLIENTS[key]
    name, queue, pop = client_kind.name, figures.queue, figures.pop
    print(f"  -- {client_kind.title}")
    row(f"(q{name}) per-queue consume + offset commits", queue.per_s, "msg/s")
    cpu_line(queue.cpu_us)
    row(f"(p{name}) receive + ack", pop.per_s, "msg/s", queue.per_s,
        f"target >= 0.5 of (q{name})")
    cpu_line(pop.cpu_us)
    redis_name = "r" if client_kind.redis_parser == "python" else "r-h"
    if client_kind.redis_parser in streams:
        redis = streams[client_kind.redis_parser]
        row(f"(p{name}) receive + ack, against ({redis_name})", pop.per_s, "msg/s",
            redis.per_s, f"target >= 1.0 of ({redis_name})")
        # What the whole case costs the machine per message: with every core busy (this
        # bench's case), the throughput ratio tends to the inverse of this one.
        row(f"(p{name}) all CPU per message, against ({redis_name})",
            sum(pop.cpu_us.values()), "us", sum(redis.cpu_us.values()))
    row(f"(p{name}) master CPU per message", pop.cpu_us["master"], "us")
    row(f"(q{name}), (p{name}): making {CONSUMERS} clients, CPU", figures.setup_ms, "ms")
    if figures.batch_mean is not None:
        row(f"(p{name}) receives and acks a decision answered", figures.batch_mean, "mean")


def _report_lateness(key: str, figures: Lateness, in_flight: int) -> None:
    name = CLIENTS[key].name
    late = f"redelivery{name}:"
    row(f"{late} end to end, 1 in flight", figures.one_ms, "ms")
    row(f"{late} {in_flight:,} invisible times spread over", figures.spread_ms, "ms")
    row(f"{late} end to end, {in_flight:,} in flight: p50", _quantile(figures.many_ms, 0.5),
        "ms")
    row(f"{late} end to end, {in_flight:,} in flight: p99",
        _quantile(figures.many_ms, 0.99), "ms", None, "target <= 250 ms")
    row(f"{late} drain rate of the {in_flight:,}", figures.drain.per_s, "msg/s")
    cpu_line(figures.drain.cpu_us, "message received again")
    row(f"{late} the same to the receivers' end", figures.to_end_per_s, "msg/s")
    row(f"{late} broker (expiry tick) p50 at most", figures.broker_p50_ms, "ms")
    row(f"{late} broker (expiry tick) p99 at most", figures.broker_p99_ms, "ms")


def _report(title: str, figures: Figures, streams: dict[str, Drain], in_flight: int,
            old: Figures | None) -> None:
    header(f"{title} (load average {os.getloadavg()[0]:.2f})")
    for key, consumption in figures.consumption.items():
        _report_consumption(key, consumption, streams)
    for key, lateness in figures.lateness.items():
        _report_lateness(key, lateness, in_flight)
    if old is not None:
        name = CLIENTS[next(iter(figures.consumption))].name
        new_first, old_first = figures.first, old.first
        row(f"new / old: (p{name}) receive + ack", new_first.pop.per_s, "msg/s",
            old_first.pop.per_s)
        row(f"new / old: (p{name}) master CPU per message", new_first.pop.cpu_us["master"],
            "us", old_first.pop.cpu_us["master"])
        row(f"new / old: (q{name}) per-queue consume", new_first.queue.per_s, "msg/s",
            old_first.queue.per_s)
        for key in figures.lateness.keys() & old.lateness.keys():
            row(f"new / old: end to end p99{CLIENTS[key].name}",
                _quantile(figures.lateness[key].many_ms, 0.99), "ms",
                _quantile(old.lateness[key].many_ms, 0.99))


def _broker_cases(scratch: Path, tree: Path, name: str, count: int, in_flight: int,
                  clients: list[str], lateness_clients: list[str]) -> Figures:
    with broker_processes(scratch, "SYNC_MASTER", with_slave=True, name=name,
                          settings=SETTINGS, tree=tree) as (url, processes):
        watched = {"master": processes[0].pid, "slave": processes[1].pid}
        return asyncio.run(_cases(url, watched, count, in_flight, clients, lateness_clients))


def _redis_cases(server: str, scratch: Path, count: int,
                 clients: list[str]) -> dict[str, Drain]:
    """(r) and (r-h), as the clients ask, on one master and replica: parser -> drain."""
    streams = {}
    with redis_pair_processes(server, scratch, free_port(), free_port()) as (url, processes):
        watched = {"redis master": processes[0].pid, "redis replica": processes[1].pid}
        for key in clients:
            parser = CLIENTS[key].redis_parser
            streams[parser] = asyncio.run(redis_streams(url, count, parser, watched))
    return streams


def _null_cases(count: int, clients: list[str]) -> dict[str, Drain]:
    """(n), by client: receive + ack against the null server, its CPU watched."""
    drains = {}
    for key in clients:
        with null_server(count) as (url, process):
            drains[key] = asyncio.run(receive_ack(url, "Pop", "n", count, CLIENTS[key],
                                                  {"null server": process.pid}))
    return drains


def _report_null(drains: dict[str, Drain], streams: dict[str, Drain]) -> None:
    for key, drain in drains.items():
        client_kind = CLIENTS[key]
        row(f"(n{client_kind.name}) receive + ack, null Python server", drain.per_s, "msg/s")
        cpu_line(drain.cpu_us)
        if client_kind.redis_parser in streams:
            redis_name = "r" if client_kind.redis_parser == "python" else "r-h"
            row(f"(n{client_kind.name}) against ({redis_name})", drain.per_s, "msg/s",
                streams[client_kind.redis_parser].per_s, "a ceiling for (p)")


def _client_list(text: str) -> list[str]:
    keys = [key.strip() for key in text.split(",") if key.strip()]
    unknown = [key for key in keys if key not in CLIENTS]
    if not keys or unknown:
        raise argparse.ArgumentTypeError(f"clients are a list of {', '.join(CLIENTS)}; "
                                         f"got {text!r}")
    return list(dict.fromkeys(keys))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--clients", type=_client_list, default=list(CLIENTS),
                        help="HTTP client libraries, each with its Redis counterpart: "
                             "httpx (and redis-py's Python parser), lean (and hiredis); "
                             "default both")
    parser.add_argument("--lateness-clients", type=_client_list, default=["httpx"],
                        help="the client libraries the redelivery-lateness case runs with "
                             "(default httpx: the master, not the client, bounds its drain)")
    parser.add_argument("--old-tree", type=Path, default=None,
                        help="another checkout: its broker runs the same cases in turn")
    parser.add_argument("--rounds", type=int, default=1,
                        help="with --old-tree: old then new, this many times")
    arguments = parser.parse_args()
    count, in_flight = (4_000, 2_000) if arguments.quick else (16_000, 10_000)
    clients, lateness_clients = arguments.clients, arguments.lateness_clients
    server = ensure_redis_server()
    scratch = Path(tempfile.mkdtemp(prefix="twinlog-group-consume-"))
    try:
        streams = _redis_cases(server, scratch, count, clients)
        header(f"group consumption: {count:,} messages a case, {CONSUMERS} consumers, "
               f"{BATCH} a request; redelivery after a {INVISIBLE_MS} ms invisible time")
        if "python" in streams:
            row("(r) Redis XREADGROUP + XACK + WAIT 1", streams["python"].per_s, "msg/s")
            cpu_line(streams["python"].cpu_us)
        if "hiredis" in streams:
            row("(r-h) the same, redis-py with hiredis", streams["hiredis"].per_s, "msg/s")
            cpu_line(streams["hiredis"].cpu_us)
        _report_null(_null_cases(count, clients), streams)
        old_tree = arguments.old_tree
        for number in range(arguments.rounds if old_tree is not None else 1):
            old = None
            if old_tree is not None:
                old = _broker_cases(scratch, old_tree.resolve(), "old", count, in_flight,
                                    clients, lateness_clients)
                _report(f"round {number + 1}: old ({old_tree})", old, streams, in_flight,
                        None)
            new = _broker_cases(scratch, ROOT, "new", count, in_flight, clients,
                                lateness_clients)
            _report(f"round {number + 1}: new ({ROOT})", new, streams, in_flight, old)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
