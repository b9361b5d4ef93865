"""The built distribution works on its own: a wheel built from the checkout, installed into a
fresh virtual environment outside it, serves, takes a produce and answers a consume.

The wheel is built without network access (`--no-build-isolation`, with the setuptools of the
test environment) from a copy of the sources, so the checkout gets no build/ directory. The
fresh environment gets the wheel without dependencies and reaches the already installed ones
through a .pth line after its own site-packages: the broker's code, its migrations and its
metadata all come from the wheel (checked), and nothing runs from the checkout.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from tests.support.brokers import FAST_SETTINGS, ROOT, BrokerProcess, wait_for

pytestmark = [pytest.mark.processes, pytest.mark.slow]

_NOT_SOURCES = shutil.ignore_patterns(
    ".git", ".venv", "data", "build", "dist", "*.egg-info", "__pycache__", ".*_cache",
    ".mutmut-cache", "*.bak")


def _run(*command: str | Path, cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run([str(part) for part in command], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, f"{command} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel built from a copy of the checkout, once for the module's tests (each only
    reads it: one looks inside, the other installs it into a venv of its own)."""
    tmp_path = tmp_path_factory.mktemp("wheel")
    sources = tmp_path / "sources"
    shutil.copytree(ROOT, sources, ignore=_NOT_SOURCES)
    dist = tmp_path / "dist"
    _run(sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
         "--wheel-dir", dist, sources, cwd=tmp_path)
    (built,) = dist.glob("twinlog-*.whl")
    return built


def _fresh_environment(tmp_path: Path, wheel: Path) -> Path:
    venv = tmp_path / "venv"
    _run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=tmp_path)
    python = venv / "bin" / "python"
    _run(sys.executable, "-m", "pip", "--python", python, "install", "--quiet", "--no-deps",
         wheel, cwd=tmp_path)
    site_packages = Path(_run(python, "-c", "import sysconfig; print(sysconfig.get_path("
                                            "'purelib'))", cwd=tmp_path).strip())
    # Dependencies only: after the venv's own site-packages, so the wheel's packages win.
    (site_packages / "zz_dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    return venv


def _clean_environment() -> dict[str, str]:
    return {key: value for key, value in os.environ.items()
            if not key.startswith("TWINLOG_") and key != "PYTHONPATH"}


def test_wheel_ships_the_migrations_and_the_license(wheel: Path) -> None:
    """The wheel holds every package, the Alembic migrations, the license and the assets of
    /docs and /redoc."""
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"app/api/static/swagger-ui/swagger-ui-bundle.js",
            "app/api/static/swagger-ui/swagger-ui.css",
            "app/api/static/redoc/redoc.standalone.js"} <= names
    assert "store/metadata/migrations/env.py" in names
    assert "store/metadata/migrations/script.py.mako" in names
    assert any(name.startswith("store/metadata/migrations/versions/") for name in names)
    assert any(".dist-info/" in name and name.endswith("LICENSE") for name in names), names


def test_installed_wheel_serves_produces_and_consumes(wheel: Path, tmp_path: Path) -> None:
    """`twinlog serve` from a fresh venv outside the checkout migrates its metadata, takes a
    produce (201), returns the message on a consume and serves /docs with its assets;
    `twinlog --version` reads the package metadata."""
    venv = _fresh_environment(tmp_path, wheel)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    env = _clean_environment()
    where = json.loads(_run(
        venv / "bin" / "python", "-c",
        "import json, app, store.metadata.migrate as m; "
        "print(json.dumps([app.__file__, str(m.migrations_directory())]))",
        cwd=outside, env=env))
    for path in where:
        assert Path(path).is_relative_to(venv), f"{path} is not from the installed wheel"
    version = _run(venv / "bin" / "twinlog", "--version", cwd=outside, env=env).strip()
    assert version == "twinlog 0.1.0", version

    arguments = ["--role", "ASYNC_MASTER", "--data-dir", str(tmp_path / "data")]
    for key, value in FAST_SETTINGS.items():
        arguments += ["--set", f"{key}={value}"]
    broker = BrokerProcess("wheel", "ASYNC_MASTER", tmp_path / "data", arguments, env,
                           tmp_path / "wheel.log", entry_point=[],
                           executable=str(venv / "bin" / "twinlog"), cwd=outside)
    try:
        broker.start()
        created = broker.client.post("/v1/topics/Wheel/messages", content=b"from a wheel",
                                     headers={"Content-Type": "application/octet-stream"})
        assert created.status_code == 201, created.text
        queue_id = created.json()["queue_id"]

        def read() -> list[dict[str, object]]:
            response = broker.client.get(f"/v1/topics/Wheel/queues/{queue_id}/messages",
                                         params={"offset": 0})
            assert response.status_code == 200, response.text
            messages: list[dict[str, object]] = response.json()["messages"]
            return messages

        wait_for(lambda: len(read()) == 1, what="the produced message readable")
        assert read()[0]["queue_offset"] == 0
        for asset in ("/docs", "/static/swagger-ui/swagger-ui-bundle.js",
                      "/static/redoc/redoc.standalone.js"):
            assert broker.client.get(asset).status_code == 200, asset
    finally:
        broker.stop()
        broker.client.close()
