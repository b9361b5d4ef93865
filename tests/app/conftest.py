from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import pytest

from tests.support.app import Served, ServeFactory, app_settings, serving


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    """Module-scoped, so that a module may share one running broker between its tests."""
    return "asyncio"


@pytest.fixture
def serve(tmp_path: Path) -> ServeFactory:
    """`async with serve(**settings) as served:` a broker in tmp_path/broker."""

    def start(**overrides: Any) -> AbstractAsyncContextManager[Served]:
        return serving(app_settings(overrides.pop("data_dir", tmp_path / "broker"),
                                    **overrides))

    return start
