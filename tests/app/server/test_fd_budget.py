"""The HTTP connection cap is what the descriptor limit leaves after the store's reserve."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.server.fd_budget import STORE_FIXED_FDS, FdBudgetError, fd_budget, store_reserve
from tests.support.app import app_settings


def test_reserve_counts_queue_files_ha_sockets_and_fixed(tmp_path: Path) -> None:
    """The reserve is 2 per mapped queue file, the HA sockets and the fixed part: 664 with
    the defaults."""
    settings = app_settings(tmp_path)
    assert store_reserve(settings) == 2 * 256 + 16 + 8 + STORE_FIXED_FDS == 664


def test_cap_is_the_setting_or_what_the_limit_leaves(tmp_path: Path) -> None:
    """Under a 20000 limit the cap is http_connections_max; under 1024 it is 1024 - 664."""
    settings = app_settings(tmp_path)
    assert fd_budget(settings, 20_000).connections_max == settings.http_connections_max
    small = fd_budget(settings, 1024)
    assert small.connections_max == 360
    assert "RLIMIT_NOFILE 1024 - store reserve 664" in small.describe()


def test_too_small_a_limit_is_refused_naming_the_arithmetic(tmp_path: Path) -> None:
    """A limit that leaves fewer than 16 connections refuses to start, saying why."""
    with pytest.raises(FdBudgetError, match="RLIMIT_NOFILE 670 - store reserve 664 leaves 6"):
        fd_budget(app_settings(tmp_path), 670)
