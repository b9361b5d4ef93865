"""`twinlog dev`'s supervisor: it stops its brokers all at once, keeps the others running
when one dies, says which and how, and restarts it on `restart NAME`."""

from __future__ import annotations

import queue
import threading
from typing import Any

import pytest

from app.cli.supervisor import _run, supervise
from tests.support.processes import wait_for


class FakeProcess:
    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        return self.returncode


class FakeChild:
    """A child whose process ends when the test says; records the supervisor's calls."""

    def __init__(self, name: str, calls: list[str], pid: int, *, ended: bool = False) -> None:
        self.name = name
        self._calls = calls
        self.process = FakeProcess(pid)
        self.exit_reported = False
        if ended:
            self.process.returncode = 0

    @property
    def is_running(self) -> bool:
        return self.process.returncode is None

    def terminate(self) -> None:
        self._calls.append(f"terminate {self.name}")

    def stop(self) -> int:
        self._calls.append(f"stop {self.name}")
        return 0

    def restart(self) -> None:
        self._calls.append(f"restart {self.name}")
        self.process = FakeProcess(self.process.pid + 100)
        self.exit_reported = False


def test_every_child_is_signalled_before_any_is_waited_for() -> None:
    """All children get their SIGTERM before the supervisor waits for the first: stopped one
    after another, a DLedger member still running waited on a metadata request to one already
    gone, and Ctrl-C of `twinlog dev --dledger` took 10.5 s instead of about 2. (The three
    have ended, so the supervisor stops at once.)"""
    calls: list[str] = []

    def start(environment: dict[str, str], children: list[Any],
              stop: threading.Event) -> str:
        children.extend(FakeChild(name, calls, number, ended=True)
                        for number, name in enumerate(("n0", "n1", "n2")))
        return "banner"

    assert supervise(start, {}, "the group") == 0
    assert calls[:3] == ["terminate n0", "terminate n1", "terminate n2"], calls
    assert calls[3:] == ["stop n0", "stop n1", "stop n2"], calls


def test_a_member_that_dies_leaves_the_others_running_until_restarted(
        capsys: pytest.CaptureFixture[str]) -> None:
    """`kill -9` of one member of three (the first thing to try with a Raft group) stopped all
    three. Now the supervisor says which member ended and how, touches no other, restarts
    it on `restart n1` (a running one is left alone), lists them on `status`, answers
    anything else with the commands, and stops only when told."""
    calls: list[str] = []
    children = [FakeChild(f"n{number}", calls, 100 + number) for number in range(3)]
    commands: queue.Queue[str] = queue.Queue()
    stop = threading.Event()
    printed: list[str] = []

    def said(text: str) -> bool:
        printed.append(capsys.readouterr().out)
        return text in "".join(printed)

    loop = threading.Thread(target=_run, args=(children, commands, stop, None))
    loop.start()
    try:
        children[1].process.returncode = -9
        wait_for(lambda: said("twinlog dev: n1 was killed by SIGKILL; the others keep "
                              "running"), what="the death said")
        assert calls == []  # no other child was stopped
        for line in ("restart n0", "restart n1", "status", "hello"):
            commands.put(line)
        wait_for(lambda: said("commands: `restart NAME`"), what="the help")
    finally:
        stop.set()
        loop.join(10)
    assert not loop.is_alive()
    assert calls == ["restart n1"], calls
    output = "".join(printed)
    assert "n0 is running (pid 100)" in output and "n1 started again (pid 201)" in output
    assert "n1 pid 201 running" in output and "n2 pid 102 running" in output
