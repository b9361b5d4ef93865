"""A Python client generated from openapi/openapi.json (openapi-python-client) works against a
live broker: it produces (JSON and raw bodies) and reads /admin/diff."""

from __future__ import annotations

import importlib
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

pytestmark = pytest.mark.processes

GENERATOR = Path(sys.executable).parent / "openapi-python-client"
PACKAGE = "twinlog_generated_client"


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModuleType]:
    """Generate the client package into a temp dir and import it."""
    assert GENERATOR.exists(), "install the test dependency: pip install openapi-python-client"
    output = tmp_path_factory.mktemp("client") / PACKAGE
    environment = {**os.environ, "PATH": f"{GENERATOR.parent}{os.pathsep}{os.environ['PATH']}"}
    result = subprocess.run(
        [str(GENERATOR), "generate", "--path", str(ROOT / "openapi" / "openapi.json"),
         "--output-path", str(output), "--meta", "none"],
        capture_output=True, text=True, env=environment, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    sys.path.insert(0, str(output.parent))
    try:
        yield importlib.import_module(PACKAGE)
    finally:
        sys.path.remove(str(output.parent))
        for name in [name for name in sys.modules if name.startswith(PACKAGE)]:
            del sys.modules[name]
        shutil.rmtree(output, ignore_errors=True)


def _module(name: str) -> Any:
    return importlib.import_module(f"{PACKAGE}.{name}")


def test_generated_client_produces_and_reads_the_diff(generated: ModuleType,
                                                      launch: Launcher) -> None:
    """With a token, the generated client stores a JSON and a raw message (201, PutResult),
    gets a 400 Problem back for a bad one, and reads /admin/diff as a typed DiffView."""
    master = launch("client-master", "ASYNC_MASTER", environment={
        "TWINLOG_AUTH_TOKENS": '{"gen-token": ["produce", "admin"]}'})
    client = generated.AuthenticatedClient(base_url=master.url, token="gen-token")
    produce = _module("api.produce.produce_message")
    models = _module("models")
    types = _module("types")
    json_answer = produce.sync_detailed(
        "Generated", client=client,
        body=models.ProduceMessage(body="from a generated client", keys=["g1"]))
    assert json_answer.status_code == 201
    assert json_answer.parsed.status.value == "PUT_OK" and json_answer.parsed.msg_id
    raw_answer = produce.sync_detailed(
        "Generated", client=client, body=types.File(payload=b"\x00raw"), x_twinlog_tags="raw")
    assert raw_answer.status_code == 201
    bad = produce.sync_detailed("Generated", client=client, body=models.ProduceMessage(
        body="***", body_encoding=models.ProduceMessageBodyEncoding.BASE64))
    assert bad.status_code == 400
    assert bad.parsed.error_code == "INVALID_BASE64"
    diff = _module("api.admin.admin_diff").sync(client=client)
    assert diff.role == "ASYNC_MASTER"
    assert diff.master.master_max_offset == raw_answer.parsed.commit_log_offset + \
        raw_answer.parsed.wrote_bytes
    anonymous = generated.AuthenticatedClient(base_url=master.url, token="wrong")
    assert _module("api.admin.admin_diff").sync_detailed(client=anonymous).status_code == 401
