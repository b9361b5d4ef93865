"""Mutation testing of the modules whose answers are promises (`make mutate`).

Each module is mutated with mutmut 2 against the tests that cover it, not the whole suite, so a
run fits a 2-core machine: one mutant at a time, pytest with `-x` and no cache. mutmut 2 is used
rather than 3 because 3 mutates only inside functions, and some promises here are module-level
tables (app/api/errors.py maps each put status to its HTTP status). mutmut 2 edits the file in place
(keeping a `.bak`) and restores it; it never copies the tree. Its results stay in
`.mutmut-cache` (ignored by git) for `mutmut show ID`; `--incremental` starts from them.

    python scripts/mutate.py                     # every module, one after another
    python scripts/mutate.py store/record.py     # one module
    python scripts/mutate.py --incremental store/record.py   # re-test the survivors only
    python scripts/mutate.py --tests store/record.py   # the test command of one mutant

Per module it prints the diff of each survivor, marked equivalent when docs/mutation.md lists
it (with the reason no test can kill it), then a table: mutants generated, killed, survived, of
which equivalent, the kill rate among killable mutants (killed / (generated - equivalent)) and
the run time. It exits 1 when a module's kill rate is under 90%.
"""

from __future__ import annotations

import argparse
import os
import re
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / ".mutmut-cache"
EQUIVALENTS = ROOT / "docs" / "mutation.md"
EQUIVALENT_ITEM = re.compile(r"^- `(?P<source>.+?)` → `(?P<mutant>.+?)`:(?: |$)")
DELETED = "(deleted)"

# Each promise-bearing module and the test files that pin its answers.
MODULE_TESTS: dict[str, list[str]] = {
    "store/record.py": ["tests/store/test_record.py"],
    "store/waits/once.py": [
        "tests/store/waits/test_completion.py", "tests/ha/dledger/host/test_append_future.py",
    ],
    "store/waits/completion.py": ["tests/store/waits/test_completion.py"],
    "store/recovery.py": ["tests/store/test_recovery.py"],
    "store/flush.py": [
        "tests/store/test_flush.py", "tests/store/waits/test_put_api.py",
        "tests/store/test_disk_faults.py",
    ],
    "ha/connection.py": ["tests/ha/test_connection.py"],
    "ha/service.py": ["tests/ha/test_service.py"],
    # The DLedger node is a pure state machine: its own tests drive it without sockets.
    "ha/dledger/core/node.py": [
        "tests/ha/dledger/core/test_election.py", "tests/ha/dledger/core/test_replication.py",
        "tests/ha/dledger/core/test_transfer.py", "tests/ha/dledger/core/test_throttle.py",
    ],
    # The classic replication core is pure: its own tests drive it event by event.
    "ha/classic/core/link.py": ["tests/ha/classic/core/test_link.py"],
    "ha/classic/core/master.py": ["tests/ha/classic/core/test_master.py"],
    "ha/classic/core/slave.py": ["tests/ha/classic/core/test_slave.py"],
    "ha/classic/core/epochs.py": ["tests/ha/classic/core/test_epochs.py"] + [
        f"tests/ha/test_epochs.py::{name}" for name in (
            "test_an_empty_slave_starts_from_the_beginning",
            "test_a_slave_ahead_of_a_master_that_lost_its_tail_cuts_back",
            "test_a_deposed_master_cuts_back_to_where_its_successor_began",
            "test_a_foreign_slave_is_refused_and_a_slave_behind_retention_needs_a_reset",
            "test_a_master_drops_epochs_it_holds_no_byte_of",
            "test_the_agreed_offset_is_exactly_the_common_prefix",
        )
    ],
    "app/api/errors.py": [
        "tests/app/api/test_errors.py", "tests/app/api/test_openapi.py::test_file_matches_the_app",
    ],
    # The window and rebuild themselves; the tests through a served broker add minutes per
    # surviving mutant and pin nothing these do not.
    "app/broker/idempotency.py": [
        f"tests/app/broker/test_idempotency.py::{name}" for name in (
            "test_window_forgets_after_its_time", "test_window_edge_is_inclusive",
            "test_window_keeps_at_most_keys_max", "test_pending_key_is_awaited_not_stored_twice",
            "test_default_clock_is_the_wall_clock",
            "test_window_needs_a_positive_length_and_at_least_one_key",
            "test_replays_are_counted", "test_eviction_keeps_a_key_at_the_edge_of_the_window",
            "test_a_remembered_key_again_becomes_the_newest",
            "test_finished_put_is_remembered_at_the_clocks_time",
            "test_window_bounds_hold_for_any_sequence", "test_rebuild_takes_only_the_window",
            "test_rebuild_includes_a_message_stored_exactly_window_s_ago",
            "test_rebuild_reads_a_bounded_number_of_messages",
            "test_rebuild_skips_messages_without_a_key",
            "test_rebuild_keeps_a_key_followed_by_more_than_keys_max_keyless_messages",
            "test_rebuild_finds_keys_max_keys_across_keyless_messages_on_one_queue",
            "test_rebuild_does_not_read_messages_older_than_the_window",
            "test_rebuild_reads_each_chunk_once_across_keyless_gaps",
            "test_claim_takes_every_key_or_none",
            "test_rebuild_memory_does_not_depend_on_message_size",
        )
    ],
}

# Modules whose mapped tests use no clock, thread, socket or process: a failure there is the
# mutant's doing, so a failing mutant is not run a second time (that doubles a kill's cost).
DETERMINISTIC_TESTS = {"app/api/errors.py"}

# mutmut 2 statuses: a mutant is killed when its tests fail (slowly: "suspicious") or hang.
KILLED_STATUSES = ("ok_killed", "ok_suspicious", "bad_timeout")
SURVIVED_STATUS = "bad_survived"
KILL_RATE_MIN = 0.9
_CONFIRMING = "TWINLOG_MUTATE_CONFIRMING"  # set in the second run of a failing mutant


@dataclass(frozen=True, slots=True)
class Survivor:
    mutant_id: str
    source: str
    mutant: str
    diff: str

    @classmethod
    def from_diff(cls, mutant_id: str, diff: str) -> Survivor:
        lines = diff.splitlines()
        removed = [line[1:].strip() for line in lines if line.startswith("-")
                   and not line.startswith("---") and line[1:].strip()]
        added = [line[1:].strip() for line in lines if line.startswith("+")
                 and not line.startswith("+++") and line[1:].strip()]
        return cls(mutant_id, " / ".join(removed), " / ".join(added) or DELETED, diff)


@dataclass(frozen=True, slots=True)
class ModuleResult:
    module: str
    generated: int
    killed: int
    survived: int
    equivalent: int
    run_time_s: float

    @property
    def kill_rate(self) -> float:
        """Killed among the mutants that can be killed (the equivalent ones cannot)."""
        killable = self.generated - self.equivalent
        return self.killed / killable if killable else 1.0


def run_tests(module: str) -> int:
    """The test command of one mutant: 0 when the tests pass, 1 on any failure.

    mutmut 2 counts only exit status 1 as a kill; a mutant that breaks collection or the import
    (pytest exit 2, 3 or 4) is just as detected, so every non-zero status becomes 1. A failure
    counts only when a second run fails too: on a loaded machine a slow test can miss a
    deadline once, and a kill must be the mutant's doing. (A killed mutant usually fails in its
    first tests, so the second run is short.) Modules in DETERMINISTIC_TESTS are run once.
    """
    import pytest
    from hypothesis import Phase, settings

    # A killed mutant fails at its first falsifying example; shrinking it would only cost time.
    # Derandomized, a mutant meets the same examples on every run; no example database is kept.
    settings.register_profile(
        "mutate", phases=(Phase.explicit, Phase.generate), derandomize=True, database=None)
    settings.load_profile("mutate")
    arguments = ["-x", "-q", "-p", "no:cacheprovider", "--no-header",
                 "-W", "ignore::pytest.PytestAssertRewriteWarning", *MODULE_TESTS[module]]
    if pytest.main(arguments) == 0:
        return 0
    if os.environ.get(_CONFIRMING) or module in DETERMINISTIC_TESTS:
        return 1
    print("-- failed; running again to confirm the kill", flush=True)
    again = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--tests", module],
                           env={**os.environ, _CONFIRMING: "1"}, check=False)
    return 0 if again.returncode == 0 else 1


def mutate(module: str, incremental: bool) -> ModuleResult:
    """Mutate one module and count what its tests did to the mutants. From a fresh cache, or
    (incremental) from the last run's: mutmut then re-tests only the mutants not killed yet,
    once the tests changed."""
    if not incremental:
        CACHE.unlink(missing_ok=True)
    elif CACHE.exists():
        _settle_kills()
    runner = f"{sys.executable} {Path(__file__).resolve()} --tests {module}"
    command = [
        sys.executable, "-m", "mutmut", "run", "--paths-to-mutate", module,
        "--runner", runner, "--tests-dir", "tests", "--no-progress", "--simple-output",
    ]
    environment = {**os.environ, "PYTHONPATH": str(ROOT)}
    started = time.monotonic()
    # mutmut's exit status says whether mutants survived; the counts below say it better.
    subprocess.run(command, cwd=ROOT, env=environment, check=False)
    run_time_s = time.monotonic() - started
    counts = _status_counts(module)
    if counts.get("untested", 0):
        raise SystemExit(f"{module}: mutmut left {counts['untested']} mutants untested")
    listed = equivalent_mutants(module)
    equivalent = 0
    print(f"\n== {module}: surviving mutants")
    for survivor in survivors():
        known = (survivor.source, survivor.mutant) in listed
        equivalent += known
        print(f"-- mutant {survivor.mutant_id}: "
              f"{'equivalent (docs/mutation.md)' if known else 'NOT EXPLAINED'}")
        print(survivor.diff)
    return ModuleResult(
        module=module,
        generated=sum(counts.values()),
        killed=sum(counts.get(status, 0) for status in KILLED_STATUSES),
        survived=counts.get(SURVIVED_STATUS, 0),
        equivalent=equivalent,
        run_time_s=run_time_s,
    )


def _settle_kills() -> None:
    """Before an incremental run: a mutant counted killed stays killed. mutmut 2 keeps only
    "ok_killed" across a change of the tests and re-tests every other status, also the slow
    kills ("suspicious") and the hangs (each costs 10x the baseline), not just the survivors."""
    with sqlite3.connect(CACHE) as connection:
        connection.execute(
            f"UPDATE mutant SET status = 'ok_killed' WHERE status IN "
            f"({', '.join('?' * len(KILLED_STATUSES))})", KILLED_STATUSES)


def _status_counts(module: str) -> dict[str, int]:
    query = (
        "SELECT mutant.status, COUNT(*) FROM mutant JOIN line ON mutant.line = line.id "
        "JOIN sourcefile ON line.sourcefile = sourcefile.id WHERE sourcefile.filename = ? "
        "GROUP BY mutant.status"
    )
    with sqlite3.connect(CACHE) as connection:
        return dict(connection.execute(query, (module,)).fetchall())


def survivors() -> list[Survivor]:
    """Every surviving mutant of the fresh cache, with its diff (mutmut's own `show`)."""
    listed = subprocess.run(
        [sys.executable, "-m", "mutmut", "result-ids", "survived"],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )
    found = []
    for mutant_id in listed.stdout.split():
        shown = subprocess.run(
            [sys.executable, "-m", "mutmut", "show", mutant_id],
            cwd=ROOT, capture_output=True, text=True, check=False,
        )
        found.append(Survivor.from_diff(mutant_id, shown.stdout))
    return found


def equivalent_mutants(module: str) -> set[tuple[str, str]]:
    """(source line, mutated line) pairs that docs/mutation.md lists as equivalent for `module`.

    The list is a `## module` section of items "- `source line` → `mutated line`: reason";
    a mutant that deletes its line is written `(deleted)`.
    """
    pairs: set[tuple[str, str]] = set()
    section = ""
    for line in EQUIVALENTS.read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            section = line[3:].strip().strip("`")
            continue
        match = EQUIVALENT_ITEM.match(line)
        if match and section == module:
            pairs.add((match["source"], match["mutant"]))
    return pairs


def print_table(results: list[ModuleResult]) -> None:
    print("| module | mutants | killed | survived | of which equivalent | kill rate | run time |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for result in results:
        print(
            f"| `{result.module}` | {result.generated} | {result.killed} | {result.survived} "
            f"| {result.equivalent} | {result.kill_rate:.1%} | {result.run_time_s:.0f} s |"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("modules", nargs="*", help="modules to mutate (default: all)")
    parser.add_argument("--tests", metavar="MODULE", help="run the tests of MODULE and exit")
    parser.add_argument("--incremental", action="store_true",
                        help="keep the last run's results; re-test only surviving mutants")
    arguments = parser.parse_args()
    if arguments.tests:
        return run_tests(arguments.tests)
    modules = arguments.modules or list(MODULE_TESTS)
    unknown = [module for module in modules if module not in MODULE_TESTS]
    if unknown:
        parser.error(f"not a mutated module: {', '.join(unknown)}; one of {list(MODULE_TESTS)}")
    results = []
    for module in modules:
        results.append(mutate(module, arguments.incremental))
    print()
    print_table(results)
    below = [result.module for result in results if result.kill_rate < KILL_RATE_MIN]
    if below:
        print(f"kill rate under {KILL_RATE_MIN:.0%}: {', '.join(below)}", file=sys.stderr)
    # No mutant at all means the run did not happen (mutmut stops when the module's tests fail
    # unmutated, a test named in MODULE_TESTS that no longer exists, say): never a pass.
    empty = [result.module for result in results if result.generated == 0]
    if empty:
        print(f"no mutants were tested (do the module's tests pass unmutated?): "
              f"{', '.join(empty)}", file=sys.stderr)
    return 1 if below or empty else 0


if __name__ == "__main__":
    sys.exit(main())
