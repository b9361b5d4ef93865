"""Clients generated from openapi/openapi.json, as docs/clients.md generates them, work against a
live broker: Python with openapi-python-client (the test extra installs it), TypeScript with
openapi-typescript and openapi-fetch (pinned in tests/clients/ts/package-lock.json; `make
clients`, which `make test` runs, installs them with `npm ci`). Each runs its small program
(tests/clients/python/program.py, tests/clients/ts/program.ts, after `tsc --noEmit`): a JSON
produce, a raw one with properties, a batch, a consume, a commit, the lag and a key lookup, and
both print what the broker holds."""

from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.support.brokers import ROOT, Launcher

pytestmark = [pytest.mark.processes, pytest.mark.slow]

SPEC = ROOT / "openapi" / "openapi.json"
CONFIG = ROOT / "openapi" / "python-client.yaml"
CLIENTS = ROOT / "tests" / "clients"
GENERATOR = Path(sys.executable).parent / "openapi-python-client"
PACKAGE = "twinlog_client"
NODE = shutil.which("node")
NODE_MODULES = CLIENTS / "ts" / "node_modules"
TOKEN = "client-token"
AUTH_TOKENS = json.dumps({TOKEN: ["produce", "consume", "admin"]})
GENERATE_TIMEOUT_S = 120


def _run(command: list[str], cwd: Path, environment: dict[str, str] | None = None) -> str:
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True,
                            env=environment, timeout=GENERATE_TIMEOUT_S)
    assert result.returncode == 0, f"{command}:\n{result.stdout}{result.stderr}"
    return result.stdout


@pytest.fixture(scope="module")
def python_client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The generated package (docs/clients.md's command), in a temp dir."""
    assert GENERATOR.exists(), "install the test extra: pip install -e '.[test]'"
    output = tmp_path_factory.mktemp("python-client") / PACKAGE
    # The generator formats its output with ruff, found on PATH.
    environment = {**os.environ, "PATH": f"{GENERATOR.parent}{os.pathsep}{os.environ['PATH']}"}
    _run([str(GENERATOR), "generate", "--path", str(SPEC), "--config", str(CONFIG),
          "--output-path", str(output), "--meta", "none"], ROOT, environment)
    yield output
    shutil.rmtree(output.parent, ignore_errors=True)


@pytest.fixture(scope="module")
def ts_client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """program.ts beside the types generated from the spec, type-checked and built."""
    assert NODE is not None, "node is not installed"
    assert NODE_MODULES.is_dir(), "the npm packages are not installed: run `make clients`"
    work = tmp_path_factory.mktemp("ts-client")
    for name in ("program.ts", "tsconfig.json", "package.json"):
        shutil.copy(CLIENTS / "ts" / name, work / name)
    (work / "node_modules").symlink_to(NODE_MODULES)
    bin_dir = work / "node_modules" / ".bin"
    _run([NODE, str(bin_dir / "openapi-typescript"), str(SPEC), "-o", "schema.d.ts"], work)
    _run([NODE, str(bin_dir / "tsc"), "--noEmit", "-p", "."], work)
    _run([NODE, str(bin_dir / "tsc"), "-p", "."], work)
    yield work / "out" / "program.js"
    shutil.rmtree(work, ignore_errors=True)


def _check_program_output(printed: dict[str, Any], topic: str, master: Any) -> None:
    """What each program prints is what the broker holds: four puts on queue 0, bodies as
    sent (the base64 one decoded by utf8 reads, the raw one with bytes that are not UTF-8
    still base64), the raw one's properties, the commit at 2 leaving a lag of 2, and the
    key lookup's message."""
    assert printed["puts"] == ["PUT_OK"] * 4
    assert printed["offsets"] == [0, 1, 2, 3]
    assert printed["messages"] == [
        {"body": "order 1 paid", "body_encoding": "utf8", "keys": ["order-1"],
         "properties": {}},
        {"body": "/wByYXc=", "body_encoding": "base64", "keys": ["order-2"],
         "properties": {"region": "eu"}},
        {"body": "order 3 paid", "body_encoding": "utf8", "keys": ["order-3"],
         "properties": {}},
        {"body": "order 4 paid", "body_encoding": "utf8", "keys": [], "properties": {}}]
    assert printed["committed"] == 2 and printed["lag"] == 2
    assert printed["found"] == ["order 3 paid"]
    stored = master.client.get(f"{master.url}/v1/messages/{printed['msg_id']}",
                               params={"body_encoding": "utf8"},
                               headers={"Authorization": f"Bearer {TOKEN}"})
    assert stored.json()["body"] == "order 1 paid" and stored.json()["topic"] == topic


def test_generated_python_client_program(python_client: Path, launch: Launcher) -> None:
    """The Python program on the generated client: it passes "base64" and "utf8" as plain
    strings and sets properties on a raw produce through the X-Twinlog-Properties header."""
    master = launch("python-client", "ASYNC_MASTER", auth_tokens=AUTH_TOKENS)
    environment = {**os.environ, "PYTHONPATH": str(python_client.parent)}
    printed = _run([sys.executable, str(CLIENTS / "python" / "program.py"), master.url, TOKEN,
                    "PyClient"], ROOT, environment)
    _check_program_output(json.loads(printed), "PyClient", master)


def test_generated_typescript_client_program(ts_client: Path, launch: Launcher) -> None:
    """The TypeScript program on openapi-fetch with openapi-typescript's types: `tsc --noEmit`
    is clean with the generators' defaults (a request field with a default is optional), and
    the program does what the Python one does."""
    assert NODE is not None
    master = launch("ts-client", "ASYNC_MASTER", auth_tokens=AUTH_TOKENS)
    printed = _run([NODE, str(ts_client), master.url, TOKEN, "TsClient"], ts_client.parent)
    _check_program_output(json.loads(printed), "TsClient", master)


def test_generated_python_client_types(python_client: Path) -> None:
    """One body-encoding type (a Literal), not one enum per place, and the raw produce takes
    the properties header."""
    models = sorted(path.stem for path in (python_client / "models").glob("*.py"))
    assert [name for name in models if "encoding" in name] == ["body_encoding"]
    produce = (python_client / "api" / "produce" / "produce_message.py").read_text()
    assert "x_twinlog_properties: str | Unset = UNSET" in produce


@pytest.fixture
def generated(python_client: Path) -> Iterator[ModuleType]:
    sys.path.insert(0, str(python_client.parent))
    try:
        yield importlib.import_module(PACKAGE)
    finally:
        sys.path.remove(str(python_client.parent))
        for name in [name for name in sys.modules if name.startswith(PACKAGE)]:
            del sys.modules[name]


def _module(name: str) -> Any:
    return importlib.import_module(f"{PACKAGE}.{name}")


def test_generated_client_problems_and_the_diff(generated: ModuleType, launch: Launcher) -> None:
    """A bad base64 body comes back as a typed 400 Problem, /admin/diff as a typed DiffView,
    a wrong token as 401."""
    master = launch("client-master", "ASYNC_MASTER", auth_tokens=AUTH_TOKENS)
    client = generated.AuthenticatedClient(base_url=master.url, token=TOKEN)
    produce = _module("api.produce.produce_message")
    models = _module("models")
    put = produce.sync_detailed("Generated", client=client,
                                body=models.ProduceMessage(body="from a generated client"))
    assert put.status_code == 201 and put.parsed.status == "PUT_OK"
    bad = produce.sync_detailed("Generated", client=client, body=models.ProduceMessage(
        body="***", body_encoding="base64"))
    assert bad.status_code == 400
    assert bad.parsed.error_code == "INVALID_BASE64"
    diff = _module("api.admin.admin_diff").sync(client=client)
    assert diff.role == "ASYNC_MASTER"
    assert diff.master.master_max_offset == put.parsed.commit_log_offset + put.parsed.wrote_bytes
    anonymous = generated.AuthenticatedClient(base_url=master.url, token="wrong")
    assert _module("api.admin.admin_diff").sync_detailed(client=anonymous).status_code == 401
