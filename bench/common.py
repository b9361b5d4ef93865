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
