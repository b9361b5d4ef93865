"""HTTP consume throughput with wrk (64 connections, loopback), each figure next to produce's in
the same run, and Redis's XRANGE side by side.

    python bench/http_consume.py                   # 5 s per case, 3 alternating rounds
    python bench/http_consume.py --quick           # 2 s per case, 1 round
    python bench/http_consume.py --profile DIR     # and py-spy profiles of (c1), (p1), (c32)

One ASYNC_MASTER (`twinlog serve`) holds MESSAGES messages of 100 bytes in queue 0 of topic C.
Cases, wrk -t1 -c64 each:
  (p1)  single JSON produce (topic P), req/s: the baseline of (c1);
  (c1)  GET /v1/topics/C/queues/0/messages?offset=0&max_messages=1&body_encoding=utf8, req/s;
        target >= 0.8 of (p1);
  (pb)  batch produce of 100 x 100 bytes (topic P), msgs/s: the baseline of (c32);
  (c32) the same read with max_messages=32, msgs/s; target >= 0.5 of (pb);
  (c32u) (c32) on a second broker that keeps no answer documents (consume_cache_bytes_max=0):
        every record decoded at every read, what a group reading each message once costs;
  (r32) Redis 7, `redis-benchmark -c 64 XRANGE s - + COUNT 32` on a stream of MESSAGES entries
        of 100 bytes, reads/s, in each round right after (c32); (c32) reads/s over (r32),
        target >= 0.3;
  together: one consumer (wrk -c1, 32 per read) and one producer (wrk -c1, single JSON) at full
        speed at once, each next to its own speed alone in the same round: neither below 0.7.
        The broker's CPU seconds per second in each (all its threads) show whether it had
        CPU to spare: when either alone takes what the broker gets, together they share it.
The broker's CPU per request (all its threads, microseconds) is shown for (p1), (c1) and
(c32), and Redis's per XRANGE: on a shared machine it moves less with the load than the
rates do, and Redis's CPU per read over twinlog's is the (c32)/(r32) ratio each would reach
with a core of its own.
The pairs run alternately, `--rounds` times, and their medians are shown: a change in the
machine's load (it is shared) falls on both sides of a ratio. The load average is printed.
wrk and redis-server/redis-benchmark are installed with apt-get when missing.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import ensure_debian_tool, header, row  # noqa: E402
from bench.http_produce import (  # noqa: E402
    _LUA,
    CONNECTIONS,
    WRK_THREADS,
    Load,
    broker,
    ensure_wrk,
    free_port,
)

MESSAGES = 10_000
BODY_100 = "x" * 100
BATCH_MESSAGES = 100
READ_PATH = "/v1/topics/C/queues/0/messages?offset=0&max_messages={count}&body_encoding=utf8"
PRODUCE_PATH = "/v1/topics/P/messages"
_GET_LUA = _LUA.replace('wrk.method = "POST"\nwrk.body = {body}\nwrk.headers["Content-Type"] = '
                        '"{content_type}"\n', "")
PROFILE_S = 10


def run_script(wrk: str, script: Path, url: str, duration_s: float,
               connections: int = CONNECTIONS) -> Load:
    """wrk with a Lua script ending in http_produce's `done` (its figures as WRK_JSON)."""
    command = [wrk, f"-t{WRK_THREADS}", f"-c{connections}", f"-d{duration_s:.0f}s", "-s",
               str(script), url]
    output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    line = next(line for line in output.splitlines() if line.startswith("WRK_JSON "))
    figures = json.loads(line.removeprefix("WRK_JSON "))
    if figures["non_2xx"] or figures["socket_errors"]:
        print(f"  ({figures['non_2xx']} not 2xx, {figures['socket_errors']} socket errors "
              f"on {url})")
    return Load(figures["requests"] / (figures["duration_us"] / 1e6), figures["p50_us"] / 1000,
                figures["p99_us"] / 1000, figures["non_2xx"], figures["socket_errors"])


def run_get(wrk: str, url: str, duration_s: float, scratch: Path,
            connections: int = CONNECTIONS) -> Load:
    script = scratch / "get.lua"
    script.write_text(_GET_LUA.replace("{{", "{").replace("}}", "}"))
    return run_script(wrk, script, url, duration_s, connections)


def run_post(wrk: str, url: str, body: bytes, duration_s: float, scratch: Path,
             connections: int = CONNECTIONS) -> Load:
    script = scratch / "post.lua"
    script.write_text(_LUA.format(body=_lua_string(body), content_type="application/json"))
    return run_script(wrk, script, url, duration_s, connections)


def _lua_string(data: bytes) -> str:
    return "'" + "".join(f"\\{byte}" if not 32 <= byte < 127 or chr(byte) in "'\\" else chr(byte)
                         for byte in data) + "'"


# -- the broker's data and process ----------------------------------------------------------------


def _prepare(url: str) -> None:
    with httpx.Client(base_url=url, timeout=30.0) as client:
        for topic in ("C", "P"):
            client.post("/v1/topics", json={"name": topic, "read_queue_count": 1,
                                            "write_queue_count": 1}).raise_for_status()
        batch = {"messages": [{"body": BODY_100}] * BATCH_MESSAGES}
        for _ in range(MESSAGES // BATCH_MESSAGES):
            client.post("/v1/topics/C/messages:batch", json=batch).raise_for_status()
        answer = client.get(url + READ_PATH.format(count=32)).json()
        assert len(answer["messages"]) == 32, answer


def _listening_pid(port: int) -> int:
    output = subprocess.run(["ss", "-Hltnp", f"sport = :{port}"], check=True,
                            capture_output=True, text=True).stdout
    found = re.search(r"pid=(\d+)", output)
    if found is None:
        raise RuntimeError(f"no process listens on port {port}")
    return int(found.group(1))


# -- Redis ----------------------------------------------------------------------------------------


@contextmanager
def redis_server(scratch: Path) -> Iterator[tuple[int, int]]:
    """A Redis server with the stream; yields its port and its process id."""
    server = ensure_debian_tool("redis-server", "redis-server")
    port = free_port()
    directory = scratch / "redis"
    directory.mkdir()
    process = subprocess.Popen(
        [server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--protected-mode", "no", "--daemonize", "no", "--dir", str(directory)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        cli = ensure_debian_tool("redis-cli", "redis-tools")
        deadline = time.monotonic() + 30
        while subprocess.run([cli, "-p", str(port), "ping"], capture_output=True,
                             text=True).stdout.strip() != "PONG":
            if time.monotonic() > deadline:
                raise RuntimeError("redis-server did not answer PING")
            time.sleep(0.1)
        commands = "".join(f"XADD s * body {BODY_100}\n" for _ in range(MESSAGES))
        subprocess.run([cli, "-p", str(port)], input=commands, check=True,
                       capture_output=True, text=True)
        yield port, process.pid
    finally:
        process.terminate()
        process.wait(10)


def run_redis_xrange(port: int, duration_s: float) -> float:
    """XRANGE s - + COUNT 32 at 64 connections: reads a second (redis-benchmark's own count,
    sized to last about `duration_s`)."""
    benchmark = ensure_debian_tool("redis-benchmark", "redis-tools")

    def run(requests: int) -> tuple[float, float]:
        started = time.perf_counter()
        output = subprocess.run(
            [benchmark, "-p", str(port), "-c", str(CONNECTIONS), "-n", str(requests), "-q",
             "XRANGE", "s", "-", "+", "COUNT", "32"],
            check=True, capture_output=True, text=True).stdout
        elapsed_s = time.perf_counter() - started
        found = re.findall(r"([\d.]+) requests per second", output.replace("\r", "\n"))
        return float(found[-1]), elapsed_s

    per_s, _ = run(20_000)  # warm-up, and the size of the measured run
    per_s, _ = run(max(20_000, int(per_s * duration_s)))
    return per_s


# -- cases ----------------------------------------------------------------------------------------


def _together(wrk: str, url: str, duration_s: float, scratch: Path) -> tuple[Load, Load]:
    """One consumer and one producer at once, each wrk -c1."""
    results: dict[str, Load] = {}
    consumer_scratch, producer_scratch = scratch / "consumer", scratch / "producer"
    consumer_scratch.mkdir(exist_ok=True)
    producer_scratch.mkdir(exist_ok=True)
    single = json.dumps({"body": BODY_100}).encode()

    def consume() -> None:
        results["consume"] = run_get(wrk, url + READ_PATH.format(count=32), duration_s,
                                     consumer_scratch, connections=1)

    thread = threading.Thread(target=consume)
    thread.start()
    results["produce"] = run_post(wrk, url + PRODUCE_PATH, single, duration_s,
                                  producer_scratch, connections=1)
    thread.join()
    return results["consume"], results["produce"]


def _median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


def _profile(pid: int, wrk: str, url: str, directory: Path, scratch: Path) -> None:
    """py-spy (the thread holding the GIL) while wrk runs (c1), (p1), then (c32): each raw
    profile and its top functions by own samples, in `directory` (what differs per
    request)."""
    single = json.dumps({"body": BODY_100}).encode()
    _profile_case("c1", pid, directory, lambda duration_s: run_get(
        wrk, url + READ_PATH.format(count=1), duration_s, scratch))
    _profile_case("p1", pid, directory, lambda duration_s: run_post(
        wrk, url + PRODUCE_PATH, single, duration_s, scratch))
    _profile_case("c32", pid, directory, lambda duration_s: run_get(
        wrk, url + READ_PATH.format(count=32), duration_s, scratch))


def _profile_case(case: str, pid: int, directory: Path,
                  load: Callable[[float], Load]) -> None:
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    directory.mkdir(parents=True, exist_ok=True)
    raw = directory / f"{case}.collapsed.txt"
    recorder = subprocess.Popen([py_spy, "record", "--pid", str(pid), "--duration",
                                 str(PROFILE_S), "--rate", "200", "--format", "raw", "--gil",
                                 "--output", str(raw), "--nonblocking"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    figures = load(PROFILE_S - 1)
    recorder.wait(60)
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        count = int(count_text)
        frames = stack.split(";")
        total += count
        own[_short(frames[-1])] += count
        for frame in set(frames):
            inclusive[_short(frame)] += count
    lines = [f"py-spy of ({case}), {total} samples (the thread holding the GIL), "
             f"{figures.requests_per_s:,.0f} req/s under the profiler", "", "own samples:"]
    lines += [f"  {count * 100 / total:5.1f}%  {frame}" for frame, count in own.most_common(25)]
    lines += ["", "inclusive:"]
    lines += [f"  {count * 100 / total:5.1f}%  {frame}"
              for frame, count in inclusive.most_common(40)]
    (directory / f"{case}.top.txt").write_text("\n".join(lines) + "\n")
    print(f"  profile of ({case}): {directory / f'{case}.top.txt'} ({total} samples)")


def _short(frame: str) -> str:
    """`function (path/to/module.py:line)` as `function (module.py)`."""
    name, _, where = frame.partition(" (")
    return f"{name} ({Path(where.rstrip(')').rsplit(':', 1)[0]).name})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="2 s per case, 1 round")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--profile", type=Path, default=None,
                        help="record py-spy profiles of (c1), (p1) and (c32) into this directory")
    arguments = parser.parse_args()
    duration_s, rounds = (2.0, 1) if arguments.quick else (5.0, 3)
    rounds = arguments.rounds or rounds
    wrk = ensure_wrk()
    header(f"HTTP consume next to produce, ASYNC_MASTER, wrk -t{WRK_THREADS} -c{CONNECTIONS}, "
           f"{duration_s:.0f} s per case, medians of {rounds} alternating rounds, "
           f"{os.cpu_count()} CPUs, load average {_load_average()}")
    scratch = Path(tempfile.mkdtemp(prefix="twinlog-bench-consume-"))
    figures: dict[str, list[float]] = {}

    def note(name: str, value: float) -> None:
        figures.setdefault(name, []).append(value)

    single = json.dumps({"body": BODY_100}).encode()
    batch = json.dumps({"messages": [{"body": BODY_100}] * BATCH_MESSAGES}).encode()
    try:
        with ExitStack() as stack:
            url = stack.enter_context(broker(scratch, "ASYNC_MASTER"))
            uncached_url = stack.enter_context(broker(
                scratch, "ASYNC_MASTER", name="-uncached",
                settings=("consume_cache_bytes_max=0",)))
            _prepare(url)
            _prepare(uncached_url)
            pid = _listening_pid(int(url.rsplit(":", 1)[1]))
            run_get(wrk, url + READ_PATH.format(count=1), 1, scratch)  # warm-up
            run_post(wrk, url + PRODUCE_PATH, single, 1, scratch)
            redis_port, redis_pid = stack.enter_context(redis_server(scratch))
            for _ in range(rounds):
                with _cpu_used(pid) as produce_cpu:
                    produce = run_post(wrk, url + PRODUCE_PATH, single, duration_s, scratch)
                with _cpu_used(pid) as read_1_cpu:
                    read_1 = run_get(wrk, url + READ_PATH.format(count=1), duration_s, scratch)
                batches = run_post(wrk, url + PRODUCE_PATH + ":batch", batch, duration_s,
                                   scratch)
                with _cpu_used(pid) as read_32_cpu:
                    read_32 = run_get(wrk, url + READ_PATH.format(count=32), duration_s,
                                      scratch)
                with _cpu_used(redis_pid) as redis_cpu:
                    redis_reads = run_redis_xrange(redis_port, duration_s)
                read_32_uncached = run_get(wrk, uncached_url + READ_PATH.format(count=32),
                                           duration_s, scratch)
                with _cpu_used(pid) as alone_consume_cpu:
                    alone_consume = run_get(wrk, url + READ_PATH.format(count=32), duration_s,
                                            scratch, connections=1)
                with _cpu_used(pid) as alone_produce_cpu:
                    alone_produce = run_post(wrk, url + PRODUCE_PATH, single, duration_s,
                                             scratch, connections=1)
                with _cpu_used(pid) as both_cpu:
                    both_consume, both_produce = _together(wrk, url, duration_s, scratch)
                note("p1", produce.requests_per_s)
                note("p1 cpu us", produce_cpu[0] / produce.requests_per_s * 1e6)
                note("c1 cpu us", read_1_cpu[0] / read_1.requests_per_s * 1e6)
                note("c32 cpu us", read_32_cpu[0] / read_32.requests_per_s * 1e6)
                note("r32 cpu us", redis_cpu[0] / redis_reads * 1e6)
                note("r32/c32 cpu", (redis_cpu[0] / redis_reads)
                     / (read_32_cpu[0] / read_32.requests_per_s))
                note("c1", read_1.requests_per_s)
                note("c1 p99", read_1.p99_ms)
                note("pb", batches.requests_per_s * BATCH_MESSAGES)
                note("c32", read_32.requests_per_s * 32)
                note("c32 reads", read_32.requests_per_s)
                note("c32u", read_32_uncached.requests_per_s * 32)
                note("r32", redis_reads)
                note("c32/r32", read_32.requests_per_s / redis_reads)
                note("c32u/r32", read_32_uncached.requests_per_s / redis_reads)
                note("cpu alone consume", alone_consume_cpu[0])
                note("cpu alone produce", alone_produce_cpu[0])
                note("cpu together", both_cpu[0])
                note("c1/p1", read_1.requests_per_s / produce.requests_per_s)
                note("c32/pb", read_32.requests_per_s * 32
                     / (batches.requests_per_s * BATCH_MESSAGES))
                note("alone consume", alone_consume.requests_per_s)
                note("alone produce", alone_produce.requests_per_s)
                note("both consume", both_consume.requests_per_s)
                note("both produce", both_produce.requests_per_s)
                note("consume kept", both_consume.requests_per_s / alone_consume.requests_per_s)
                note("produce kept", both_produce.requests_per_s / alone_produce.requests_per_s)
            if arguments.profile is not None:
                _profile(pid, wrk, url, arguments.profile, scratch)
        _show(figures)
        print(f"  load average at the end: {_load_average()}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _show(figures: dict[str, list[float]]) -> None:
    median = {name: _median(values) for name, values in figures.items()}
    redis_reads_per_s = median["r32"]
    row("(p1) produce single JSON", median["p1"], "req/s")
    row("(c1) consume 1 per read", median["c1"], "req/s", median["p1"], "target >= 0.8 of (p1)")
    print(f"  {'':<44} (c1) p99 {median['c1 p99']:.2f} ms; per-round ratios "
          f"{_listed(figures['c1/p1'])}")
    row("(pb) produce batches of 100", median["pb"], "msgs/s")
    row("(c32) consume 32 per read", median["c32"], "msgs/s", median["pb"],
        "target >= 0.5 of (pb)")
    print(f"  {'':<44} per-round ratios {_listed(figures['c32/pb'])}")
    row("(c32u) the same, no documents kept", median["c32u"], "msgs/s", median["pb"],
        "every record decoded")
    row("(r32) Redis XRANGE COUNT 32, redis-benchmark", redis_reads_per_s, "reads/s")
    row("(c32) reads/s over (r32)", median["c32 reads"], "reads/s", redis_reads_per_s,
        "target >= 0.3")
    print(f"  {'':<44} per-round ratios {_listed(figures['c32/r32'])}; (c32u) over (r32) "
          f"{_listed(figures['c32u/r32'])}")
    print(f"  {'':<44} the broker's CPU per request, us: (p1) {median['p1 cpu us']:.0f}, "
          f"(c1) {median['c1 cpu us']:.0f}, (c32) {median['c32 cpu us']:.0f}; Redis's per "
          f"XRANGE {median['r32 cpu us']:.0f}")
    print(f"  {'':<44} (r32)'s CPU per read over (c32)'s: {median['r32/c32 cpu']:.2f} (per round "
          f"{_listed(figures['r32/c32 cpu'])}): the reads/s ratio a core each would give")
    row("alone: consumer -c1, 32 per read", median["alone consume"], "req/s")
    row("together: the consumer", median["both consume"], "req/s", median["alone consume"],
        "target >= 0.7")
    row("alone: producer -c1, single JSON", median["alone produce"], "req/s")
    row("together: the producer", median["both produce"], "req/s", median["alone produce"],
        "target >= 0.7")
    print(f"  {'':<44} kept per round: consumer {_listed(figures['consume kept'])}, "
          f"producer {_listed(figures['produce kept'])}")
    print(f"  {'':<44} the broker's CPU, s/s: consumer alone "
          f"{_listed(figures['cpu alone consume'])}, producer alone "
          f"{_listed(figures['cpu alone produce'])}, together {_listed(figures['cpu together'])}")


@contextmanager
def _cpu_used(pid: int) -> Iterator[list[float]]:
    """The CPU seconds per second `pid` used (all its threads) while the block ran."""
    def cpu_s() -> float:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    used: list[float] = []
    started_s, started_cpu_s = time.perf_counter(), cpu_s()
    yield used
    used.append((cpu_s() - started_cpu_s) / (time.perf_counter() - started_s))


def _listed(values: list[float]) -> str:
    return ", ".join(f"{value:.2f}" for value in values)


def _load_average() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


if __name__ == "__main__":
    main()
