"""The dashboard page (/ui) in headless Chromium against a real `twinlog dev` pair: it loads
from the broker alone, shows the role and the slave, and its diff chart shows the slave's diff
rise while the slave is paused under a burst of produces and fall back to 0 once it resumes.
A screenshot is written to test-artifacts/ui-dashboard.png.

Chromium is Debian's package (`apt-get install chromium`; .ci/run installs it). Without it the
test skips, unless TWINLOG_REQUIRE_CHROMIUM=1 (CI) makes that a failure.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import ROOT, wait_for

ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
BURST_MESSAGES = 8
POLL_INTERVAL_MS = 200

pytestmark = pytest.mark.slow


@dataclass
class DevPair:
    process: subprocess.Popen[bytes]
    master_url: str
    slave_pid: int


def _slave_pid(parent_pid: int) -> int:
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmdline = (stat.parent / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if int(fields[1]) == parent_pid and b"SLAVE" in cmdline:
            return int(stat.parent.name)
    raise AssertionError("the dev slave process was not found")


@pytest.fixture
def dev_pair(tmp_path: Path) -> Iterator[DevPair]:
    log_path = tmp_path / "dev.log"
    environment = {key: value for key, value in os.environ.items()
                   if not key.startswith("TWINLOG_")}
    environment.update({"PYTHONPATH": str(ROOT), "TWINLOG_MAPPED_FILE_SIZE_BYTES": str(8 << 20),
                        "TWINLOG_SLAVE_TIMEOUT_MS": "1000"})
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "dev", "--data-root", str(tmp_path / "data"),
             "--master-http-port", "0", "--slave-http-port", "0", "--ha-port", "0"],
            cwd=ROOT, env=environment, stdout=log, stderr=subprocess.STDOUT)
    slave_pid = None
    try:
        wait_for(lambda: "Ctrl-C stops both" in log_path.read_text(errors="replace"),
                 timeout_s=60, what="dev banner")
        found = re.search(r"master \(SYNC_MASTER\) (http://127\.0\.0\.1:\d+)",
                          log_path.read_text())
        assert found is not None, log_path.read_text()
        slave_pid = _slave_pid(process.pid)
        yield DevPair(process, found[1], slave_pid)
    finally:
        if slave_pid is not None:
            os.kill(slave_pid, signal.SIGCONT)
        process.send_signal(signal.SIGINT)
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _page_state(page: Any) -> dict[str, Any]:
    state: dict[str, Any] = page.evaluate(
        "() => JSON.parse(JSON.stringify(window.twinlogDashboard))")
    return state


def _diffs(state: dict[str, Any]) -> list[int]:
    return [point["diff"] for series in state["history"].values() for point in series]


def _burst(master_url: str) -> list[int]:
    def put(index: int) -> int:
        response = httpx.post(f"{master_url}/v1/topics/UiBurst/messages", timeout=30,
                              json={"body": f"burst {index}", "queue_id": 0})
        return response.status_code

    with ThreadPoolExecutor(BURST_MESSAGES) as pool:
        return list(pool.map(put, range(BURST_MESSAGES)))


def test_dashboard_charts_the_slave_diff_falling_to_zero(dev_pair: DevPair) -> None:
    """The page loads from the broker, names the role and the slave, charts its diff above 0
    while it is paused under produces, and back at 0 once it has caught up."""
    if CHROMIUM is None:
        if os.environ.get("TWINLOG_REQUIRE_CHROMIUM") == "1":
            pytest.fail("chromium is required (TWINLOG_REQUIRE_CHROMIUM=1) but not installed")
        pytest.skip("chromium is not installed (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM,
                                             args=["--no-sandbox", "--disable-gpu"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            outside: list[str] = []
            page.on("request", lambda request: outside.append(request.url)
                    if not request.url.startswith(dev_pair.master_url) else None)
            page.goto(f"{dev_pair.master_url}/ui/?interval_ms={POLL_INTERVAL_MS}")
            wait_for(lambda: _page_state(page)["polls"] >= 2
                     and len(_page_state(page)["history"]) == 1, what="the page polling")
            assert page.text_content("#role") == "SYNC_MASTER"

            os.kill(dev_pair.slave_pid, signal.SIGSTOP)
            try:
                statuses = _burst(dev_pair.master_url)
                assert set(statuses) <= {201, 202, 503}, statuses
                wait_for(lambda: max(_diffs(_page_state(page))) > 0,
                         what="a diff above 0 on the chart")
            finally:
                os.kill(dev_pair.slave_pid, signal.SIGCONT)

            def caught_up() -> bool:
                series = next(iter(_page_state(page)["history"].values()))
                return series[-1]["diff"] == 0 and max(p["diff"] for p in series) > 0

            wait_for(caught_up, timeout_s=30, what="the chart back at 0")
            diff_cell = page.text_content("#slaves tbody tr td:nth-child(5)")
            assert diff_cell == "0"
            assert page.locator("#diff-chart polyline").count() == 1
            assert not page.is_visible("#error")
            assert outside == [], f"the page fetched from elsewhere: {outside}"
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "ui-dashboard.png"), full_page=True)
            print(f"screenshot: {ARTIFACTS / 'ui-dashboard.png'}")
        finally:
            browser.close()
