"""HTTP produce throughput with wrk (64 connections, loopback), each figure next to its baseline.

    python bench/http_produce.py            # 5 s per case
    python bench/http_produce.py --quick    # 2 s per case

Cases, one uvicorn process each (uvloop + httptools, no access log), same wrk load:
  (a)  a bare FastAPI endpoint with a pydantic body model that stores nothing (the baseline);
  (a') a bare ASGI callable on the same uvicorn (the ceiling of the server itself);
  (b)  single JSON produce on an ASYNC_MASTER (`twinlog serve`);
  (c)  single JSON produce on a SYNC_MASTER with a live SLAVE process;
  (d)  raw-body (application/octet-stream) produce on an ASYNC_MASTER;
  (e)  batch produce of 100 x 100-byte messages on an ASYNC_MASTER (msgs/s), next to
  (e') the same batches put in-process (MessageStore.put_messages, no HTTP) in the same run;
  (f)  batch produce of 100 x 100-byte messages on a SYNC_MASTER with a live SLAVE process;
  Redis side by side (bench/redis_stream.py): a real redis-server and replica, XADD + WAIT 1
  from redis-py at the same 64-way concurrency, single and in batches of 100, next to (c), (f).
wrk is installed with apt-get when missing (Debian package `wrk`), redis-server likewise
(`redis-server`); redis-py is in the `bench` extra. The machine's load average is printed: on a
shared machine the figures move with it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from pydantic import BaseModel

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import ensure_debian_tool, header, row, stop_process  # noqa: E402
from bench.in_process import in_process_batch  # noqa: E402
from bench.redis_stream import RedisLoad, ensure_redis_server, measure_redis, redis_pair  # noqa: E402

CONNECTIONS = 64
WRK_THREADS = 1
BODY_100 = b"x" * 100
BATCH_MESSAGES = 100
MEASURED_A_REQ_PER_S = 7_300  # (a) measured here before any code, for reference
READY_TIMEOUT_S = 60.0


# -- the baseline apps (started by uvicorn --factory in their own process) ----------------------


class BaselineProduce(BaseModel):
    body: str
    body_encoding: str = "utf8"
    keys: list[str] = []
    tags: str | None = None
    properties: dict[str, str] = {}
    queue_id: int | None = None


def baseline_fastapi_app() -> Any:
    """(a): what a FastAPI user writes first (default settings); the body is validated and
    nothing is stored."""
    from fastapi import FastAPI

    app = FastAPI()

    async def produce(topic: str, message: BaselineProduce) -> dict[str, Any]:
        return {"status": "PUT_OK", "topic": topic, "queue_id": 0, "queue_offset": 0}

    app.post("/v1/topics/{topic}/messages", status_code=201)(produce)
    return app


async def baseline_asgi_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """(a'): reads the body, answers 201 with a fixed JSON body."""
    if scope["type"] != "http":
        return
    more = True
    while more:
        message = await receive()
        more = message.get("more_body", False)
    await send({"type": "http.response.start", "status": 201,
                "headers": [(b"content-type", b"application/json"), (b"content-length", b"19")]})
    await send({"type": "http.response.body", "body": b'{"status":"PUT_OK"}'})


# -- processes ----------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _environment(tree: Path) -> dict[str, str]:
    environment = {key: value for key, value in os.environ.items()
                   if not key.startswith("TWINLOG_")}
    environment["PYTHONPATH"] = str(tree)
    return environment


def _spawn(arguments: list[str], tree: Path = ROOT) -> subprocess.Popen[bytes]:
    """`python arguments` with the code of `tree` (this checkout unless told)."""
    return subprocess.Popen([sys.executable, *arguments], cwd=tree, env=_environment(tree),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def cli_module(tree: Path) -> str:
    """The CLI's module in `tree`: app.cli.main, or app.cli in trees older than that package
    (bench/batch_ab.py runs an older checkout next to this one)."""
    return "app.cli.main" if (tree / "app" / "cli" / "main.py").exists() else "app.cli"


def _wait_for(url: str, process: subprocess.Popen[bytes], check: Any = None) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    with httpx.Client(timeout=2.0) as client:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"{url}: the server exited with {process.returncode}")
            try:
                response = client.get(url)
                if response.status_code == 200 and (check is None or check(response.json())):
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
    raise RuntimeError(f"{url}: not ready after {READY_TIMEOUT_S} s")


@contextmanager
def uvicorn_app(target: str, *, factory: bool) -> Iterator[str]:
    with listening_process(lambda port: [
            "-m", "uvicorn", target, *(["--factory"] if factory else []), "--host",
            "127.0.0.1", "--port", str(port), "--loop", "uvloop", "--http", "httptools",
            "--no-access-log", "--log-level", "warning"]) as (url, _):
        yield url


@contextmanager
def listening_process(arguments: Callable[[int], list[str]]
                      ) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """`python arguments(port)` on a free port of 127.0.0.1, once it listens; yields its URL
    and the process, stopped afterwards."""
    port = free_port()
    process = _spawn(arguments(port))
    try:
        _wait_listening(port, process)
        yield f"http://127.0.0.1:{port}", process
    finally:
        stop_process(process)


def _wait_listening(port: int, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"port {port}: the server exited with {process.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"port {port}: nothing listening after {READY_TIMEOUT_S} s")


@contextmanager
def broker(root: Path, role: str, with_slave: bool = False, name: str = "",
           settings: tuple[str, ...] = ()) -> Iterator[str]:
    """A `twinlog serve` master (and a SLAVE process when asked), with `settings` (key=value)
    on the master; yields the master's URL. Its data dirs are removed afterwards."""
    with broker_processes(root, role, with_slave, name, settings) as (url, _):
        yield url


@contextmanager
def broker_processes(root: Path, role: str, with_slave: bool = False, name: str = "",
                     settings: tuple[str, ...] = (), tree: Path = ROOT
                     ) -> Iterator[tuple[str, list[subprocess.Popen[bytes]]]]:
    """`broker` running the code of `tree`; yields the master's URL and the processes (the
    master first)."""
    http_port, ha_port = free_port(), free_port()
    common = ["--set", "log_level=warning", "--set", "mapped_file_size_bytes=1073741824",
              "--set", "ha_secret=bench-ha-secret"]
    data_dir = root / f"{role}{name}"
    cli = cli_module(tree)
    master = _spawn(["-m", cli, "serve", "--role", role, "--http-port", str(http_port),
                     "--ha-port", str(ha_port), "--data-dir", str(data_dir / "master"),
                     *common, *(part for setting in settings for part in ("--set", setting))],
                    tree)
    processes = [master]
    url = f"http://127.0.0.1:{http_port}"
    try:
        _wait_for(f"{url}/readyz", master)
        if with_slave:
            slave_port = free_port()
            slave = _spawn(["-m", cli, "serve", "--role", "SLAVE", "--http-port",
                            str(slave_port), "--ha-master-address", f"127.0.0.1:{ha_port}",
                            "--master-http-address", url,
                            "--data-dir", str(data_dir / "slave"), *common,
                            "--set", "ha_reconnect_interval_ms=200"], tree)
            processes.append(slave)
            _wait_for(f"{url}/admin/diff", master,
                      check=lambda diff: diff["master"]["in_sync_slave_count"] >= 1)
        yield url, processes
    finally:
        for process in reversed(processes):
            stop_process(process)
        shutil.rmtree(data_dir, ignore_errors=True)


# -- wrk ----------------------------------------------------------------------------------------

_LUA = """
wrk.method = "POST"
wrk.body = {body}
wrk.headers["Content-Type"] = "{content_type}"
function done(summary, latency, requests)
  io.write(string.format('WRK_JSON {{"requests": %d, "duration_us": %d, "p50_us": %d, ' ..
    '"p99_us": %d, "non_2xx": %d, "socket_errors": %d}}\\n', summary.requests,
    summary.duration, latency:percentile(50), latency:percentile(99), summary.errors.status,
    summary.errors.connect + summary.errors.read + summary.errors.write +
    summary.errors.timeout))
end
"""


@dataclass(frozen=True, slots=True)
class Load:
    requests_per_s: float
    p50_ms: float
    p99_ms: float
    non_2xx: int
    socket_errors: int


def ensure_wrk() -> str:
    return ensure_debian_tool("wrk", "wrk")


def run_wrk(wrk: str, url: str, body: bytes, content_type: str, duration_s: float,
            scratch: Path) -> Load:
    script = scratch / "post.lua"
    script.write_text(_LUA.format(body=_lua_string(body), content_type=content_type))
    command = [wrk, f"-t{WRK_THREADS}", f"-c{CONNECTIONS}", f"-d{duration_s:.0f}s", "-s",
               str(script), url]
    output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    line = next(line for line in output.splitlines() if line.startswith("WRK_JSON "))
    figures = json.loads(line.removeprefix("WRK_JSON "))
    if figures["socket_errors"]:
        print(f"  (wrk: {figures['socket_errors']} socket errors on {url})")
    return Load(figures["requests"] / (figures["duration_us"] / 1e6), figures["p50_us"] / 1000,
                figures["p99_us"] / 1000, figures["non_2xx"], figures["socket_errors"])


def _lua_string(data: bytes) -> str:
    return "'" + "".join(f"\\{byte}" if not 32 <= byte < 127 or chr(byte) in "'\\" else chr(byte)
                         for byte in data) + "'"


def measure(wrk: str, url: str, body: bytes, content_type: str, duration_s: float,
            scratch: Path) -> Load:
    run_wrk(wrk, url, body, content_type, min(2.0, duration_s / 2), scratch)  # warm-up
    load = run_wrk(wrk, url, body, content_type, duration_s, scratch)
    if load.non_2xx:
        print(f"  ({load.non_2xx} answers were not 2xx on {url})")
    return load


def show(name: str, load: Load, baseline: Load | None, target: str = "",
         messages_per_request: int = 1) -> None:
    """A figure (req/s, or msgs/s for batches), its ratio to the baseline, and latencies."""
    if messages_per_request == 1:
        row(name, load.requests_per_s, "req/s",
            baseline.requests_per_s if baseline else None, target)
    else:
        row(name, load.requests_per_s * messages_per_request, "msgs/s", None, target)
        row("", load.requests_per_s, "req/s")
    print(f"  {'':<44} p50 {load.p50_ms:7.2f} ms   p99 {load.p99_ms:7.2f} ms")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="2 s per case instead of 5 s")
    parser.add_argument("--rounds", type=int, default=3,
                        help="rounds of the two compared pairs, (a)/(b) and (e)/(e'), measured "
                             "alternately; their medians are shown (default 3)")
    arguments = parser.parse_args()
    duration_s = 2.0 if arguments.quick else 5.0
    wrk, redis_server = ensure_wrk(), ensure_redis_server()
    scratch = Path(tempfile.mkdtemp(prefix="twinlog-http-bench-"))
    try:
        header(f"HTTP produce, wrk -t{WRK_THREADS} -c{CONNECTIONS}, {duration_s:.0f} s per case, "
               f"(a)/(b) and (e)/(e') the medians of {arguments.rounds} alternating rounds, "
               f"{os.cpu_count()} CPUs, load average {_load_average()}")
        figures = _measure_all(wrk, redis_server, scratch, duration_s, arguments.rounds)
        _show_all(figures)
        print(f"  load average at the end: {_load_average()}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _load_average() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def _median_load(loads: list[Load]) -> Load:
    return sorted(loads, key=lambda load: load.requests_per_s)[len(loads) // 2]


def _measure_all(wrk: str, redis_server: str, scratch: Path,
                 duration_s: float, rounds: int) -> dict[str, Any]:
    """Each case once, except the two pairs whose ratios are targets: their cases run
    alternately, `rounds` times each, so that a change in the machine's load (it is shared)
    falls on both sides of the ratio rather than on one."""
    single = json.dumps({"body": BODY_100.decode()}).encode()
    batch = json.dumps({"messages": [{"body": BODY_100.decode()}] * BATCH_MESSAGES}).encode()
    raw_type, json_type = "application/octet-stream", "application/json"
    path = "/v1/topics/Bench/messages"
    figures: dict[str, Any] = {}
    with uvicorn_app("bench.http_produce:baseline_asgi_app", factory=False) as url:
        figures["a'"] = measure(wrk, url + path, single, json_type, duration_s, scratch)
    with (uvicorn_app("bench.http_produce:baseline_fastapi_app", factory=True) as url_a,
          broker(scratch, "ASYNC_MASTER") as url_b):
        pairs = [(measure(wrk, url_a + path, single, json_type, duration_s, scratch),
                  measure(wrk, url_b + path, single, json_type, duration_s, scratch))
                 for _ in range(rounds)]
        figures["a"] = _median_load([a for a, _ in pairs])
        figures["b"] = _median_load([b for _, b in pairs])
        figures["d"] = measure(wrk, url_b + path, BODY_100, raw_type, duration_s, scratch)
    with broker(scratch, "SYNC_MASTER", with_slave=True) as url:
        figures["c"] = measure(wrk, url + path, single, json_type, duration_s, scratch)
        figures["f"] = measure(wrk, url + path + ":batch", batch, json_type, duration_s, scratch)
    with redis_pair(redis_server, scratch, free_port(), free_port()) as url:
        figures["redis single"] = measure_redis(url, CONNECTIONS, 1, duration_s)
        figures["redis batch"] = measure_redis(url, CONNECTIONS, BATCH_MESSAGES, duration_s)
    # (e) last, on a broker of its own: its ~100 MB/s of writes leave the kernel flushing
    # dirty pages for a while, which would tax whatever case came next.
    http_batches: list[Load] = []
    in_process: list[float] = []
    with broker(scratch, "ASYNC_MASTER", name="batch") as url:
        for round_index in range(rounds):
            http_batches.append(measure(wrk, url + path + ":batch", batch, json_type,
                                        duration_s, scratch))
            in_process.append(in_process_batch(scratch / f"in-process-{round_index}", BODY_100,
                                               BATCH_MESSAGES, duration_s))
    figures["e"] = _median_load(http_batches)
    figures["e'"] = sorted(in_process)[len(in_process) // 2]
    return figures


def _show_all(figures: dict[str, Any]) -> None:
    a, b, c, e, f = (figures[name] for name in ("a", "b", "c", "e", "f"))
    redis_single: RedisLoad = figures["redis single"]
    redis_batch: RedisLoad = figures["redis batch"]
    show("(a) bare FastAPI + pydantic body (baseline)", a, None,
         f"(measured before any code: ~{MEASURED_A_REQ_PER_S:,})")
    show("(a') bare ASGI callable, same uvicorn", figures["a'"], a, "(the server's ceiling)")
    show("(b) produce JSON, ASYNC_MASTER", b, a, "target >= 1.50 of (a)")
    show("(c) produce JSON, SYNC_MASTER + live slave", c, b, "target >= 0.80 of (b)")
    show("(d) produce raw body, ASYNC_MASTER", figures["d"], b, "(ratio to (b))")
    show("(e) batch 100 x 100 B, ASYNC_MASTER", e, None, "target >= 100,000 msgs/s",
         messages_per_request=BATCH_MESSAGES)
    in_process_per_s = figures["e'"]
    row("(e') the same batches in-process", in_process_per_s, "msgs/s")
    _ratio("(e) over HTTP / (e') in-process",
           e.requests_per_s * BATCH_MESSAGES / in_process_per_s, "target >= 0.50")
    _ratio("(e) p99 / p50 at 64 connections", e.p99_ms / e.p50_ms,
           f"target <= 5; socket errors {e.socket_errors} (target 0)")
    show("(f) batch 100 x 100 B, SYNC_MASTER + slave", f, None, "",
         messages_per_request=BATCH_MESSAGES)
    _show_redis("Redis XADD + WAIT 1, single (redis-py)", redis_single)
    row("(c) SYNC_MASTER single / Redis single", c.requests_per_s, "req/s",
        redis_single.requests_per_s, "target >= 0.60")
    _show_redis("Redis 100 x XADD + WAIT 1, pipelined", redis_batch)
    row("(f) SYNC_MASTER batch / Redis batch", f.requests_per_s * BATCH_MESSAGES, "msgs/s",
        redis_batch.messages_per_s, "target >= 1.00")


def _ratio(name: str, value: float, target: str) -> None:
    print(f"  {name:<44} {value:14.2f} {'ratio':<8}  {target}")


def _show_redis(name: str, load: RedisLoad) -> None:
    row(name, load.messages_per_s, "msgs/s")
    print(f"  {'':<44} p50 {load.p50_ms:7.2f} ms   p99 {load.p99_ms:7.2f} ms"
          f"   WAIT short of 1 replica: {load.errors}")


if __name__ == "__main__":
    main()
