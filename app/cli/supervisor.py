"""What `twinlog dev` and `twinlog dev --dledger` share: broker children, their output, and the
loop that keeps them running until Ctrl-C.

Each child is a `twinlog serve` process in its own session, so a terminal's Ctrl-C reaches only
the supervisor, which then stops every child with SIGTERM (a clean broker shutdown: no abort
marker), waits a bounded time, and kills what is left.

A child that dies (`kill -9` of a DLedger leader, to watch the failover) leaves the others
running: the supervisor says which one ended and how, and the user restarts it by typing
`restart NAME` (or `r NAME`) and Enter; `status` lists the children. Sockets a child inherits
are the child's alone: the supervisor closes its own copies once the child has them, so a dead
child's ports refuse connections instead of queueing them for no one, and a restart binds the
same ports again. Only when every child has ended does the supervisor stop by itself.
"""

from __future__ import annotations

import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import IO

import httpx

READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 20.0
POLL_S = 0.2
WATCH_INTERVAL_S = 1.0
COMMANDS_MAX = 16  # typed lines waiting for the loop; more are dropped
COMMANDS_HELP = ("commands: `restart NAME` (or `r NAME`) starts a broker that ended, `status` "
                 "lists them; Ctrl-C stops all")

# What a child is started with: its `twinlog` arguments and the sockets it inherits (bound by
# the launcher just before; the supervisor closes its copies as soon as the child has them).
Launch = Callable[[], tuple[list[str], list[socket.socket]]]


def describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with status {code}"


class Child:
    process: subprocess.Popen[str]

    def __init__(self, name: str, launch: Launch, environment: dict[str, str]) -> None:
        self.name = name
        self._launch = launch
        self._environment = environment
        self.start()

    def restart(self) -> None:
        """Start it again, once it has ended (OSError: its sockets could not be bound)."""
        assert not self.is_running
        self._relay.join(timeout=2)  # its last lines before the new ones
        self.start()

    def start(self) -> None:
        arguments, sockets = self._launch()
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "app.cli.main", *arguments], env=self._environment,
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                text=True, bufsize=1, start_new_session=True,
                pass_fds=tuple(bound.fileno() for bound in sockets))
        finally:
            for bound in sockets:
                bound.close()  # the child's now: its ports close when it exits
        self._terminated = False
        self.exit_reported = False
        assert self.process.stdout is not None
        # Not a ServiceThread: blocked reading the child's pipe until EOF; not a round-based loop.
        self._relay = threading.Thread(target=self._copy_output, args=(self.process.stdout,),
                                       name=f"dev-{self.name}-output", daemon=True)
        self._relay.start()

    @property
    def is_running(self) -> bool:
        return self.process.poll() is None

    def _copy_output(self, stream: IO[str]) -> None:
        for line in stream:
            sys.stdout.write(f"[{self.name}] {line}")
            sys.stdout.flush()

    def terminate(self) -> None:
        """SIGTERM once, without waiting (`stop` waits): a second one would cut the child's
        graceful shutdown short."""
        if not self._terminated and self.process.poll() is None:
            self._terminated = True
            self.process.send_signal(signal.SIGTERM)

    def stop(self) -> int:
        """SIGTERM, a bounded wait, then SIGKILL; returns the exit code."""
        self.terminate()
        try:
            code = self.process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            print(f"twinlog dev: {self.name} did not stop in {STOP_TIMEOUT_S:.0f} s; killing it",
                  flush=True)
            self.process.kill()
            code = self.process.wait()
        self._relay.join(timeout=2)
        return code


def wait_ready(children: list[Child], urls: list[str], stop: threading.Event) -> bool:
    deadline = time.monotonic() + READY_TIMEOUT_S
    pending = dict(zip(urls, children, strict=True))
    with httpx.Client(timeout=1.0) as client:
        while pending and time.monotonic() < deadline and not stop.is_set():
            for url, child in list(pending.items()):
                if child.process.poll() is not None:
                    print(f"twinlog dev: {child.name} "
                          f"{describe_exit(child.process.returncode)}", flush=True)
                    return False
                try:
                    if client.get(f"{url}/readyz").status_code == 200:
                        del pending[url]
                except httpx.HTTPError:
                    pass
            stop.wait(POLL_S)
    return not pending


def disk_used(urls: dict[str, str]) -> str:
    """Each broker's data dir as `/admin/store` counts it (the blocks its files hold; the
    commit-log file allocated ahead has no name until used, and is not counted), for the
    banner."""
    parts = []
    with httpx.Client(timeout=2.0) as client:
        for name, url in urls.items():
            try:
                used = client.get(f"{url}/admin/store").json()["disk_used_bytes"]
                parts.append(f"{name} {used / (1 << 20):.0f} MiB")
            except (httpx.HTTPError, ValueError, KeyError, TypeError):
                parts.append(f"{name} unknown")
    return ", ".join(parts)


Starter = Callable[[dict[str, str], list[Child], threading.Event], "str | None"]
Watch = Callable[[list[Child]], None]


def supervise(start: Starter, environment_extra: dict[str, str], what: str,
              watch: Watch | None = None) -> int:
    """Run `start` (it starts the children and returns the banner, or None if they did not
    come up), then run until Ctrl-C or SIGTERM (or until every child has ended), taking the
    commands typed on stdin, and stop every child. `watch` runs about once a second (the
    DLedger supervisor names a new leader)."""
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    environment = {**os.environ, "TWINLOG_AUTH_TOKENS": "{}", "PYTHONUNBUFFERED": "1",
                   **environment_extra}
    environment.pop("TWINLOG_CONFIG_FILE", None)
    children: list[Child] = []
    try:
        banner = start(environment, children, stop)
        if banner is not None:
            print(banner, flush=True)
            _run(children, _command_lines(), stop, watch)
        elif not stop.is_set():
            print("twinlog dev: the brokers did not become ready; stopping", flush=True)
    finally:
        print(f"twinlog dev: stopping {what}", flush=True)
        # All at once: stopped one after another, a member still running would wait on a
        # request to one already gone (a DLedger follower's metadata sync: up to its timeout).
        for child in children:
            child.terminate()
        codes = [child.stop() for child in children]
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    for child, code in zip(children, codes, strict=True):
        print(f"twinlog dev: {child.name} exited with {code}", flush=True)
    return 0 if all(code == 0 for code in codes) else 1


def _command_lines() -> queue.Queue[str]:
    """The lines typed on stdin, read by a thread (none when stdin is closed)."""
    lines: queue.Queue[str] = queue.Queue(COMMANDS_MAX)

    def read() -> None:
        try:
            for line in sys.stdin:
                try:
                    lines.put_nowait(line.strip())
                except queue.Full:
                    pass
        except (OSError, ValueError):  # stdin not readable: no commands, Ctrl-C still works
            return

    if sys.stdin is not None:
        # Not a ServiceThread: blocked reading stdin until EOF; daemon, it ends with the process.
        threading.Thread(target=read, name="dev-commands", daemon=True).start()
    return lines


def _run(children: list[Child], commands: queue.Queue[str], stop: threading.Event,
         watch: Watch | None) -> None:
    watched_s = 0.0
    while not stop.is_set():
        for child in children:
            code = child.process.poll()
            if code is not None and not child.exit_reported:
                child.exit_reported = True
                print(f"twinlog dev: {child.name} {describe_exit(code)}; the others keep "
                      f"running. `restart {child.name}` and Enter starts it again.", flush=True)
        if all(not child.is_running for child in children):
            print("twinlog dev: every broker has ended", flush=True)
            return
        if watch is not None and time.monotonic() - watched_s >= WATCH_INTERVAL_S:
            watched_s = time.monotonic()
            watch(children)
        try:
            line = commands.get(timeout=POLL_S)
        except queue.Empty:
            continue
        run_command(line, children)


def run_command(line: str, children: list[Child]) -> None:
    """One typed line: `restart NAME` (`r NAME`), `status` (`s`); anything else: the help."""
    words = line.split()
    if not words:
        return
    by_name = {child.name: child for child in children}
    if words[0] in ("restart", "r") and len(words) == 2 and words[1] in by_name:
        _restart(by_name[words[1]])
    elif words[0] in ("status", "s") and len(words) == 1:
        for child in children:
            state = "running" if child.is_running else describe_exit(child.process.returncode)
            print(f"twinlog dev: {child.name} pid {child.process.pid} {state}", flush=True)
    else:
        print(f"twinlog dev: {COMMANDS_HELP} (names: {', '.join(by_name)})", flush=True)


def _restart(child: Child) -> None:
    if child.is_running:
        print(f"twinlog dev: {child.name} is running (pid {child.process.pid})", flush=True)
        return
    try:
        child.restart()
    except OSError as error:  # its port was taken meanwhile
        print(f"twinlog dev: cannot restart {child.name}: {error}", flush=True)
        return
    print(f"twinlog dev: {child.name} started again (pid {child.process.pid})", flush=True)
