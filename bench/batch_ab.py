"""Batch produce of two checkouts in alternating rounds: is one slower than the other?

    python bench/batch_ab.py --old-tree /path/to/older/checkout            # 4 rounds, 5 s
    python bench/batch_ab.py --old-tree ../wt-old --new-tree ../wt-new --rounds 6

bench/http_produce.py's batch cases, each on fresh brokers of each checkout (`twinlog serve`
run with that checkout's code on PYTHONPATH; --new-tree is this checkout unless told):
  (e) batches of 100 x 100 B on an ASYNC_MASTER;
  (f) the same on a SYNC_MASTER with a live SLAVE.
Each round measures both checkouts, in turn, the order swapped every round, so that a change in
the machine's load (it is shared) falls on both sides. Per case: every round's msgs/s, the
median of each side and the median of the per-round ratios new/old.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import header  # noqa: E402
from bench.http_produce import BATCH_MESSAGES, BODY_100, broker, ensure_wrk, measure  # noqa: E402

_BATCH = json.dumps({"messages": [{"body": BODY_100.decode()}] * BATCH_MESSAGES}).encode()
_PATH = "/v1/topics/Bench/messages:batch"
# (name, role, with a slave)
CASES = (("(e) batch, ASYNC_MASTER", "ASYNC_MASTER", False),
         ("(f) batch, SYNC_MASTER + slave", "SYNC_MASTER", True))


def _batch_rate(wrk: str, tree: Path, role: str, with_slave: bool, duration_s: float,
                scratch: Path) -> float:
    """Messages per second of batch produce on fresh brokers running `tree`'s code."""
    with broker(scratch, role, with_slave=with_slave, name=tree.name, tree=tree) as url:
        load = measure(wrk, url + _PATH, _BATCH, "application/json", duration_s, scratch)
    return load.requests_per_s * BATCH_MESSAGES


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
    arguments = parser.parse_args()
    trees = {"old": arguments.old_tree.resolve(), "new": arguments.new_tree.resolve()}
    wrk = ensure_wrk()
    header(f"Batch produce, {trees['new']} (new) against {trees['old']} (old), "
           f"{arguments.rounds} alternating rounds of {arguments.duration_s:.0f} s; load "
           f"average {os.getloadavg()[0]:.1f}")
    scratch = Path(tempfile.mkdtemp(prefix="twinlog-batch-ab-"))
    try:
        for name, role, with_slave in CASES:
            rates: dict[str, list[float]] = {"old": [], "new": []}
            for round_index in range(arguments.rounds):
                order = ("old", "new") if round_index % 2 == 0 else ("new", "old")
                for side in order:
                    rates[side].append(_batch_rate(wrk, trees[side], role, with_slave,
                                                   arguments.duration_s, scratch))
                print(f"  {name:<34} round {round_index + 1}: new {rates['new'][-1]:10,.0f}"
                      f"   old {rates['old'][-1]:10,.0f} msgs/s   ratio "
                      f"{rates['new'][-1] / rates['old'][-1]:5.2f}", flush=True)
            _summary(name, rates)
        print(f"  load average at the end: {os.getloadavg()[0]:.1f}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _summary(name: str, rates: dict[str, list[float]]) -> None:
    ratios = [new / old for new, old in zip(rates["new"], rates["old"], strict=True)]
    listed = ", ".join(f"{ratio:.2f}" for ratio in sorted(ratios))
    print(f"  {name:<34} median: new {_median(rates['new']):10,.0f}   old "
          f"{_median(rates['old']):10,.0f} msgs/s; ratios new/old {listed}, median "
          f"{_median(ratios):.2f}")


if __name__ == "__main__":
    main()
