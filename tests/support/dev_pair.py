"""A real `twinlog dev` pair (SYNC_MASTER and SLAVE children) on ports the kernel picks: the
dashboard test and bench/idle_memory.py start one, find its two processes and stop it."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.support.processes import wait_for

ROOT = Path(__file__).resolve().parents[2]
BANNER_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class DevPair:
    process: subprocess.Popen[bytes]
    master_url: str
    pids: dict[str, int]  # "master" and "slave"


def dev_children(parent_pid: int) -> dict[str, int]:
    """The children of a `twinlog dev` process by role (their command lines name it)."""
    found = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmdline = (stat.parent / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if int(fields[1]) == parent_pid:
            found["slave" if b"SLAVE" in cmdline else "master"] = int(stat.parent.name)
    return found


@contextmanager
def running_dev_pair(root: Path, environment: dict[str, str] | None = None
                     ) -> Iterator[DevPair]:
    """`twinlog dev` on `root / "data"`, its output in `root / "dev.log"`; Ctrl-C (SIGINT) at
    the end, SIGKILL after a bounded wait."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("TWINLOG_")}
    env.update({"PYTHONPATH": str(ROOT), **(environment or {})})
    log_path = root / "dev.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "app.cli.main", "dev", "--data-root", str(root / "data"),
             "--master-http-port", "0", "--slave-http-port", "0", "--ha-port", "0"],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: process.poll() is not None
                 or "Ctrl-C stops both" in log_path.read_text(errors="replace"),
                 timeout_s=BANNER_TIMEOUT_S, what="the dev banner")
        found = re.search(r"master \(SYNC_MASTER\) (http://127\.0\.0\.1:\d+)",
                          log_path.read_text())
        assert found is not None, log_path.read_text()
        pids = dev_children(process.pid)
        assert set(pids) == {"master", "slave"}, pids
        yield DevPair(process, found[1], pids)
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
