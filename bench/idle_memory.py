"""Idle memory of the `make run` pair (`twinlog dev`: a SYNC_MASTER and its SLAVE), next to a
bare uvicorn app that imports the broker's dependencies and serves one route.

Each is measured the same way: three puts (for the baseline, three POSTs to its route), then
3 s of idle, then the resident set (VmRSS) read from /proc. The target (issue 31) is at most
100 MB per broker. Two baselines: the bare app importing every dependency of pyproject.toml
(what the broker held at start before issue 31), and importing only those a started broker
imports now (the rest load when a snapshot, a migration or a CLI command runs). Then what each
large import adds to a process, in the order a broker meets them. Ports are 0 (picked by the
kernel) on 127.0.0.1; the data dirs are removed.

    python bench/idle_memory.py
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import header, row, stop_process
from tests.support.dev_pair import running_dev_pair

ROOT = Path(__file__).resolve().parents[1]
PUTS = 3
IDLE_S = 3.0
READY_TIMEOUT_S = 90.0
TARGET_MB = 100.0
MB = 1_000_000
# The broker's dependencies (pyproject.toml; pyspark is not among them: only `twinlog report`
# needs it), in the order a broker process meets them.
DEPENDENCIES = ("fastapi", "uvicorn", "sqlmodel", "sqlalchemy", "pydantic_settings",
                "prometheus_client", "orjson", "httpx", "alembic", "numpy", "pyarrow",
                "pyarrow.parquet", "isal.isal_zlib")
# What a started master imports of them (a slave also httpx, for its metadata sync).
AT_START = ("fastapi", "uvicorn", "sqlmodel", "sqlalchemy", "pydantic_settings",
            "prometheus_client", "orjson")
# Each dependency's import, in a fresh process, in DEPENDENCIES' order: what it adds.
IMPORT_COSTS = """
import importlib, re, sys, time
def rss():
    return int(re.search(r"VmRSS:\\s+(\\d+) kB", open("/proc/self/status").read())[1]) * 1024
for name in sys.argv[1:]:
    before, started = rss(), time.perf_counter()
    importlib.import_module(name)
    print(name, rss() - before, time.perf_counter() - started, flush=True)
"""

# A bare app: the dependencies imported, one route, uvicorn on port 0 (the port printed).
BASELINE = """
import importlib, socket, sys
for name in sys.argv[1:]:
    importlib.import_module(name)
import uvicorn
from fastapi import FastAPI
app = FastAPI()

@app.post("/put")
async def put(body: dict) -> dict:
    return {"stored": len(body)}

listener = socket.socket()
listener.bind(("127.0.0.1", 0))
print(listener.getsockname()[1], flush=True)
uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[listener])
"""


def rss_bytes(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    found = re.search(r"^VmRSS:\s+(\d+) kB", status, re.M)
    assert found is not None, status
    return int(found[1]) * 1024


def measure_pair(root: Path) -> dict[str, int]:
    with running_dev_pair(root) as pair:
        for index in range(PUTS):
            answer = httpx.post(f"{pair.master_url}/v1/topics/Idle/messages", timeout=30,
                                json={"body": f"message {index}"})
            assert answer.status_code in (201, 202), answer.text
        time.sleep(IDLE_S)
        return {role: rss_bytes(pid) for role, pid in pair.pids.items()}


def measure_baseline(dependencies: tuple[str, ...]) -> int:
    process = subprocess.Popen([sys.executable, "-c", BASELINE, *dependencies],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        assert process.stdout is not None
        port = int(process.stdout.readline())
        for index in range(PUTS):
            answer = httpx.post(f"http://127.0.0.1:{port}/put", json={"body": f"m {index}"},
                                timeout=30)
            assert answer.status_code == 200, answer.text
        time.sleep(IDLE_S)
        return rss_bytes(process.pid)
    finally:
        stop_process(process)  # type: ignore[arg-type]


def import_costs() -> list[tuple[str, int, float]]:
    result = subprocess.run([sys.executable, "-c", IMPORT_COSTS, *DEPENDENCIES],
                            capture_output=True, text=True, check=True, timeout=120)
    return [(name, int(added), float(seconds)) for name, added, seconds in
            (line.split() for line in result.stdout.splitlines())]


def main() -> None:
    header("idle memory: the make run pair after three puts and 3 s, VmRSS")
    every = measure_baseline(DEPENDENCIES)
    at_start = measure_baseline(AT_START)
    root = Path(tempfile.mkdtemp(prefix="twinlog-idle-"))
    try:
        pair = measure_pair(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    row("bare app, every dependency imported", every / MB, "MB")
    row("bare app, what a broker imports at start", at_start / MB, "MB")
    for role in ("master", "slave"):
        row(f"twinlog dev {role}", pair[role] / MB, "MB", every / MB,
            f"target <= {TARGET_MB:.0f} MB")
    print("  what each import adds, in this order (fresh process):")
    for name, added, seconds in import_costs():
        row(f"  import {name}  ({1000 * seconds:.0f} ms)", added / MB, "MB")


if __name__ == "__main__":
    main()
