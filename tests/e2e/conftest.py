"""Real `twinlog serve` processes on loopback, always stopped at the end. Each binds port 0
for HTTP and HA and reports the ports it got (`--port-file`): no port is ever guessed free
and handed on, so another process cannot take it first."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.brokers import Launcher, _launching


@pytest.fixture(scope="module")
def launch(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Launcher]:
    """Start brokers shared by a module's tests (which must not depend on each other's
    order: each uses its own topics); every one still running is stopped at the end."""
    yield from _launching(tmp_path_factory.mktemp("e2e"))


@pytest.fixture
def launch_own(tmp_path: Path) -> Iterator[Launcher]:
    """Start brokers for one test only (one that stops, pauses or restarts them)."""
    yield from _launching(tmp_path)
