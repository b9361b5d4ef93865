"""Batch produce of two checkouts in alternating rounds: is one slower than the other?

    python bench/batch_ab.py --old-tree /path/to/older/checkout            # 4 rounds, 5 s
    python bench/batch_ab.py --old-tree ../wt-old --new-tree ../wt-new --rounds 6
    python bench/batch_ab.py --old-tree ../wt-old --in-process             # CPU per message

bench/http_produce.py's batch cases, each on fresh brokers of each checkout (`twinlog serve`
run with that checkout's code on PYTHONPATH; --new-tree is this checkout unless told):
  (e) batches of 100 x 100 B on an ASYNC_MASTER;
  (f) the same on a SYNC_MASTER with a live SLAVE.
Each round measures both checkouts, in turn, the order swapped every round, so that a change in
the machine's load (it is shared) falls on both sides. Per case: every round's msgs/s and the
master process's CPU per message (steadier than msgs/s when other programs share the CPUs), the
median of each side and the median of the per-round ratios new/old.

--in-process: instead, bench/batch_cpu.py run with each checkout's code (batches through the
ASGI app, no sockets): the CPU per message of the request path (the event loop's thread) and of
the whole broker process, best of 5 per round. On a loaded machine this tells a few per cent
apart where the HTTP rates cannot.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import cpu_s, header  # noqa: E402
from bench.http_produce import (  # noqa: E402
    BATCH_MESSAGES,
    BODY_100,
    broker_processes,
    ensure_wrk,
    run_wrk,
)

_BATCH = json.dumps({"messages": [{"body": BODY_100.decode()}] * BATCH_MESSAGES}).encode()
_PATH = "/v1/topics/Bench/messages:batch"
# (name, role, with a slave)
CASES = (("(e) batch, ASYNC_MASTER", "ASYNC_MASTER", False),
         ("(f) batch, SYNC_MASTER + slave", "SYNC_MASTER", True))


def _batch_rate(wrk: str, tree: Path, role: str, with_slave: bool, duration_s: float,
                scratch: Path) -> tuple[float, float]:
    """Messages per second of batch produce on fresh brokers running `tree`'s code, and the
    CPU the master process spent per message meanwhile (us): the CPU is the steadier figure
    when other programs share the machine."""
    with broker_processes(scratch, role, with_slave=with_slave, name=tree.name,
                          tree=tree) as (url, processes):
        run_wrk(wrk, url + _PATH, _BATCH, "application/json", min(2.0, duration_s / 2),
                scratch)  # warm-up
        cpu_before_s = cpu_s(processes[0].pid)
        load = run_wrk(wrk, url + _PATH, _BATCH, "application/json", duration_s, scratch)
        used_s = cpu_s(processes[0].pid) - cpu_before_s
    messages = load.requests_per_s * duration_s * BATCH_MESSAGES
    if load.non_2xx:
        print(f"  ({load.non_2xx} answers were not 2xx)")
    return load.requests_per_s * BATCH_MESSAGES, used_s * 1e6 / messages


def _cpu_in_process(tree: Path) -> dict[str, float]:
    """bench/batch_cpu.py's figures with `tree`'s code."""
    environment = {key: value for key, value in os.environ.items()
                   if not key.startswith("TWINLOG_")}
    environment["PYTHONPATH"] = str(tree)
    output = subprocess.run([sys.executable, str(ROOT / "bench" / "batch_cpu.py")], cwd=tree,
                            env=environment, check=True, capture_output=True, text=True).stdout
    line = next(line for line in output.splitlines() if line.startswith("BATCH_CPU "))
    figures: dict[str, float] = json.loads(line.removeprefix("BATCH_CPU "))
    return figures


def _in_process(trees: dict[str, Path], rounds: int) -> None:
    loop_us: dict[str, list[float]] = {"old": [], "new": []}
    process_us: dict[str, list[float]] = {"old": [], "new": []}
    name = "batch, in-process ASGI"
    for round_index in range(rounds):
        for side in ("old", "new") if round_index % 2 == 0 else ("new", "old"):
            figures = _cpu_in_process(trees[side])
            loop_us[side].append(figures["loop_best_us"])
            process_us[side].append(figures["process_best_us"])
        print(f"  {name:<34} round {round_index + 1}: CPU per message, request path new "
              f"{loop_us['new'][-1]:5.2f}   old {loop_us['old'][-1]:5.2f} us; process new "
              f"{process_us['new'][-1]:5.2f}   old {process_us['old'][-1]:5.2f} us", flush=True)
    _summary(name, loop_us, "us/msg, request path")
    _summary(name, process_us, "us/msg, process")


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--old-tree", type=Path, required=True,
                        help="the checkout measured as the baseline")
    parser.add_argument("--new-tree", type=Path, default=ROOT,
                        help="the checkout compared with it (default: this one)")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--duration-s", type=float, default=5.0, help="per measurement")
    parser.add_argument("--in-process", action="store_true",
                        help="CPU per message in-process (bench/batch_cpu.py), not HTTP rates")
    arguments = parser.parse_args()
    trees = {"old": arguments.old_tree.resolve(), "new": arguments.new_tree.resolve()}
    header(f"Batch produce, {trees['new']} (new) against {trees['old']} (old), "
           f"{arguments.rounds} alternating rounds"
           f"{'' if arguments.in_process else f' of {arguments.duration_s:.0f} s'}; load "
           f"average {os.getloadavg()[0]:.1f}")
    if arguments.in_process:
        _in_process(trees, arguments.rounds)
        print(f"  load average at the end: {os.getloadavg()[0]:.1f}")
        return
    wrk = ensure_wrk()
    scratch = Path(tempfile.mkdtemp(prefix="twinlog-batch-ab-"))
    try:
        for name, role, with_slave in CASES:
            rates: dict[str, list[float]] = {"old": [], "new": []}
            cpu_us: dict[str, list[float]] = {"old": [], "new": []}
            for round_index in range(arguments.rounds):
                order = ("old", "new") if round_index % 2 == 0 else ("new", "old")
                for side in order:
                    rate, cpu = _batch_rate(wrk, trees[side], role, with_slave,
                                            arguments.duration_s, scratch)
                    rates[side].append(rate)
                    cpu_us[side].append(cpu)
                print(f"  {name:<34} round {round_index + 1}: new {rates['new'][-1]:10,.0f}"
                      f"   old {rates['old'][-1]:10,.0f} msgs/s   ratio "
                      f"{rates['new'][-1] / rates['old'][-1]:5.2f}; master CPU new "
                      f"{cpu_us['new'][-1]:5.2f}   old {cpu_us['old'][-1]:5.2f} us/msg",
                      flush=True)
            _summary(name, rates, "msgs/s")
            _summary(name, cpu_us, "master CPU us/msg")
        print(f"  load average at the end: {os.getloadavg()[0]:.1f}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _summary(name: str, figures: dict[str, list[float]], unit: str) -> None:
    ratios = [new / old for new, old in zip(figures["new"], figures["old"], strict=True)]
    listed = ", ".join(f"{ratio:.2f}" for ratio in sorted(ratios))
    print(f"  {name:<34} median: new {_median(figures['new']):10,.2f}   old "
          f"{_median(figures['old']):10,.2f} {unit}; ratios new/old {listed}, median "
          f"{_median(ratios):.2f}")


if __name__ == "__main__":
    main()
