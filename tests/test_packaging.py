"""The distribution's package list (pyproject.toml) names every package of the checkout."""

from __future__ import annotations

import tomllib
from pathlib import Path

from setuptools import find_packages

ROOT = Path(__file__).resolve().parents[1]


def test_every_package_is_listed_for_the_distribution() -> None:
    """A package added to app/, store/, ha/ or jobs/ without being listed in pyproject.toml
    would be missing from the wheel: this fails first."""
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
                 ["packages"])
    found = set(find_packages(str(ROOT), include=["app*", "store*", "ha*", "jobs*"]))
    assert found - listed == set(), "packages missing from [tool.setuptools] packages"
    shipped_migrations = {"store.metadata.migrations", "store.metadata.migrations.versions"}
    assert listed - found == shipped_migrations
