"""Shared bits of the benchmarks: timing and printing figures next to their baseline."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import time
from collections.abc import Callable


def timed(function: Callable[[], object]) -> float:
    started = time.perf_counter()
    function()
    return time.perf_counter() - started


def header(title: str) -> None:
    print(f"== {title} ({platform.python_implementation()} {platform.python_version()}, "
          f"{platform.machine()})")


def row(name: str, value: float, unit: str, baseline: float | None = None,
        target: str = "") -> None:
    ratio = f"  ratio {value / baseline:6.2f}" if baseline else ""
    print(f"  {name:<44} {value:14,.1f} {unit:<8}{ratio}  {target}".rstrip())


def cpu_s(pid: int) -> float:
    """The CPU (user and system) process `pid` has used so far (Linux's /proc): per request,
    the steadier figure when other programs share the machine."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def stop_process(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL after 30 s."""
    if process.poll() is None:
        process.terminate()
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def ensure_debian_tool(command: str, package: str) -> str:
    """The path of `command`, installed with apt-get from `package` when missing."""
    found = shutil.which(command)
    if found:
        return found
    print(f"{command} is missing: installing it with apt-get (Debian package {package})",
          flush=True)
    subprocess.run(["apt-get", "update"], check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["apt-get", "install", "-y", package], check=True, stdout=subprocess.DEVNULL)
    found = shutil.which(command)
    if not found:
        raise SystemExit(f"{command} could not be installed")
    return found


def process_cpu_s(pid: int) -> float:
    """User and system CPU seconds a running process has used so far (/proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class CpuMeter:
    """The CPU each process of a case used over it, per operation: this (the bench's client)
    process by `time.process_time()` and the watched ones (label -> pid) by /proc. On a shared
    machine the figure load moves least, and it says where one side's time goes."""

    def __init__(self, watched: dict[str, int]) -> None:
        self._watched = dict(watched)
        self._client_s = time.process_time()
        self._watched_s = {label: cpu_s(pid) for label, pid in self._watched.items()}

    def per_operation_us(self, operations: int) -> dict[str, float]:
        """Microseconds per operation since the start: "bench client" first, then each
        watched process in the order given."""
        assert operations > 0, operations
        spent_s = {"bench client": time.process_time() - self._client_s}
        spent_s.update({label: cpu_s(pid) - self._watched_s[label]
                        for label, pid in self._watched.items()})
        return {label: seconds / operations * 1e6 for label, seconds in spent_s.items()}


def cpu_line(costs_us: dict[str, float], unit: str = "message") -> None:
    """One indented line under a figure: each process's CPU per operation and their sum."""
    parts = ", ".join(f"{label} {value:.1f}" for label, value in costs_us.items())
    print(f"      CPU us per {unit}: {parts}; all {sum(costs_us.values()):.1f}")
