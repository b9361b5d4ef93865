"""Offset commits over HTTP next to produce, on one SYNC_MASTER with a live SLAVE process.

    python bench/http_offsets.py            # 5 s per case, 3 rounds
    python bench/http_offsets.py --quick    # 2 s per case, 1 round

A commit is a record of the replicated log (app/broker/metadata_log.py): on a SYNC_MASTER it
answers once the slave holds it and this broker applied it, as a put answers once the slave
holds it. Both cases run alternately on the same pair with wrk (64 connections, loopback):
  (c) single JSON produce (the baseline: bench/http_produce.py's case c);
  (o) PUT /v1/groups/G/offsets/T/queues/0: 64 groups, each wrk request the next offset of
      its group (forward commits, as consumers make them; every one writes a record). A
      commit that overtakes an earlier one of its group on another connection answers 409
      OFFSET_MOVES_BACKWARDS, counted as not 2xx.
Target: (o) >= 0.8 of (c). The machine's load average is printed. Next to each rate: the CPU
the master and the slave process spent per request meanwhile, which moves far less than the
rates when other programs share the machine. --tree DIR runs the brokers with another
checkout's code (the same wrk scripts), to compare two builds in the same conditions.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import cpu_s, header, row  # noqa: E402
from bench.http_consume import run_script  # noqa: E402
from bench.http_produce import (  # noqa: E402
    _LUA,
    CONNECTIONS,
    ROOT,
    WRK_THREADS,
    Load,
    broker_processes,
    ensure_wrk,
    run_wrk,
)

GROUPS = 64
TOPIC = "Offsets"

# One request function per wrk thread: requests go round the 64 groups, each the next offset
# of its group from `base` on (a run starts past the offsets the previous one reached).
_COMMITS = """
local counter = 0
request = function()
  counter = counter + 1
  local group = counter % {groups}
  local offset = {base} + math.floor(counter / {groups})
  local body = '{{"offset": ' .. offset .. '}}'
  return wrk.format("PUT", "/v1/groups/g" .. group .. "/offsets/{topic}/queues/0",
                    {{["Content-Type"] = "application/json"}}, body)
end
""" + _LUA.replace('wrk.method = "POST"\nwrk.body = {body}\nwrk.headers["Content-Type"] = '
                   '"{content_type}"\n', "")


_next_base = [2]
MESSAGES = 40_000  # in queue 0: past the offsets any run reaches


def run_commits(wrk: str, url: str, duration_s: float, scratch: Path) -> Load:
    script = scratch / "commits.lua"
    script.write_text(_COMMITS.format(groups=GROUPS, topic=TOPIC, base=_next_base[0]))
    load = run_script(wrk, script, url, duration_s)
    # Each run's requests at most: the next starts past the offsets this one reached.
    _next_base[0] += int(load.requests_per_s * (duration_s + 1)) // GROUPS + 2
    if _next_base[0] >= MESSAGES:
        raise SystemExit(f"commits reached offset {_next_base[0]}: raise MESSAGES")
    return load


def _prepare(url: str) -> None:
    """The topic with messages in queue 0, and every group with a first commit."""
    with httpx.Client(base_url=url, timeout=30.0) as client:
        client.post("/v1/topics", json={"name": TOPIC, "read_queue_count": 1,
                                        "write_queue_count": 1}).raise_for_status()
        for _ in range(MESSAGES // 100):
            client.post(f"/v1/topics/{TOPIC}/messages:batch",
                        json={"messages": [{"body": "x"}] * 100}).raise_for_status()
        for group in range(GROUPS):
            client.put(f"/v1/groups/g{group}/offsets/{TOPIC}/queues/0",
                       json={"offset": 1}).raise_for_status()


def _with_cpu(pids: list[int], duration_s: float,
              run: Callable[[], Load]) -> tuple[Load, list[float]]:
    """`run`'s load, and the CPU each of `pids` spent per request meanwhile (us)."""
    before_s = [cpu_s(pid) for pid in pids]
    load = run()
    requests = max(1.0, load.requests_per_s * duration_s)
    return load, [(cpu_s(pid) - before) * 1e6 / requests
                  for pid, before in zip(pids, before_s, strict=True)]


def _show_cpu(cpu_us: list[float]) -> None:
    print(f"  {'':<44} CPU per request: master {cpu_us[0]:6.1f} us, slave "
          f"{cpu_us[1]:6.1f} us")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="2 s per case, 1 round")
    parser.add_argument("--tree", type=Path, default=ROOT,
                        help="the checkout whose code the brokers run (default: this one)")
    arguments = parser.parse_args()
    duration_s, rounds = (2.0, 1) if arguments.quick else (5.0, 3)
    wrk = ensure_wrk()
    single = json.dumps({"body": "x" * 100}).encode()
    tree = arguments.tree.resolve()
    header(f"Offset commits next to produce, SYNC_MASTER + SLAVE, wrk -t{WRK_THREADS} "
           f"-c{CONNECTIONS}, {duration_s:.0f} s per case, {rounds} rounds"
           f"{'' if tree == ROOT else f', brokers of {tree}'}; load average "
           f"{os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory(prefix="twinlog-bench-offsets-") as scratch_name:
        scratch = Path(scratch_name)
        with broker_processes(scratch, "SYNC_MASTER", with_slave=True,
                              tree=tree) as (url, processes):
            pids = [process.pid for process in processes]
            _prepare(url)
            produce_url = url + f"/v1/topics/{TOPIC}/messages"
            warm_up_s = min(2.0, duration_s / 2)
            run_wrk(wrk, produce_url, single, "application/json", warm_up_s, scratch)
            run_commits(wrk, url, warm_up_s, scratch)
            pairs = []
            for _ in range(rounds):
                produce, produce_cpu_us = _with_cpu(pids, duration_s, lambda: run_wrk(
                    wrk, produce_url, single, "application/json", duration_s, scratch))
                commits, commits_cpu_us = _with_cpu(
                    pids, duration_s, lambda: run_commits(wrk, url, duration_s, scratch))
                pairs.append((produce, commits))
                row("(c) produce, single JSON", produce.requests_per_s, "req/s")
                _show_cpu(produce_cpu_us)
                row("(o) offset commits", commits.requests_per_s, "req/s",
                    produce.requests_per_s, ">= 0.8")
                print(f"  {'':<44} commits p50 {commits.p50_ms:7.2f} ms   "
                      f"p99 {commits.p99_ms:7.2f} ms")
                _show_cpu(commits_cpu_us)
                for name, load in (("produce", produce), ("commits", commits)):
                    if load.non_2xx:
                        print(f"  ({name}: {load.non_2xx} answers were not 2xx)")
    ratios = sorted(commits.requests_per_s / produce.requests_per_s
                    for produce, commits in pairs)
    print(f"  ratios (o)/(c): {', '.join(f'{ratio:.2f}' for ratio in ratios)}; "
          f"median {ratios[len(ratios) // 2]:.2f} (target >= 0.8); load average "
          f"{os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
