"""The admin CLI (`twinlog topic|group|ha status|produce|consume`) against real brokers: each
command's table and --json output, and for bad input (unknown topic, wrong token, broker down)
one line on stderr and an exit code that says what failed."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.brokers import ROOT, BrokerProcess, Launcher, wait_for

pytestmark = pytest.mark.processes

TOKEN = "cli-token"


def twinlog(broker_url: str, *arguments: str, token: str | None = TOKEN,
            stdin: bytes = b"") -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("TWINLOG_")}
    env["TWINLOG_URL"] = broker_url
    if token is not None:
        env["TWINLOG_TOKEN"] = token
    done = subprocess.run([sys.executable, "-m", "app.cli.main", *arguments], cwd=ROOT, env=env,
                          input=stdin.decode(), capture_output=True, text=True, timeout=60)
    return done


def ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, f"exit {done.returncode}: {done.stderr}"
    return done.stdout


def one_error_line(done: subprocess.CompletedProcess[str], exit_code: int) -> str:
    assert done.returncode == exit_code, (done.returncode, done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("twinlog: "), done.stderr
    return lines[0]


@pytest.fixture(scope="module")
def pair(launch: Launcher) -> Iterator[tuple[BrokerProcess, BrokerProcess]]:
    tokens = {"TWINLOG_AUTH_TOKENS": json.dumps({TOKEN: ["produce", "consume", "admin"]})}
    master = launch("cli-master", "SYNC_MASTER", environment=tokens)
    slave = launch("cli-slave", "SLAVE", master=master, environment={
        **tokens, "TWINLOG_MASTER_AUTH_TOKEN": TOKEN})
    yield master, slave


def test_topic_create_list_describe(pair: tuple[BrokerProcess, BrokerProcess]) -> None:
    """A created topic shows in the list and its queues in describe; creating it again is
    refused (exit 1) with the broker's reason on one line."""
    url = pair[0].url
    assert "created CliTopics: 2 read / 2 write queues" in ok(
        twinlog(url, "topic", "create", "CliTopics", "--queues", "2"))
    listing = ok(twinlog(url, "topic", "list"))
    assert listing.splitlines()[0].split() == ["TOPIC", "READ_QUEUES", "WRITE_QUEUES", "PERM"]
    assert any(line.split() == ["CliTopics", "2", "2", "rw"] for line in listing.splitlines())
    described = json.loads(ok(twinlog(url, "topic", "describe", "CliTopics", "--json")))
    assert [q["queue_id"] for q in described["queues"]] == [0, 1]
    again = one_error_line(twinlog(url, "topic", "create", "CliTopics"), 1)
    assert "409" in again


def test_produce_then_consume_with_a_group_and_reset(
        pair: tuple[BrokerProcess, BrokerProcess]) -> None:
    """Lines produced from stdin come back from consume in order; consuming with a group
    commits its offsets (lag 0), and a reset to the earliest offsets brings the lag back."""
    url = pair[0].url
    ok(twinlog(url, "topic", "create", "CliFlow", "--queues", "1"))
    lines = [f"line {n}" for n in range(5)]
    produced = ok(twinlog(url, "produce", "CliFlow", "--key", "k",
                          stdin="\n".join(lines).encode() + b"\n")).splitlines()
    assert len(produced) == 5 and all(line.startswith("PUT_OK ") for line in produced)
    assert ok(twinlog(url, "consume", "CliFlow", "--queue", "0")).splitlines() == lines
    assert ok(twinlog(url, "consume", "CliFlow", "--group", "cli-group")).splitlines() == lines
    lag = json.loads(ok(twinlog(url, "group", "lag", "cli-group", "--json")))
    assert lag["total_lag"] == 0
    assert ok(twinlog(url, "consume", "CliFlow", "--group", "cli-group")) == ""
    ok(twinlog(url, "group", "reset", "cli-group", "--topic", "CliFlow", "--earliest"))
    table = ok(twinlog(url, "group", "lag", "cli-group")).splitlines()
    assert table[-1] == "total lag 5, max 5"
    assert table[1].split() == ["CliFlow", "0", "5", "0", "5"]


def test_ha_status_shows_the_slave_in_sync(pair: tuple[BrokerProcess, BrokerProcess]) -> None:
    """On the master: its offset and a row per slave (in sync once it caught up); on the
    slave: its view of the master."""
    master, slave = pair
    ok(twinlog(master.url, "produce", "CliHa", stdin=b"replicated\n"))

    def in_sync() -> bool:
        answer: dict[str, Any] = json.loads(ok(twinlog(master.url, "ha", "status", "--json")))
        slaves = answer["master"]["slaves"]
        return len(slaves) == 1 and slaves[0]["in_sync"] and slaves[0]["diff_bytes"] == 0

    wait_for(in_sync, what="the slave in sync")
    table = ok(twinlog(master.url, "ha", "status")).splitlines()
    assert table[0].startswith("SYNC_MASTER at ")
    assert table[1].split()[:3] == ["SLAVE", "ADDRESS", "STATE"]
    assert table[2].split()[-1] == "yes"
    assert ok(twinlog(slave.url, "ha", "status")).startswith("SLAVE of ")


def test_bad_input_is_one_line_and_a_nonzero_exit(
        pair: tuple[BrokerProcess, BrokerProcess]) -> None:
    """Unknown topic: exit 4; wrong token: exit 1 naming 401; broker down: exit 3; a bad
    command line: exit 2 (argparse)."""
    url = pair[0].url
    assert "404" in one_error_line(twinlog(url, "topic", "describe", "NoSuchTopic"), 4)
    assert "401" in one_error_line(twinlog(url, "topic", "list", token="wrong"), 1)
    with socket.socket() as closed:  # bound, never listening: connecting is refused
        closed.bind(("127.0.0.1", 0))
        down = f"http://127.0.0.1:{closed.getsockname()[1]}"
        one_error_line(twinlog(down, "group", "list"), 3)
    assert twinlog(url, "group", "reset", "g", "--topic", "T").returncode == 2
