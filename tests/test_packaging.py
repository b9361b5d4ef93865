"""The distribution's package list (pyproject.toml) names every package of the checkout, and
building it says nothing to worry a newcomer."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from setuptools import find_packages

ROOT = Path(__file__).resolve().parents[1]
# Directories of vendored assets (no Python) listed as packages so that builds do not warn.
DATA_PACKAGES = {"app.api.static", "app.api.static.redoc"}


def test_every_package_is_listed_for_the_distribution() -> None:
    """A package added to app/, store/, ha/ or jobs/ without being listed in pyproject.toml
    would be missing from the wheel: this fails first."""
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
                 ["packages"])
    found = set(find_packages(str(ROOT), include=["app*", "store*", "ha*", "jobs*"]))
    assert found - listed == set(), "packages missing from [tool.setuptools] packages"
    shipped_migrations = {"store.metadata.migrations", "store.metadata.migrations.versions"}
    assert listed - found == shipped_migrations | DATA_PACKAGES


@pytest.mark.slow
@pytest.mark.processes  # builds the distribution in a child
def test_building_the_distribution_prints_no_warning(tmp_path: Path) -> None:
    """The first `make run` printed about 100 lines of setuptools warnings: `project.license`
    as a TOML table (deprecated), and the vendored asset directories, importable by name yet
    not listed as packages. A build of the wheel (what `pip install` runs; offline, with the
    test environment's setuptools) now prints none."""
    sources = tmp_path / "sources"
    shutil.copytree(ROOT, sources, ignore=shutil.ignore_patterns(
        ".git", ".venv", "data", "build", "dist", "*.egg-info", "__pycache__", ".*_cache",
        ".mutmut-cache", "test-artifacts"))
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
         "--wheel-dir", str(tmp_path / "dist"), str(sources)],
        cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr
    output = done.stdout + done.stderr
    assert "Warning" not in output and "deprecated" not in output, output
    assert list((tmp_path / "dist").glob("twinlog-*.whl"))
