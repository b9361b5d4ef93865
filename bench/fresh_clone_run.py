"""From a fresh clone to the first 201: `make run` timed end to end, for two git refs.

    python bench/fresh_clone_run.py [--ref HEAD] [--baseline REF] [--timeout-s 900]

Each ref is cloned into a temporary directory; `make run` there creates .venv, installs what
running needs and starts the dev pair; the clock stops at the first 201 from the master's
produce endpoint (http://127.0.0.1:8080, the dev default, so nothing else may listen there).
Then the whole process group is stopped. Both refs install from the same pip cache in the same
run, so the ratio compares what each installs, not the network.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
PRODUCE_URL = "http://127.0.0.1:8080/v1/topics/Timing/messages"
POLL_INTERVAL_S = 0.2


def _first_201_after_make_run(ref: str, timeout_s: float) -> float:
    with tempfile.TemporaryDirectory(prefix="twinlog-fresh-") as directory:
        clone = Path(directory) / "twinlog"
        subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
        subprocess.run(["git", "-C", str(clone), "checkout", "--quiet", ref], check=True)
        log = (Path(directory) / "make-run.log").open("wb")
        started = time.monotonic()
        process = subprocess.Popen(["make", "run"], cwd=clone, stdout=log,
                                   stderr=subprocess.STDOUT, start_new_session=True)
        try:
            return _wait_for_201(process, started, timeout_s) - started
        finally:
            os.killpg(process.pid, signal.SIGINT)
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
            log.close()


def _wait_for_201(process: subprocess.Popen[bytes], started: float, timeout_s: float) -> float:
    with httpx.Client(timeout=2.0) as client:
        while time.monotonic() - started < timeout_s:
            if process.poll() is not None:
                raise SystemExit(f"make run exited with {process.returncode}")
            try:
                response = client.post(PRODUCE_URL, content=b"timing",
                                       headers={"Content-Type": "application/octet-stream"})
                if response.status_code == 201:
                    return time.monotonic()
            except httpx.HTTPError:
                pass
            time.sleep(POLL_INTERVAL_S)
    raise SystemExit(f"no 201 within {timeout_s} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ref", default="HEAD")
    parser.add_argument("--baseline", help="a ref to time in the same run (e.g. an older main)")
    parser.add_argument("--timeout-s", type=float, default=900.0)
    arguments = parser.parse_args()
    measured = _first_201_after_make_run(arguments.ref, arguments.timeout_s)
    print(f"fresh clone -> make run -> first 201: {measured:.1f} s ({arguments.ref})")
    if arguments.baseline:
        baseline = _first_201_after_make_run(arguments.baseline, arguments.timeout_s)
        print(f"fresh clone -> make run -> first 201: {baseline:.1f} s ({arguments.baseline})")
        print(f"ratio: {measured / baseline:.2f} of the baseline")


if __name__ == "__main__":
    main()
