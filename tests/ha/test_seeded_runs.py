"""Seeds over a pool of processes (ha/seeded_runs.py): the chunks keep both workers busy to
the end, and the first failure in seed order comes back as soon as the seeds before it have
passed, without waiting for the chunks still running."""

from __future__ import annotations

import multiprocessing
import time

from ha.seeded_runs import chunks, run_pooled

FAILED_LATER = multiprocessing.get_context("fork").Event()  # inherited by the forked workers
STUCK_S = 30.0  # a chunk still running when the failure comes back: far longer than the test


class Failure(AssertionError):
    pass


def run_seeds(first_seed: int, count: int) -> list[int]:
    """Seed 0 fails once seed 1 has failed (so both have), seed 2 runs on for STUCK_S."""
    if first_seed == 0:
        assert FAILED_LATER.wait(STUCK_S)
        raise Failure("seed=0")
    if first_seed == 1:
        FAILED_LATER.set()
        raise Failure("seed=1")
    multiprocessing.get_context("fork").Event().wait(STUCK_S)
    return list(range(first_seed, first_seed + count))


def test_the_first_failure_in_seed_order_comes_back_without_waiting_for_running_chunks() -> None:
    FAILED_LATER.clear()
    started = time.monotonic()
    try:
        run_pooled(run_seeds, 0, 3, workers=2, chunk_seeds_max=1)
    except Failure as failure:
        assert str(failure) == "seed=0"
    else:
        raise AssertionError("no failure raised")
    assert time.monotonic() - started < STUCK_S / 3


def test_chunks_cover_the_seeds_in_order_several_per_worker_and_bounded() -> None:
    def covered(tasks: list[tuple[int, int]]) -> list[int]:
        return [seed for first, count in tasks for seed in range(first, first + count)]

    # 40 seeds on 2 workers: 8 chunks of 5, not 25 and 15 (one worker idle for 10 seeds).
    assert chunks(0, 40, workers=2, chunk_seeds_max=25) == [(f, 5) for f in range(0, 40, 5)]
    assert covered(chunks(7, 100, 2, 50)) == list(range(7, 107))
    assert max(count for _, count in chunks(0, 10_000, 2, 50)) == 50
    assert chunks(5, 3, workers=2, chunk_seeds_max=25) == [(5, 1), (6, 1), (7, 1)]
