"""Suite-wide: the test tiers' markers kept honest, and the order the suite runs in.

Tiers (pyproject.toml registers the markers; docs/testing.md): `jvm` marks a test that starts
a JVM (PySpark), `processes` one that starts child processes (brokers, Python children, a
PostgreSQL server, a wheel build). `make unit` runs every other test; `make test` runs all.
A test that starts a program without either mark fails here, naming it, so the fast tier
stays fast as tests are added.

Order: `make unit` and `make test` run on two xdist workers, file by file (`-n 2 --dist
loadfile --no-loadscope-reorder`): a worker takes the next file, in collection order, when it
is done with one. The Spark files hold the longest tests (a standalone cluster's JVMs take a
minute or more on two cores). They are collected first and run as one unit of work, so one
worker takes all of them, in one process and so on one shared local Spark session
(tests/jobs/conftest.py), while the other goes through the rest; the second worker never
starts a JVM of its own, and neither waits on Spark at the end. The files that hold a `slow`
test come next, so that no long test is left for the end while the other worker idles. The
order within a file is kept.
"""

from __future__ import annotations

import compileall
import gc
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

_FIRST = "tests/jobs/"
_ROOT = Path(__file__).resolve().parents[1]
# The packages every child Python (`twinlog serve`, the migration child, job and crash
# children) imports from the checkout.
_COMPILED = ("app", "store", "ha", "jobs", "migrations")

# One-shot system tools some unmarked tests run (a tmpfs mounted for a disk-full test): they
# cost milliseconds and start nothing that lives on, so they need no mark.
_TOOLS = frozenset({"mount", "umount"})
_COSTLY = ("jvm", "processes")
_STARTS = frozenset({"subprocess.Popen", "os.system", "os.posix_spawn", "os.spawn", "os.exec"})

# The node id of the unmarked test now in its setup or call, and what it started.
_unmarked: dict[str, Any] = {"test": None, "started": []}


def _program(event: str, arguments: tuple[Any, ...]) -> str:
    if event == "subprocess.Popen":
        executable, args = arguments[0], arguments[1]
        first = executable or (args if isinstance(args, (str, bytes)) else args[0])
        return Path(os.fsdecode(first).split()[0]).name
    return os.fsdecode(arguments[0]).split()[0] if arguments and arguments[0] else event


def _audit(event: str, arguments: tuple[Any, ...]) -> None:
    if event not in _STARTS or _unmarked["test"] is None:
        return
    program = _program(event, arguments)
    if program in _TOOLS:
        return
    _unmarked["started"].append(program)
    raise RuntimeError(f"{_unmarked['test']} starts {program}: mark it "
                       f"@pytest.mark.processes (or jvm), so `make unit` leaves it out")


sys.addaudithook(_audit)


def pytest_configure(config: pytest.Config) -> None:
    """With PYTHONDONTWRITEBYTECODE set, no bytecode of the checkout is ever cached, and each
    of the suite's hundreds of child Pythons (`twinlog serve`, its migration child, job and
    crash children) compiled every module of it it imports again: about 0.25 s of CPU per
    broker start, on two cores shared by two workers. The first pytest process compiles the
    checkout's packages once (a second or two) into their `__pycache__` directories, which a
    run without the variable would leave there anyway (git ignores them); every process
    then reads that bytecode, checked against each source's size and mtime as usual."""
    if hasattr(config, "workerinput") or not sys.flags.dont_write_bytecode:
        return
    for package in _COMPILED:
        compileall.compile_dir(_ROOT / package, quiet=1, workers=1)


@pytest.hookimpl(wrapper=True)
def pytest_collection(session: pytest.Session) -> Iterator[None]:
    """Pytest caches the test modules it rewrites (their asserts) as bytecode only when it may
    write bytecode: with PYTHONDONTWRITEBYTECODE set, each process of each run rewrote all of
    them again, about 6.5 s of CPU per process (two xdist workers: 13 s a run, a tenth of what
    the rest of `make unit`'s collection and tests cost). While it collects, this process
    writes bytecode, so the next run reads the rewritten modules (pytest checks each against
    its source, and writes each atomically: both workers may write one at once); the modules
    the checkout's packages and tests import during collection are cached as well, as
    `pytest_configure` caches the packages. After collection nothing more is written."""
    was = sys.dont_write_bytecode
    sys.dont_write_bytecode = False
    try:
        return (yield)
    finally:
        sys.dont_write_bytecode = was


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    marked = any(item.get_closest_marker(name) for name in _COSTLY)
    _unmarked.update(test=None if marked else item.nodeid, started=[])


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item) -> Iterator[None]:
    # Teardown is left unchecked: a session fixture (PostgreSQL) is stopped in the teardown of
    # whichever test ran last, marked or not. What setup and call started fails the test once
    # its fixtures are torn down (also when the test caught the error raised at the start).
    started, test = _unmarked["started"], _unmarked["test"]
    _unmarked.update(test=None, started=[])
    yield
    if started:
        pytest.fail(f"{test} started {', '.join(started)} without a jvm or processes mark",
                    pytrace=False)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    # A stable sort on the file alone: each file's tests stay together and in their order.
    items.sort(key=lambda item: (not item.nodeid.startswith(_FIRST),
                                 item.path not in slow_files))


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """Nothing runs after this but the interpreter's exit, whose garbage collection walked
    every object the run left (1.3 s of a run that collected and ran no test; a worker after
    its tests, and the controller waits for both workers to exit). Frozen, the objects are
    left to the exit: what closes on a reference count (open files) still closes, and
    `atexit` handlers run as before."""
    gc.freeze()


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`--dist loadfile`, with every file under tests/jobs/ in one unit of work."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class SparkFilesTogether(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _FIRST if nodeid.startswith(_FIRST) else super()._split_scope(nodeid)

    return SparkFilesTogether(config, log)
