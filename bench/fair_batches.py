"""Why a few connections starve under batch load (bench/http_produce.py case (e)), and the fix.

    python bench/fair_batches.py              # bare app, 3 s per case (about 40 s)
    python bench/fair_batches.py --broker     # twinlog serve, before/after (about 90 s)

Bare app (no twinlog code): an ASGI app that reads the body, parses it as JSON and spends
--work-ms of CPU (what a batch of 100 messages costs the broker), on uvicorn + httptools with
uvloop and with the asyncio loop; wrk at 64 connections sends case (e)'s batch body, with one
wrk thread (as bench/http_produce.py) and two. Each case prints req/s, p50, p99, max, wrk's
timeouts (no answer within 2 s) and the load average, then the answers per connection: on
uvloop a few connections are answered once in the whole run while the rest get a dozen; on
asyncio every connection gets the same count. `--http bench.fair_batches:TimedProtocol`
also prints the longest waits the server itself sees per connection (answer -> next request,
request -> answer): a few hundred ms, never the seconds wrk measures. The starved connections
are not yet accepted: `ss -ltn` shows tens of connections in the listener's accept queue,
draining by about one per loop turn. libuv (since 1.45, in uvloop) accepts one connection
per readiness of the listening socket; a CPU-bound turn lasts tens of ms, so 64 fresh
connections wait up to 64 turns, wrk times out, reconnects and queues again. asyncio accepts
up to the backlog at once. `--yield-first` (the app yields before its work) and `--http h11`
change nothing: the loop's accept, not the protocol, is the cause.

--broker: case (e) on `twinlog serve` with eager accept (app/server/eager_accept.py, the default),
with `http_eager_accept=false` (one accept per turn, as before) and on the asyncio loop, each
with single produce too, and the same batches put in-process, in one run.
Compare only ratios within one run: the machine is shared.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol  # noqa: E402

from bench.common import header, stop_process  # noqa: E402
from bench.http_produce import (  # noqa: E402
    BATCH_MESSAGES,
    BODY_100,
    CONNECTIONS,
    _lua_string,
    _spawn,
    _wait_listening,
    broker,
    ensure_wrk,
    free_port,
)
from bench.in_process import in_process_batch  # noqa: E402

_LUA = """
wrk.method = "POST"
wrk.body = {body}
wrk.headers["Content-Type"] = "application/json"
function done(summary, latency, requests)
  io.write(string.format('WRK_JSON {{"requests": %d, "duration_us": %d, "p50_us": %d, ' ..
    '"p99_us": %d, "max_us": %d, "timeouts": %d, "other_errors": %d}}\\n', summary.requests,
    summary.duration, latency:percentile(50), latency:percentile(99), latency.max,
    summary.errors.timeout, summary.errors.connect + summary.errors.read +
    summary.errors.write))
end
"""


# CPU each request holds the loop for past its parse (the broker's validation and store put
# of 100 messages cost about this): makes the server CPU-bound, as case (e) is.
WORK_S = float(os.environ.get("FAIR_BATCHES_WORK_MS", "1.5")) / 1000
SERVED: dict[int, int] = {}  # requests answered per client port
GAPS: dict[int, list[float]] = {}  # per connection: longest answer->read, read->answer (s)
YIELD_FIRST = os.environ.get("FAIR_BATCHES_YIELD") == "1"


def _spin(duration_s: float) -> None:
    end = time.perf_counter() + duration_s
    while time.perf_counter() < end:
        pass


async def bare_batch_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Reads the body, parses it (a batch's JSON), answers 201 with a fixed body."""
    if scope["type"] != "http":
        return
    if scope["method"] == "GET":  # the served-per-connection counts since the last GET
        counts = sorted(SERVED.values())
        gaps = sorted(GAPS.values(), reverse=True)[:4]
        SERVED.clear()
        GAPS.clear()
        body = json.dumps({"counts": counts, "gaps": gaps}).encode()
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})
        return
    client = scope.get("client") or ("", 0)
    SERVED[client[1]] = SERVED.get(client[1], 0) + 1
    chunks = []
    more = True
    while more:
        message = await receive()
        chunks.append(message.get("body", b""))
        more = message.get("more_body", False)
    if YIELD_FIRST:
        await asyncio.sleep(0)
    json.loads(b"".join(chunks))
    _spin(WORK_S)
    await send({"type": "http.response.start", "status": 201,
                "headers": [(b"content-type", b"application/json"), (b"content-length", b"19")]})
    await send({"type": "http.response.body", "body": b'{"status":"PUT_OK"}'})


class TimedProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, noting per connection the longest wait between the
    previous answer and the next request's first bytes (the loop not reading, or the client
    not sending) and between those bytes and the answer (the loop not running the app)."""

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
        self._answered_s = self._received_s = time.perf_counter()
        GAPS[id(self)] = [0.0, 0.0]

    def data_received(self, data: bytes) -> None:
        now_s = time.perf_counter()
        if self._received_s <= self._answered_s:  # the first bytes of a new request
            gaps = GAPS[id(self)]
            gaps[0] = max(gaps[0], now_s - self._answered_s)
            self._received_s = now_s
        super().data_received(data)

    def on_response_complete(self) -> None:
        now_s = time.perf_counter()
        gaps = GAPS[id(self)]
        gaps[1] = max(gaps[1], now_s - self._received_s)
        self._answered_s = now_s
        super().on_response_complete()


@dataclass(frozen=True, slots=True)
class Figures:
    requests_per_s: float
    p50_ms: float
    p99_ms: float
    max_ms: float
    timeouts: int
    other_errors: int


@contextmanager
def bare_server(loop: str, http: str) -> Iterator[str]:
    port = free_port()
    process = _spawn(["-m", "uvicorn", "bench.fair_batches:bare_batch_app", "--host",
                      "127.0.0.1", "--port", str(port), "--loop", loop, "--http", http,
                      "--no-access-log", "--log-level", "warning"])
    try:
        _wait_listening(port, process)
        yield f"http://127.0.0.1:{port}/v1/topics/Bench/messages:batch"
    finally:
        stop_process(process)


BATCH_BODY = json.dumps({"messages": [{"body": BODY_100.decode()}] * BATCH_MESSAGES}).encode()
SINGLE_BODY = json.dumps({"body": BODY_100.decode()}).encode()


def run_wrk(wrk: str, url: str, threads: int, duration_s: float, scratch: Path,
            body: bytes = BATCH_BODY) -> Figures:
    script = scratch / "post.lua"
    script.write_text(_LUA.format(body=_lua_string(body)))
    command = [wrk, f"-t{threads}", f"-c{CONNECTIONS}", f"-d{duration_s:.0f}s", "-s",
               str(script), url]
    output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    line = next(line for line in output.splitlines() if line.startswith("WRK_JSON "))
    raw = json.loads(line.removeprefix("WRK_JSON "))
    return Figures(raw["requests"] / (raw["duration_us"] / 1e6), raw["p50_us"] / 1000,
                   raw["p99_us"] / 1000, raw["max_us"] / 1000, raw["timeouts"],
                   raw["other_errors"])


def show(name: str, figures: Figures) -> None:
    print(f"{name:<18} {figures.requests_per_s:8.0f} req/s  p50 {figures.p50_ms:7.1f} ms  "
          f"p99 {figures.p99_ms:7.1f} ms (p99/p50 "
          f"{figures.p99_ms / max(figures.p50_ms, 0.001):5.1f})  max {figures.max_ms:7.1f} ms  "
          f"timeouts {figures.timeouts}  other errors {figures.other_errors}  "
          f"load {load_average()}")


# (name, twinlog settings): eager accept on uvloop (the default), uvloop accepting one
# connection per loop turn (before app/server/eager_accept.py), and the asyncio loop.
BROKER_VARIANTS = (("uvloop", ()), ("uvloop-1acc", ("http_eager_accept=false",)),
                   ("asyncio", ("http_event_loop=asyncio",)))


def broker_case(wrk: str, duration_s: float, scratch: Path) -> None:
    """Case (e) on `twinlog serve` per variant, next to the same batches put in-process, in
    one run; and single produce (case (b)) per variant, for its cost."""
    header(f"case (e): twinlog serve ASYNC_MASTER, batches of {BATCH_MESSAGES} x "
           f"{len(BODY_100)} B, wrk -t1 -c{CONNECTIONS}, {duration_s:.0f} s per case")
    for name, settings in BROKER_VARIANTS:
        with broker(scratch, "ASYNC_MASTER", name=name, settings=settings) as url:
            target = url + "/v1/topics/Bench/messages:batch"
            run_wrk(wrk, target, 1, 1.0, scratch)  # warm-up
            figures = run_wrk(wrk, target, 1, duration_s, scratch)
            show(f"batch {name}", figures)
            print(f"{'':<18} {figures.requests_per_s * BATCH_MESSAGES:8.0f} msgs/s")
            single = url + "/v1/topics/Single/messages"
            run_wrk(wrk, single, 1, 1.0, scratch, SINGLE_BODY)  # warm-up
            show(f"single {name}", run_wrk(wrk, single, 1, duration_s, scratch, SINGLE_BODY))
    in_process = in_process_batch(scratch / "in-process", BODY_100, BATCH_MESSAGES, duration_s)
    print(f"{'in-process':<18} {in_process:8.0f} msgs/s (the same batches, no HTTP)  "
          f"load {load_average()}")


def served_counts(url: str) -> tuple[list[int], list[list[float]]]:
    """Requests answered per connection since the last call, fewest first; the longest
    (answer -> next read, read -> answer) gaps when the server runs TimedProtocol."""
    with urllib.request.urlopen(url, timeout=10) as response:
        stats = json.loads(response.read())
    return stats["counts"] or [0], stats["gaps"]


def load_average() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--loops", default="uvloop,asyncio")
    parser.add_argument("--wrk-threads", default="1,2")
    parser.add_argument("--work-ms", type=float, default=1.5,
                        help="CPU per request past the JSON parse")
    parser.add_argument("--http", default="httptools", help=(
        "uvicorn's protocol: httptools, h11, or bench.fair_batches:TimedProtocol (httptools, "
        "timing each connection's waits)"))
    parser.add_argument("--yield-first", action="store_true",
                        help="the app yields to the loop once before its CPU work")
    parser.add_argument("--broker", action="store_true",
                        help="case (e) on twinlog serve: eager accept, one accept per turn, "
                             "asyncio; and in-process")
    arguments = parser.parse_args()
    # Read by the server process (spawned with this environment).
    os.environ["FAIR_BATCHES_WORK_MS"] = str(arguments.work_ms)
    os.environ["FAIR_BATCHES_YIELD"] = "1" if arguments.yield_first else "0"
    wrk = ensure_wrk()
    if arguments.broker:
        with tempfile.TemporaryDirectory(prefix="fair-batches-") as scratch:
            broker_case(wrk, arguments.seconds, Path(scratch))
        return
    variant = arguments.http + (", yield first" if arguments.yield_first else "")
    header(f"bare ASGI app ({variant}), batch body of {BATCH_MESSAGES} x {len(BODY_100)} B "
           f"+ {arguments.work_ms} ms CPU each, wrk -c{CONNECTIONS}, "
           f"{arguments.seconds:.0f} s per case ({os.cpu_count()} CPUs)")
    with tempfile.TemporaryDirectory(prefix="fair-batches-") as scratch:
        for loop in arguments.loops.split(","):
            with bare_server(loop, arguments.http) as url:
                for threads in (int(value) for value in arguments.wrk_threads.split(",")):
                    run_wrk(wrk, url, threads, 1.0, Path(scratch))  # warm-up
                    served_counts(url)
                    figures = run_wrk(wrk, url, threads, arguments.seconds, Path(scratch))
                    served, gaps = served_counts(url)
                    print(f"{loop:<8} wrk -t{threads}  {figures.requests_per_s:8.0f} req/s  "
                          f"p50 {figures.p50_ms:7.1f} ms  p99 {figures.p99_ms:7.1f} ms "
                          f"(p99/p50 {figures.p99_ms / max(figures.p50_ms, 0.001):5.1f})  "
                          f"max {figures.max_ms:7.1f} ms  timeouts {figures.timeouts}  "
                          f"other errors {figures.other_errors}  load {load_average()}")
                    print(f"{'':<17} answers per connection: {len(served)} connections, "
                          f"min {served[0]}, median {served[len(served) // 2]}, "
                          f"max {served[-1]}; fewest: {served[:6]}")
                    if gaps:
                        print(f"{'':<17} longest gaps (answer->read, read->answer) s: "
                              + ", ".join(f"({a:.2f}, {b:.2f})" for a, b in gaps))


if __name__ == "__main__":
    main()
