"""A `twinlog serve` process for benchmarks: port 0, the ports read from its port file."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from app.server.port_file import read_port_file

ROOT = Path(__file__).resolve().parents[1]
READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0


@dataclass(frozen=True, slots=True)
class Served:
    url: str
    pid: int


@contextmanager
def serve(data_dir: Path, **settings: object) -> Iterator[Served]:
    """An ASYNC_MASTER on `data_dir`, stopped (SIGTERM, then SIGKILL) when the block ends."""
    port_file = data_dir.with_suffix(".ports")
    arguments = [sys.executable, "-m", "app.cli.main", "serve", "--role", "ASYNC_MASTER",
                 "--data-dir", str(data_dir), "--http-port", "0", "--ha-port", "0",
                 "--port-file", str(port_file)]
    for name, value in {"ha_secret": "bench-ha-secret", "log_level": "warning", **settings}.items():
        arguments += ["--set", f"{name}={value}"]
    environment = {key: value for key, value in os.environ.items()
                   if not key.startswith("TWINLOG_")}
    environment["PYTHONPATH"] = str(ROOT)
    process = subprocess.Popen(arguments, cwd=ROOT, env=environment,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield Served(_wait_ready(process, port_file), process.pid)
    finally:
        process.terminate()
        try:
            process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _wait_ready(process: subprocess.Popen[bytes], port_file: Path) -> str:
    deadline = time.monotonic() + READY_TIMEOUT_S
    with httpx.Client(timeout=2.0) as client:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"twinlog serve exited with {process.returncode}")
            ports = read_port_file(port_file)
            if ports is not None:
                url = f"http://127.0.0.1:{ports[0]}"
                try:
                    if client.get(f"{url}/readyz").status_code == 200:
                        return url
                except httpx.HTTPError:
                    pass
            time.sleep(0.1)
    raise RuntimeError(f"twinlog serve not ready after {READY_TIMEOUT_S} s")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time the process has used (/proc/<pid>/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
