"""Running a seeded simulation over many seeds: in this process, or over a bounded pool of
processes, and the command line both simulations share (ha/dledger/simulation/sim.py,
ha/classic/simulation/sim.py):

    python -m MODULE --seed 1234                 # replay one seed
    python -m MODULE --seeds 10000 --workers 2   # many seeds; prints how many and how long
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import sys
import time
from collections.abc import Callable
from typing import TypeVar

R = TypeVar("R")
RunSeeds = Callable[[int, int], list[R]]  # (first seed, count) -> one result per seed


CHUNKS_PER_WORKER = 4  # so the workers end close together, whatever a seed costs


def chunks(first_seed: int, count: int, workers: int,
           chunk_seeds_max: int) -> list[tuple[int, int]]:
    """`(first seed, count)` of each task: about CHUNKS_PER_WORKER tasks per worker, so that
    one worker does not run a long last chunk alone (40 seeds in chunks of 25 kept one of 2
    workers idle for a third of the run), and none over `chunk_seeds_max` seeds (the pool's
    queue stays small for 10,000 seeds)."""
    size = min(chunk_seeds_max, max(1, math.ceil(count / (workers * CHUNKS_PER_WORKER))))
    end = first_seed + count
    return [(first, min(size, end - first)) for first in range(first_seed, end, size)]


def run_pooled(run_seeds: RunSeeds[R], first_seed: int, count: int, workers: int,
               chunk_seeds_max: int) -> list[R]:
    """`run_seeds(first_seed, count)` over at most `workers` forked processes, in chunks (see
    `chunks`); the first failure, in seed order, is raised as `run_seeds` raises it, as soon
    as the chunks before it have passed: the workers still running later chunks are stopped,
    not waited for (a broken rule caught at seed 37 of 100 took twice the time of the seeds
    before it). `run_seeds` must be a module-level function; the workers are forked, so they
    run the code as patched in this process (the tests' broken rules)."""
    if workers <= 1:
        return run_seeds(first_seed, count)
    # Leaving the pool terminates its workers, whatever they are running.
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        tasks = [pool.apply_async(run_seeds, task)
                 for task in chunks(first_seed, count, workers, chunk_seeds_max)]
        return [result for task in tasks for result in task.get()]


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
