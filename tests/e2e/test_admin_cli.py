"""The admin CLI (`twinlog topic|group|ha status|produce|consume`) against real brokers: each
command's table and --json output, and for bad input (unknown topic, wrong token, broker down)
one line on stderr and an exit code that says what failed."""

from __future__ import annotations

import fcntl
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
F_GETPIPE_SZ = 1032  # fcntl: a pipe's capacity (Linux)


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


def _twinlog_without_url(*arguments: str) -> subprocess.CompletedProcess[str]:
    """`twinlog` with TWINLOG_URL naming a closed port: only a --url flag reaches a broker."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("TWINLOG_")}
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        env["TWINLOG_URL"] = f"http://127.0.0.1:{closed.getsockname()[1]}"
        return subprocess.run([sys.executable, "-m", "app.cli.main", *arguments], cwd=ROOT,
                              env=env, capture_output=True, text=True, timeout=60)


def test_url_and_token_go_before_or_after_the_command(
        pair: tuple[BrokerProcess, BrokerProcess]) -> None:
    """`--url` and `--token` work before the command's name as after it, over TWINLOG_URL;
    given both ways, the one after the name wins."""
    url = pair[0].url
    before = _twinlog_without_url("--url", url, "--token", TOKEN, "topic", "list")
    after = _twinlog_without_url("topic", "list", "--url", url, "--token", TOKEN)
    assert ok(before) == ok(after)
    assert ok(before).split()[:4] == ["TOPIC", "READ_QUEUES", "WRITE_QUEUES", "PERM"]
    ok(_twinlog_without_url("--url", "http://127.0.0.1:9", "--token", TOKEN, "group", "list",
                            "--url", url))
    assert "401" in one_error_line(_twinlog_without_url("--token", "wrong", "topic", "list",
                                                        "--url", url), 1)


def test_refusals_are_one_line_each(pair: tuple[BrokerProcess, BrokerProcess]) -> None:
    """A promotion refused (the slave's master is connected) is one `twinlog: 409 ...` line
    on stderr and exit 1, like every other refusal, with nothing on stdout; a promotion
    without --url names what is missing (exit 2); a write to the slave names its status
    once, not twice."""
    master, slave = pair
    wait_for(lambda: caught_up_cli(master), what="the slave connected")
    refused = twinlog(slave.url, "ha", "promote", "--url", slave.url)
    assert "409 ROLE_CHANGE_REFUSED: " in one_error_line(refused, 1)
    assert refused.stdout == ""
    assert "needs --url" in one_error_line(twinlog(slave.url, "ha", "promote"), 2)
    write = one_error_line(twinlog(slave.url, "produce", "CliOnSlave", stdin=b"x\n"), 1)
    assert write.startswith("twinlog: 503 SERVICE_NOT_AVAILABLE: "), write
    assert write.count("SERVICE_NOT_AVAILABLE") == 1, write


def caught_up_cli(master: BrokerProcess) -> bool:
    answer = json.loads(ok(twinlog(master.url, "ha", "status", "--json")))
    return bool(answer["master"]["slaves"]) and answer["master"]["slaves"][0]["in_sync"]


def test_ha_status_exits_5_when_replication_is_not_healthy(launch: Launcher) -> None:
    """A SYNC_MASTER without its slave: `ha status` prints its table, then one line on
    stderr saying why, and exits 5 (an operator's script reads that as unhealthy)."""
    lone = launch("cli-lone-master", "SYNC_MASTER")
    done = twinlog(lone.url, "ha", "status", token=None)
    assert done.returncode == 5, (done.stdout, done.stderr)
    assert done.stdout.startswith("SYNC_MASTER at ")
    assert done.stderr.strip() == ("twinlog: replication is not healthy: 0 slaves in sync, 1 "
                                   "needed (puts answer 202 SLAVE_NOT_AVAILABLE)")
    assert twinlog(lone.url, "ha", "status", "--json", token=None).returncode == 5


def _cli(url: str, *arguments: str, stdout: int = subprocess.PIPE) -> subprocess.Popen[bytes]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("TWINLOG_")}
    env.update({"TWINLOG_URL": url, "TWINLOG_TOKEN": TOKEN})
    return subprocess.Popen([sys.executable, "-m", "app.cli.main", *arguments], cwd=ROOT,
                            env=env, stdout=stdout, stderr=subprocess.PIPE)


def _read_exactly(fd: int, size_bytes: int) -> bytes:
    data = b""
    while len(data) < size_bytes:
        chunk = os.read(fd, size_bytes - len(data))
        assert chunk, f"EOF after {len(data)} bytes"
        data += chunk
    return data


def test_consume_into_a_closed_pipe_commits_only_what_was_written(
        pair: tuple[BrokerProcess, BrokerProcess]) -> None:
    """`twinlog consume --group G | head`: the reader takes five lines and closes the pipe
    while the consumer still has 295 to print. The consumer exits quietly (141, nothing on
    stderr) and commits only the messages it wrote into the pipe: at least the five read,
    at most what the pipe's buffer held besides; the next consume starts right there."""
    url = pair[0].url
    ok(twinlog(url, "topic", "create", "CliPipe", "--queues", "1"))
    lines = [f"{n:04d} " + "x" * 995 for n in range(300)]  # 1001 bytes a line with "\n"
    ok(twinlog(url, "produce", "CliPipe", stdin="\n".join(lines).encode() + b"\n"))
    consumer = _cli(url, "consume", "CliPipe", "--group", "cli-pipe", "--max-messages", "300")
    assert consumer.stdout is not None and consumer.stderr is not None
    fd = consumer.stdout.fileno()
    capacity_bytes = fcntl.fcntl(fd, F_GETPIPE_SZ)
    read = _read_exactly(fd, 5 * 1001)
    consumer.stdout.close()
    assert consumer.wait(60) == 141 and consumer.stderr.read() == b""
    assert read.decode().splitlines() == lines[:5]
    offsets = json.loads(ok(twinlog(url, "group", "describe", "cli-pipe", "--json")))
    (committed,) = [o["offset"] for o in offsets["offsets"] if o["topic"] == "CliPipe"]
    assert 5 <= committed <= 5 + capacity_bytes // 1001 + 1, (committed, capacity_bytes)
    again = ok(twinlog(url, "consume", "CliPipe", "--group", "cli-pipe", "--max-messages", "1"))
    assert again.splitlines() == [lines[committed]]


def test_printing_into_a_closed_pipe_is_quiet(pair: tuple[BrokerProcess, BrokerProcess]) -> None:
    """`twinlog ha status --json | head -c 0` (the reader gone before a byte is written):
    exit 141 and no BrokenPipeError traceback."""
    status = _cli(pair[0].url, "ha", "status", "--json")
    assert status.stdout is not None and status.stderr is not None
    status.stdout.close()
    assert status.wait(60) == 141
    assert status.stderr.read() == b""
