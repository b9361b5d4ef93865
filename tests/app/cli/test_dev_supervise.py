"""`twinlog dev`'s supervisor stops its brokers all at once."""

from __future__ import annotations

import threading
from typing import Any

from app.cli.dev import supervise


class FakeChild:
    """A child that has exited (so the supervisor stops at once) and records its calls."""

    def __init__(self, name: str, calls: list[str]) -> None:
        self.name = name
        self._calls = calls
        self.process: Any = type("Exited", (), {"poll": staticmethod(lambda: 0)})()

    def terminate(self) -> None:
        self._calls.append(f"terminate {self.name}")

    def stop(self) -> int:
        self._calls.append(f"stop {self.name}")
        return 0


def test_every_child_is_signalled_before_any_is_waited_for() -> None:
    """All children get their SIGTERM before the supervisor waits for the first: stopped one
    after another, a DLedger member still running waited on a metadata request to one already
    gone, and Ctrl-C of `twinlog dev --dledger` took 10.5 s instead of about 2."""
    calls: list[str] = []

    def start(environment: dict[str, str], children: list[Any],
              stop: threading.Event) -> str:
        children.extend(FakeChild(name, calls) for name in ("n0", "n1", "n2"))
        return "banner"

    assert supervise(start, {}, "the group") == 0
    assert calls[:3] == ["terminate n0", "terminate n1", "terminate n2"], calls
    assert calls[3:] == ["stop n0", "stop n1", "stop n2"], calls
