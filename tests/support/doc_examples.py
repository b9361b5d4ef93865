"""docs/http-api.md's examples, run in the order shown against a real pair (a SYNC_MASTER and
its SLAVE), each answer compared with the one the doc shows.

The pair listens on ports of its own; answers are compared (and written) as if it listened
where the doc says: HTTP 8080 and 8081, HA 10912 and 10913, and a msg id's host part is the
master's 127.0.0.1:8080. (Its brokers are started with `--http-port 0`, and a broker writes the
configured port into its STOREHOST, so their msg ids name port 0.) Values that differ from run
to run are compared by type only: timestamps and ages (`*_ms`), rates (`*_per_s`), disk use,
paths, random ids, versions, and the milliseconds in a refusal's text. The two DLedger examples
need a DLedger group and are not run; an answer cut with `…` is checked for its status only;
the /metrics answer for its series (names and label names), not their values.

`python -m tests.support.doc_examples --write` starts a pair, runs the examples and writes the
answers it got into docs/http-api.md (after a change to what the broker answers).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.brokers import ROOT, BrokerProcess, Launcher, _launching, caught_up, wait_for

HTTP_API = ROOT / "docs" / "http-api.md"
DOC_PORTS = {"master_http": 8080, "slave_http": 8081, "master_ha": 10912, "slave_ha": 10913}
NOT_RUN_SECTIONS = ("DLedger mode",)
CUT = "…"
STOREHOST_PORT = 0  # the port the pair's msg ids name (its brokers' configured http_port)
COMMAND_TIMEOUT_S = 30.0
CATCH_UP_TIMEOUT_S = 20.0
# Values that differ from run to run: compared by type only. Besides times, rates and ids: the
# flushed offset (the flush runs on its own), the metadata tables' data versions (the offsets
# table is written every consumer_offset_persist_interval_ms).
_VOLATILE_SUFFIXES = ("_ms", "_ms_ago", "_per_s")
_VOLATILE_KEYS = frozenset({"disk_used_bytes", "disk_used_ratio", "path", "snapshot_id",
                            "slave_id", "versions", "replication_samples", "flushed_offset",
                            "data_version", "data_versions"})
_STATUS_LINE = re.compile(r"^(\d{3}) `([^`]+)`$")
_MSG_ID_HOST = re.compile(r"7F000001([0-9A-F]{8})(?=[0-9A-F]{16})")
_LOOPBACK = re.compile(r"127\.0\.0\.1:(\d+)")
_MS_IN_TEXT = re.compile(r"\b\d+ ms\b")


@dataclass
class Example:
    section: str  # the `##` heading it is under
    heading: str  # the `###` heading
    command: str
    answer: str  # the lines between the command and the closing fence
    answer_lines: tuple[int, int]  # [first, end) line numbers of the answer in the doc
    status: int | None  # from the line after the block, when there is one
    content_type: str | None

    @property
    def run(self) -> bool:
        return self.section not in NOT_RUN_SECTIONS


def examples(text: str) -> list[Example]:
    lines = text.splitlines()
    found: list[Example] = []
    section = heading = ""
    index = 0
    while index < len(lines):
        line = lines[index]
        if line.startswith("## "):
            section = line[3:].strip()
        elif line.startswith("### "):
            heading = line[4:].strip()
        elif line == "```" and index + 1 < len(lines) and lines[index + 1].startswith("$ curl"):
            command = lines[index + 1][2:]
            end = lines.index("```", index + 2)
            after = next((candidate for candidate in lines[end + 1:] if candidate.strip()), "")
            status = _STATUS_LINE.match(after)
            found.append(Example(section, heading, command, "\n".join(lines[index + 2:end]),
                                 (index + 2, end), int(status[1]) if status else None,
                                 status[2] if status else None))
            index = end
        index += 1
    return found


@dataclass
class Pair:
    master: BrokerProcess
    slave: BrokerProcess

    def ports(self) -> dict[str, int]:
        """The pair's ports by the doc's names (the slave's HA port once it listens: after
        its promotion)."""
        assert self.master.ha_port is not None
        ports = {"master_http": self.master.http_port, "slave_http": self.slave.http_port,
                 "master_ha": self.master.ha_port}
        slave_ha = self.slave.get_json("/admin/ha")["master"]
        if slave_ha is not None:
            ports["slave_ha"] = int(slave_ha["listen_address"].rsplit(":", 1)[1])
        return ports


def start_pair(launch: Launcher) -> Pair:
    """A SYNC_MASTER and its SLAVE, the slave connected and caught up."""
    settings = {"slave_sync_interval_s": 60}
    master = launch("doc-master", "SYNC_MASTER", **settings)
    slave = launch("doc-slave", "SLAVE", master=master, **settings)
    wait_for(lambda: caught_up(master), CATCH_UP_TIMEOUT_S, "the slave connected")
    return Pair(master, slave)


def _role(broker: BrokerProcess) -> str:
    role: str = broker.get_json("/admin/diff")["role"]
    return role


def _slave_holds_the_log(pair: Pair) -> bool:
    """The slave holds and has dispatched what the master holds (as a reader a moment later
    would find it)."""
    master = pair.master.get_json("/admin/store")
    slave = pair.slave.get_json("/admin/store")
    return slave["max_offset"] == master["max_offset"] and slave["dispatch_behind_bytes"] == 0


def run(example: Example, pair: Pair) -> tuple[str, int | None, str | None]:
    """The command as the doc shows it, through bash with $M and $S set: its output, and the
    status and content type curl saw (when the command does not print its own)."""
    if '"$S' in example.command and _role(pair.slave) == "SLAVE" \
            and _role(pair.master) != "SLAVE":
        wait_for(lambda: _slave_holds_the_log(pair), CATCH_UP_TIMEOUT_S, "the slave caught up")
    command = to_run(example.command, pair.ports())
    own_format = " -w " in command
    if not own_format:
        command += " -w '\\n%{http_code} %{content_type}'"
    result = subprocess.run(
        ["bash", "-c", command], capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S,
        env={"M": pair.master.url, "S": pair.slave.url, "PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, f"{example.command}: {result.stderr}"
    if own_format:
        return result.stdout.rstrip("\n"), None, None
    body, _, trailer = result.stdout.rpartition("\n")
    status, _, content_type = trailer.partition(" ")
    return body, int(status), content_type.split(";")[0]


def to_run(command: str, ports: dict[str, int]) -> str:
    """The doc's ports in a command (a demote's addresses, a msg id's host) made the pair's."""
    for name, doc_port in DOC_PORTS.items():
        if name in ports:
            command = command.replace(f"127.0.0.1:{doc_port}",
                                      f"127.0.0.1:{ports[name]}")
    return command.replace(f"7F000001{DOC_PORTS['master_http']:08X}",
                           f"7F000001{STOREHOST_PORT:08X}")


def as_documented(answer: str, ports: dict[str, int]) -> str:
    """An answer of the pair written as if it listened on the doc's ports."""
    doc_port = {port: DOC_PORTS[name] for name, port in ports.items()}

    def loopback(match: re.Match[str]) -> str:
        port = int(match[1])
        return f"127.0.0.1:{doc_port.get(port, port)}"

    def msg_id_host(match: re.Match[str]) -> str:
        port = int(match[1], 16)
        return f"7F000001{DOC_PORTS['master_http'] if port == STOREHOST_PORT else port:08X}"

    return _MSG_ID_HOST.sub(msg_id_host, _LOOPBACK.sub(loopback, answer))


def _series(text: str) -> set[str]:
    """Each series of a Prometheus answer as `name{label names}` (buckets left out)."""
    found = set()
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name, _, labels = line.split(" ")[0].partition("{")
        if name.endswith("_bucket"):
            continue
        keys = sorted(pair.split("=")[0] for pair in labels.rstrip("}").split(",") if pair)
        found.add(f"{name}{{{','.join(keys)}}}")
    return found


def _shape(value: Any, key: str = "") -> Any:
    """What of a JSON answer must match the doc: volatile values become their type's name."""
    if key in _VOLATILE_KEYS or key.endswith(_VOLATILE_SUFFIXES):
        return f"<{type(value).__name__}>" if value is not None else None
    if isinstance(value, dict):
        return {name: _shape(item, name) for name, item in value.items()}
    if isinstance(value, list):
        return [_shape(item) for item in value]
    if isinstance(value, str):
        return _LOOPBACK.sub("127.0.0.1:<port>", _MS_IN_TEXT.sub("<n> ms", value)) \
            if key in ("detail", "address") else value
    return value


def differences(example: Example, got: str, status: int | None,
                content_type: str | None) -> list[str]:
    """What the run answered that the doc does not show."""
    problems = []
    if (status, content_type) != (example.status, example.content_type):
        problems.append(f"answered {status} {content_type}, the doc says {example.status} "
                        f"{example.content_type}")
    if CUT in example.answer:
        return problems
    if content_type == "text/plain":
        missing = _series(example.answer) ^ _series(got)
        if missing:
            problems.append(f"series in one answer only: {sorted(missing)}")
        return problems
    try:
        documented, answered = json.loads(example.answer), json.loads(got)
    except json.JSONDecodeError:
        if got != example.answer:
            problems.append(f"answered {got!r}, the doc shows {example.answer!r}")
        return problems
    if _shape(documented) != _shape(answered):
        problems.append(f"answered\n{got}\nthe doc shows\n{example.answer}")
    return problems


def answer_to_write(example: Example, got: str) -> str:
    """The answer as the doc shows it: /metrics without its HELP and TYPE lines and buckets."""
    if CUT in example.answer:
        return example.answer
    if example.content_type == "text/plain":
        return "\n".join(line for line in got.splitlines()
                         if line and not line.startswith("#") and "_bucket{" not in line)
    return got


def run_all(pair: Pair, text: str) -> Iterator[tuple[Example, str, int | None, str | None]]:
    for example in examples(text):
        if example.run:
            got, status, content_type = run(example, pair)
            yield example, as_documented(got, pair.ports()), status, content_type


def write(text: str) -> str:
    """The doc with the answers of a fresh pair."""
    lines = text.splitlines()
    with tempfile.TemporaryDirectory() as root:
        launching = _launching(Path(root))
        pair = start_pair(next(launching))
        try:
            answers = [(example.answer_lines, answer_to_write(example, got))
                       for example, got, _, _ in run_all(pair, text)]
        finally:
            launching.close()
    for (first, end), answer in reversed(answers):
        lines[first:end] = answer.splitlines()
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        raise SystemExit("usage: python -m tests.support.doc_examples --write")
    HTTP_API.write_text(write(HTTP_API.read_text(encoding="utf-8")), encoding="utf-8")
    print(f"wrote {HTTP_API.relative_to(ROOT)}")
