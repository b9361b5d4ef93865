"""The `twinlog` command: serve refuses bad settings before starting; store-info still works."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.cli.main import _serve_overrides, build_parser, main
from store import Message, MessageStore
from store.snapshot import ExportRequest, export_snapshot
from tests.support.ports import refused_port
from tests.support.store import small_config

ROOT = Path(__file__).resolve().parents[3]


def test_serve_refuses_bad_settings(capsys: pytest.CaptureFixture[str]) -> None:
    """A slave without its master's addresses exits 2, naming the missing setting."""
    with refused_port() as port:
        assert main(["serve", "--role", "SLAVE", "--ha-master-address",
                     f"127.0.0.1:{port}"]) == 2
    assert "master_http_address" in capsys.readouterr().err
    assert main(["serve", "--set", "no_such_setting=1"]) == 2
    assert "no_such_setting" in capsys.readouterr().err


def test_serve_refuses_an_open_ha_link_unless_asked(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A master without ha_secret does not start (exit 2, naming ha_secret and the opt-out);
    no data dir is created."""
    monkeypatch.delenv("TWINLOG_HA_SECRET", raising=False)
    data_dir = tmp_path / "data"
    assert main(["serve", "--role", "SYNC_MASTER", "--data-dir", str(data_dir)]) == 2
    error = capsys.readouterr().err
    assert "ha_secret" in error and "ha_allow_unauthenticated" in error
    assert not data_dir.exists()


def test_store_info_prints_offsets(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """store-info recovers a stopped data dir and prints its offsets per queue."""
    store = MessageStore(small_config(tmp_path, mapped_file_size_bytes=8 << 20))
    store.start()
    store.put_message(Message("Info", b"x", queue_id=1))
    store.shutdown()
    assert main(["store-info", "--data-dir", str(tmp_path),
                 "--mapped-file-size-bytes", str(store.config.mapped_file_size_bytes)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["topics"]["Info"]["1"] == [0, 1]


def test_serve_tls_flags_are_the_tls_settings(capsys: pytest.CaptureFixture[str]) -> None:
    """`--tls-cert` without `--tls-key` is refused naming tls_key; the flags map to the
    settings of the same names."""
    assert main(["serve", "--tls-cert", "server.crt"]) == 2
    assert "tls_key" in capsys.readouterr().err
    arguments = build_parser().parse_args(["serve", "--tls-cert", "a.crt", "--tls-key", "a.key"])
    assert _serve_overrides(arguments) == {"tls_cert": "a.crt", "tls_key": "a.key"}


def _report_without(tmp_path: Path, preamble: str,
                    env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`twinlog report` over a real snapshot, in a child whose `preamble` takes a dependency
    away first."""
    store = MessageStore(small_config(tmp_path / "data"))
    store.start()
    store.put_message(Message("Report", b"x"))
    store.shutdown()
    export_snapshot(ExportRequest(tmp_path / "data", tmp_path / "snapshots"))
    script = (f"import sys\n{preamble}\nfrom app.cli.main import main\n"
              "raise SystemExit(main(sys.argv[1:]))\n")
    return subprocess.run([sys.executable, "-c", script, "report", str(tmp_path / "snapshots"),
                           "--out", str(tmp_path / "report")], cwd=ROOT,
                          env={**env, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
                          timeout=120)


@pytest.mark.processes  # a twinlog child
def test_report_without_pyspark_names_the_spark_extra(tmp_path: Path) -> None:
    """After `make run` (no test extra) `twinlog report` died with a raw ModuleNotFoundError;
    with pyspark hidden it now exits 2 with one line naming the `spark` extra."""
    done = _report_without(tmp_path, "sys.modules['pyspark'] = None", dict(os.environ))
    assert done.returncode == 2, done.stderr
    assert done.stdout == "" and len(done.stderr.splitlines()) == 1, done.stderr
    assert "pip install 'twinlog[spark]'" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.processes  # a twinlog child
def test_report_without_java_says_so(tmp_path: Path) -> None:
    """With pyspark but no Java (no JAVA_HOME, no java on PATH): one line, exit 2, before a
    JVM fails to start."""
    env = {key: value for key, value in os.environ.items() if key != "JAVA_HOME"}
    env["PATH"] = str(tmp_path / "no-java-here")
    done = _report_without(tmp_path, "", env)
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.splitlines()) == 1 and "JAVA_HOME" in done.stderr, done.stderr
