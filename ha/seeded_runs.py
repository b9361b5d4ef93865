"""Running a seeded simulation over many seeds: in this process, or over a bounded pool of
processes, and the command line both simulations share (ha/dledger/simulation/sim.py,
ha/classic/simulation/sim.py):

    python -m MODULE --seed 1234                 # replay one seed
    python -m MODULE --seeds 10000 --workers 2   # many seeds; prints how many and how long
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from typing import TypeVar

R = TypeVar("R")
RunSeeds = Callable[[int, int], list[R]]  # (first seed, count) -> one result per seed


def run_pooled(run_seeds: RunSeeds[R], first_seed: int, count: int, workers: int,
               chunk_seeds: int, failure: type[BaseException]) -> list[R]:
    """`run_seeds(first_seed, count)` over at most `workers` processes, in chunks of
    `chunk_seeds` (so the pool's queue stays small); the first `failure`, in seed order, is
    raised as `run_seeds` raises it. `run_seeds` must be a module-level function."""
    if workers <= 1:
        return run_seeds(first_seed, count)
    end = first_seed + count
    chunks = [(first, min(chunk_seeds, end - first))
              for first in range(first_seed, end, chunk_seeds)]
    with ProcessPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(run_seeds, first, size) for first, size in chunks]
        try:
            return [result for future in futures for result in future.result()]
        except failure:
            pool.shutdown(cancel_futures=True)  # report now, not after every other chunk
            raise


def main(argv: list[str] | None, description: str | None,
         run_many: Callable[[int, int, int], list[R]], summary: Callable[[list[R]], str],
         failure: type[BaseException]) -> int:
    """Replay one seed or run many; print how many passed and how long it took, or the
    failure (which names the seed) on stderr and exit 1."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--seed", type=int, help="replay this one seed")
    parser.add_argument("--seeds", type=int, default=100, help="how many seeds to run")
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=1, help="processes (a bounded pool)")
    args = parser.parse_args(argv)
    first, count = (args.seed, 1) if args.seed is not None else (args.first_seed, args.seeds)
    started = time.monotonic()
    try:
        results = run_many(first, count, args.workers)
    except failure as error:
        print(error, file=sys.stderr)
        return 1
    elapsed_s = time.monotonic() - started
    print(f"{count} seeds from {first} passed in {elapsed_s:.1f} s with {args.workers} "
          f"worker(s) ({summary(results)})")
    return 0
