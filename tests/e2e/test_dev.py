"""`twinlog dev`: one command runs a SYNC_MASTER and its SLAVE (or, with --dledger, a DLedger
group of three); Ctrl-C stops them all cleanly."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.support.brokers import ROOT, wait_for

pytestmark = pytest.mark.processes


def _banner_ports(banner: str) -> tuple[int, int, int]:
    """(master HTTP, master HA, slave HTTP) ports as the banner names them."""
    master = re.search(r"master \(SYNC_MASTER\) http://127\.0\.0\.1:(\d+)\s+HA 127\.0\.0\.1:(\d+)",
                       banner)
    slave = re.search(r"slave  \(SLAVE\)\s+http://127\.0\.0\.1:(\d+)", banner)
    assert master is not None and slave is not None, banner
    return int(master[1]), int(master[2]), int(slave[1])


def _start_dev(tmp_path: Path, *options: str) -> tuple[subprocess.Popen[bytes], Path]:
    """`twinlog dev` with `options`, its output in dev.log; TWINLOG_* of this process left
    out (but a token set: dev runs open anyway)."""
    log_path = tmp_path / "dev.log"
    environment = {key: value for key, value in os.environ.items()
                   if not key.startswith("TWINLOG_")}
    environment["TWINLOG_AUTH_TOKENS"] = '{"ignored": ["admin"]}'
    # Log files are allocated for real (posix_fallocate): 8 MiB files keep this test from
    # taking 2 GiB of the disk per run with the 1 GiB default.
    environment["TWINLOG_MAPPED_FILE_SIZE_BYTES"] = str(8 << 20)
    with log_path.open("wb") as log:
        dev = subprocess.Popen(
            [sys.executable, "-m", "app.cli.main", "dev", "--data-root", str(tmp_path / "data"),
             *options], cwd=ROOT, env={**environment, "PYTHONPATH": str(ROOT)}, stdout=log,
            stderr=subprocess.STDOUT)
    return dev, log_path


def _stop_after_failure(dev: subprocess.Popen[bytes]) -> None:
    """A failed assertion left dev running: let it stop its children first."""
    if dev.poll() is None:
        dev.send_signal(signal.SIGTERM)
        try:
            dev.wait(60)
        except subprocess.TimeoutExpired:
            dev.kill()
            dev.wait()


def test_dev_runs_a_pair_and_ctrl_c_stops_both(tmp_path: Path) -> None:
    """The banner names both URLs and says auth is open; a message produced on the master is
    read on the slave; SIGINT stops both brokers with exit 0 and no abort marker. Every port
    is given as 0: the brokers bind what the kernel picks and the banner names it."""
    dev, log_path = _start_dev(tmp_path, "--master-http-port", "0", "--slave-http-port", "0",
                               "--ha-port", "0")
    try:
        wait_for(lambda: "Ctrl-C stops both" in log_path.read_text(errors="replace"),
                 timeout_s=60, what="dev banner")
        banner = log_path.read_text()
        assert "auth is OPEN" in banner
        master_port, ha_port, slave_port = _banner_ports(banner)
        assert 0 not in (master_port, ha_port, slave_port)
        ports = [master_port, slave_port]
        with httpx.Client(timeout=5) as client:
            stored = client.post(f"http://127.0.0.1:{ports[0]}/v1/topics/Dev/messages",
                                 json={"body": "hi", "queue_id": 0})
            assert stored.status_code == 201, stored.text

            def on_slave() -> bool:
                response = client.get(f"http://127.0.0.1:{ports[1]}/v1/topics/Dev/queues/0/"
                                      "messages", params={"body_encoding": "utf8"})
                return response.status_code == 200 and [
                    m["body"] for m in response.json()["messages"]] == ["hi"]

            wait_for(on_slave, what="message on the slave")
        dev.send_signal(signal.SIGINT)
        assert dev.wait(60) == 0, log_path.read_text()
    finally:
        _stop_after_failure(dev)
    for name in ("master", "slave"):
        assert (tmp_path / "data" / name / "commitlog").is_dir()
        assert not (tmp_path / "data" / name / "abort").exists(), name
    assert "master exited with 0" in log_path.read_text()


def test_dev_dledger_runs_a_group_of_three_and_ctrl_c_stops_all(tmp_path: Path) -> None:
    """`twinlog dev --dledger` starts three members on kernel-picked ports; the banner names
    the leader; a message produced there is read on every follower; SIGINT stops all three
    with exit 0 and no abort marker."""
    dev, log_path = _start_dev(tmp_path, "--dledger", "--dledger-http-port", "0",
                               "--dledger-port", "0")
    try:
        wait_for(lambda: "Ctrl-C stops all three" in log_path.read_text(errors="replace"),
                 timeout_s=90, what="dev --dledger banner")
        banner = log_path.read_text()
        assert "auth is OPEN" in banner
        members = re.findall(r"(n\d) (LEADER  |follower) http://127\.0\.0\.1:(\d+)", banner)
        assert sorted(node_id for node_id, _, _ in members) == ["n0", "n1", "n2"], banner
        leader = [int(port) for _, role, port in members if role.startswith("LEADER")]
        followers = [int(port) for _, role, port in members if role == "follower"]
        assert len(leader) == 1 and len(followers) == 2 and 0 not in leader + followers
        with httpx.Client(timeout=5) as client:
            stored = client.post(f"http://127.0.0.1:{leader[0]}/v1/topics/Dev/messages",
                                 json={"body": "hi", "queue_id": 0})
            assert stored.status_code == 201, stored.text
            for port in followers:
                def on_follower(port: int = port) -> bool:
                    response = client.get(f"http://127.0.0.1:{port}/v1/topics/Dev/queues/0/"
                                          "messages", params={"body_encoding": "utf8"})
                    return response.status_code == 200 and [
                        m["body"] for m in response.json()["messages"]] == ["hi"]

                wait_for(on_follower, what=f"message on the follower at {port}")
        dev.send_signal(signal.SIGINT)
        assert dev.wait(60) == 0, log_path.read_text()
    finally:
        _stop_after_failure(dev)
    output = log_path.read_text()
    for name in ("n0", "n1", "n2"):
        assert (tmp_path / "data" / name / "commitlog").is_dir()
        assert not (tmp_path / "data" / name / "abort").exists(), name
        assert f"{name} exited with 0" in output
