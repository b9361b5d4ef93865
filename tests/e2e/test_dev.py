"""`twinlog dev`: one command runs a SYNC_MASTER and its SLAVE (or, with --dledger, a DLedger
group of three); Ctrl-C stops them all cleanly."""

from __future__ import annotations

import os
import re
import signal
import socket
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


def _start_dev(tmp_path: Path, *options: str, file_size_bytes: int | None = 8 << 20,
               stdin: int | None = None) -> tuple[subprocess.Popen[bytes], Path]:
    """`twinlog dev` with `options`, its output in dev.log; TWINLOG_* of this process left
    out (but a token set: dev runs open anyway). Log files are allocated for real
    (posix_fallocate): 8 MiB files (TWINLOG_MAPPED_FILE_SIZE_BYTES) keep the test small;
    `file_size_bytes=None` runs with dev's own default."""
    log_path = tmp_path / "dev.log"
    environment = {key: value for key, value in os.environ.items()
                   if not key.startswith("TWINLOG_")}
    environment["TWINLOG_AUTH_TOKENS"] = '{"ignored": ["admin"]}'
    if file_size_bytes is not None:
        environment["TWINLOG_MAPPED_FILE_SIZE_BYTES"] = str(file_size_bytes)
    with log_path.open("wb") as log:
        dev = subprocess.Popen(
            [sys.executable, "-m", "app.cli.main", "dev", "--data-root", str(tmp_path / "data"),
             *options], cwd=ROOT, env={**environment, "PYTHONPATH": str(ROOT)}, stdout=log,
            stderr=subprocess.STDOUT, stdin=stdin)
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
    """The banner names both URLs, says auth is open and what the brokers reserve; a message
    produced on the master is read on the slave; the slave killed, the master goes on, and
    `restart slave` starts it again (on the port the kernel gave it first) and it catches
    up; SIGINT stops both brokers with exit 0 and no abort marker. Every port is given as 0:
    the brokers bind what the kernel picks and the banner names it."""
    dev, log_path = _start_dev(tmp_path, "--master-http-port", "0", "--slave-http-port", "0",
                               "--ha-port", "0", stdin=subprocess.PIPE)
    assert dev.stdin is not None
    try:
        wait_for(lambda: "Ctrl-C stops both" in log_path.read_text(errors="replace"),
                 timeout_s=60, what="dev banner")
        banner = log_path.read_text()
        assert "auth is OPEN" in banner
        assert ("commit-log files of 8 MiB (TWINLOG_MAPPED_FILE_SIZE_BYTES): once it holds a "
                "message, each broker reserves 16 MiB for them") in banner
        assert re.search(r"data dirs on disk now: master \d+ MiB, slave \d+ MiB", banner)
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
            (slave_pid,) = re.findall(r"data \S+/slave\s+pid (\d+)", banner)
            os.kill(int(slave_pid), signal.SIGKILL)
            wait_for(lambda: "slave was killed by SIGKILL" in log_path.read_text(),
                     what="the kill said")
            assert client.post(f"http://127.0.0.1:{ports[0]}/v1/topics/Dev/messages",
                               json={"body": "alone", "queue_id": 0}).status_code in (201, 202)
            dev.stdin.write(b"restart slave\n")
            dev.stdin.flush()

            wait_for(lambda: _bodies(client, ports[1]) == ["hi", "alone"], timeout_s=60,
                     what="the restarted slave caught up")
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


def _bodies(client: httpx.Client, port: int) -> list[str]:
    """Queue 0 of topic Dev on the broker at `port` (empty while it does not answer)."""
    try:
        response = client.get(f"http://127.0.0.1:{port}/v1/topics/Dev/queues/0/messages",
                              params={"body_encoding": "utf8"})
    except httpx.HTTPError:
        return []
    if response.status_code != 200:
        return []
    return [message["body"] for message in response.json()["messages"]]


def _refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except ConnectionRefusedError:
        return True
    return False


def test_dev_dledger_outlives_a_killed_member_and_restarts_it(tmp_path: Path) -> None:
    """kill -9 of the leader (the failover demo) stopped the whole group, and its port kept
    accepting connections nobody answered. Now: the supervisor says the leader was killed by
    SIGKILL and names the next one, the other two keep serving (a put on the new leader is
    201), the dead member's HTTP port refuses connections, `restart NAME` on stdin starts it
    again on the same ports and it catches up; Ctrl-C then stops all three with exit 0. Run
    with dev's own defaults: 64 MiB commit-log files."""
    dev, log_path = _start_dev(tmp_path, "--dledger", "--dledger-http-port", "0",
                               "--dledger-port", "0", file_size_bytes=None,
                               stdin=subprocess.PIPE)
    assert dev.stdin is not None

    def said(text: str) -> bool:
        return text in log_path.read_text(errors="replace")

    try:
        wait_for(lambda: said("Ctrl-C stops all three"), timeout_s=90, what="the banner")
        banner = log_path.read_text()
        assert "commit-log files of 64 MiB (the dev default)" in banner
        members = {node_id: (role.strip(), int(port), int(pid)) for node_id, role, port, pid
                   in re.findall(r"(n\d) (LEADER  |follower) http://127\.0\.0\.1:(\d+)\s+"
                                 r"DLedger \S+\s+data \S+\s+pid (\d+)", banner)}
        (leader_id,) = [node_id for node_id, (role, _, _) in members.items() if role == "LEADER"]
        _, leader_port, leader_pid = members[leader_id]
        os.kill(leader_pid, signal.SIGKILL)
        wait_for(lambda: said(f"twinlog dev: {leader_id} was killed by SIGKILL; the others "
                              "keep running"), what="the kill said")
        assert _refused(leader_port)
        wait_for(lambda: said(" leads now (term "), timeout_s=30, what="the next leader named")
        (next_id,) = re.findall(r"twinlog dev: (n\d) leads now", log_path.read_text())
        next_url = f"http://127.0.0.1:{members[next_id][1]}"
        with httpx.Client(timeout=5) as client:
            def stored() -> bool:
                response = client.post(f"{next_url}/v1/topics/Dev/messages",
                                       json={"body": "after the kill", "queue_id": 0})
                return response.status_code == 201

            wait_for(stored, timeout_s=30, what="a put on the next leader")
            dev.stdin.write(f"restart {leader_id}\n".encode())
            dev.stdin.flush()
            wait_for(lambda: said(f"twinlog dev: {leader_id} started again (pid "),
                     what="the restart said")

            wait_for(lambda: "after the kill" in _bodies(client, leader_port), timeout_s=60,
                     what="the restarted member caught up")
        commit_log = tmp_path / "data" / next_id / "commitlog"
        assert {p.stat().st_size for p in commit_log.iterdir()} == {64 << 20}
        dev.send_signal(signal.SIGINT)
        assert dev.wait(60) == 0, log_path.read_text()[-4000:]
    finally:
        _stop_after_failure(dev)
    output = log_path.read_text()
    for name in ("n0", "n1", "n2"):
        assert f"{name} exited with 0" in output
