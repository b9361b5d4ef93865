"""The dashboard page (/ui) in headless Chromium against a real `twinlog dev` pair, and against
a real 3-member DLedger group: it loads from the broker alone, shows the role and the slaves
(peers), and its chart shows a paused slave's diff (a paused peer's lag) rise under a burst of
produces and fall back to 0 once it resumes. Screenshots are written to
test-artifacts/ui-dashboard.png and test-artifacts/ui-dashboard-dledger.png.

Chromium is Debian's package (`apt-get install chromium`; .ci/run installs it). Without it the
test skips, unless TWINLOG_REQUIRE_CHROMIUM=1 (CI) makes that a failure.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.brokers import ROOT, Launcher, caught_up, wait_for
from tests.support.dev_pair import DevPair, running_dev_pair
from tests.support.dledger_group import DLedgerGroup, Member
from tests.support.processes import pause, resume

ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
BURST_MESSAGES = 8
POLL_INTERVAL_MS = 200

pytestmark = [pytest.mark.processes, pytest.mark.slow]


@pytest.fixture
def dev_pair(tmp_path: Path) -> Iterator[DevPair]:
    environment = {"TWINLOG_MAPPED_FILE_SIZE_BYTES": str(8 << 20),
                   "TWINLOG_SLAVE_TIMEOUT_MS": "1000"}
    with running_dev_pair(tmp_path, environment) as pair:
        try:
            yield pair
        finally:
            os.kill(pair.pids["slave"], signal.SIGCONT)


@dataclass
class Dashboard:
    """The page in headless Chromium, and every request it made to another host than the
    brokers it was opened on."""

    page: Any
    brokers: list[str] = field(default_factory=list)
    outside: list[str] = field(default_factory=list)

    def open(self, broker_url: str) -> None:
        self.brokers.append(broker_url)
        self.page.goto(f"{broker_url}/ui/?interval_ms={POLL_INTERVAL_MS}")

    def state(self) -> dict[str, Any]:
        state: dict[str, Any] = self.page.evaluate(
            "() => JSON.parse(JSON.stringify(window.twinlogDashboard))")
        return state

    def rows(self) -> list[list[str]]:
        """The replication table's cells, row by row."""
        rows: list[list[str]] = self.page.eval_on_selector_all(
            "#slaves tbody tr", "rows => rows.map((row) => [...row.cells].map("
                                "(cell) => cell.textContent))")
        return rows

    def finish(self, screenshot_name: str) -> None:
        """No error shown, nothing fetched from elsewhere; the screenshot written."""
        assert not self.page.is_visible("#error")
        assert self.outside == [], f"the page fetched from elsewhere: {self.outside}"
        ARTIFACTS.mkdir(exist_ok=True)
        self.page.screenshot(path=str(ARTIFACTS / screenshot_name), full_page=True)
        print(f"screenshot: {ARTIFACTS / screenshot_name}")


@contextmanager
def _dashboard() -> Iterator[Dashboard]:
    if CHROMIUM is None:
        if os.environ.get("TWINLOG_REQUIRE_CHROMIUM") == "1":
            pytest.fail("chromium is required (TWINLOG_REQUIRE_CHROMIUM=1) but not installed")
        pytest.skip("chromium is not installed (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM,
                                             args=["--no-sandbox", "--disable-gpu"])
        try:
            dashboard = Dashboard(browser.new_page(viewport={"width": 1280, "height": 800}))
            dashboard.page.on("request", lambda request: dashboard.outside.append(request.url)
                              if not request.url.startswith(tuple(dashboard.brokers)) else None)
            yield dashboard
        finally:
            browser.close()


def _diffs(state: dict[str, Any]) -> list[int]:
    return [point["diff"] for series in state["history"].values() for point in series]


def _burst(broker_url: str, topic: str) -> list[int]:
    def put(index: int) -> int:
        response = httpx.post(f"{broker_url}/v1/topics/{topic}/messages", timeout=30,
                              json={"body": f"burst {index}", "queue_id": 0})
        return response.status_code

    with ThreadPoolExecutor(BURST_MESSAGES) as pool:
        return list(pool.map(put, range(BURST_MESSAGES)))


def _fell_back_to_zero(series: list[dict[str, Any]]) -> bool:
    return bool(series[-1]["diff"] == 0 and max(point["diff"] for point in series) > 0)


def test_dashboard_charts_the_slave_diff_falling_to_zero(dev_pair: DevPair) -> None:
    """The page loads from the broker, names the role and the slave, charts its diff above 0
    while it is paused under produces, and back at 0 once it has caught up; a delayed message
    shows as a pending timer."""
    with _dashboard() as dashboard:
        page = dashboard.page
        dashboard.open(dev_pair.master_url)
        wait_for(lambda: dashboard.state()["polls"] >= 2
                 and len(dashboard.state()["history"]) == 1, what="the page polling")
        assert page.text_content("#role") == "SYNC_MASTER"

        pause(dev_pair.pids["slave"])
        try:
            statuses = _burst(dev_pair.master_url, "UiBurst")
            assert set(statuses) <= {201, 202, 503}, statuses
            wait_for(lambda: max(_diffs(dashboard.state())) > 0,
                     what="a diff above 0 on the chart")
        finally:
            os.kill(dev_pair.pids["slave"], signal.SIGCONT)

        wait_for(lambda: _fell_back_to_zero(next(iter(dashboard.state()["history"].values()))),
                 timeout_s=30, what="the chart back at 0")
        diff_cell = page.text_content("#slaves tbody tr td:nth-child(5)")
        assert diff_cell == "0"
        assert page.locator("#diff-chart polyline").count() == 1
        later = httpx.post(f"{dev_pair.master_url}/v1/topics/UiLater/messages",
                           json={"body": "later", "delay_ms": 3_600_000}, timeout=10.0)
        assert later.status_code in (201, 202), later.text
        wait_for(lambda: page.text_content("#timers tbody tr:nth-child(2) td:nth-child(2)")
                 == "1", what="the pending timer on the page")
        for path, body in (("/v1/topics", {"name": "UiPop", "read_queue_count": 1,
                                           "write_queue_count": 1}),
                           ("/v1/groups", {"name": "ui-pop"}),
                           ("/v1/topics/UiPop/messages", {"body": "to receive"})):
            answer = httpx.post(f"{dev_pair.master_url}{path}", json=body, timeout=10.0)
            assert answer.status_code in (201, 202), answer.text
        received = httpx.post(f"{dev_pair.master_url}/v1/groups/ui-pop/topics/UiPop/"
                              "messages:receive", json={"wait_ms": 5000}, timeout=10.0)
        assert received.status_code in (200, 202), received.text
        assert len(received.json()["messages"]) == 1
        wait_for(lambda: [cell.strip() for cell in page.locator("#pop tbody tr td")
                          .all_text_contents()] == ["ui-pop", "UiPop", "0", "1", "0", "0"],
                 what="the group consumption row on the page")
        dashboard.finish("ui-dashboard.png")


@pytest.fixture
def dledger_group(tmp_path: Path) -> Iterator[DLedgerGroup]:
    # A long election timeout: on a loaded host leadership must stay put while the page
    # watches the leader (a resumed follower's pre-vote is refused within the leader's lease).
    group = DLedgerGroup(tmp_path, dledger_election_timeout_ms=3000)
    try:
        group.start_all()
        yield group
    finally:
        group.stop_all()


def _pause(member: Member, paused: bool) -> None:
    assert member.process is not None
    if paused:
        pause(member.process.pid)
    else:
        resume(member.process.pid)


def test_dashboard_charts_a_paused_peer_lag_in_dledger_mode(dledger_group: DLedgerGroup) -> None:
    """On a DLedger leader the page names the member LEADER, shows the term and a row and a
    chart line per peer, charts a paused follower's lag above 0 under produces (a majority
    still commits them) and back at 0 once it resumes; a follower's page names its leader."""
    leader = dledger_group.wait_leader()
    paused, other = [member for member in dledger_group.members.values() if member is not leader]
    with _dashboard() as dashboard:
        page = dashboard.page
        dashboard.open(leader.url)
        wait_for(lambda: dashboard.state()["polls"] >= 2
                 and len(dashboard.state()["history"]) == 2, what="the page charting 2 peers")
        assert page.text_content("#role") == f"LEADER {leader.node_id}"
        assert page.text_content("#epoch-label") == "term"
        assert page.text_content("#epoch") == str(leader.dledger()["term"])
        assert sorted(row[0] for row in dashboard.rows()) == sorted([paused.node_id,
                                                                     other.node_id])

        _pause(paused, True)
        try:
            statuses = _burst(leader.url, "UiDLedgerBurst")
            assert statuses == [201] * BURST_MESSAGES, statuses
            wait_for(lambda: dashboard.state()["history"][paused.node_id][-1]["diff"] > 0,
                     what=f"{paused.node_id}'s lag above 0 on the chart")
        finally:
            _pause(paused, False)

        wait_for(lambda: _fell_back_to_zero(dashboard.state()["history"][paused.node_id]),
                 timeout_s=30, what=f"{paused.node_id}'s lag back at 0 on the chart")
        wait_for(lambda: [paused.node_id, "0", "yes"] in
                 [[row[0], row[4], row[5]] for row in dashboard.rows()],
                 what=f"{paused.node_id}'s row at lag 0, in sync")
        wait_for(lambda: page.text_content("#in-sync") == "2 / 1 needed",
                 what="both peers in sync, of the 1 a quorum needs")
        assert page.locator("#diff-chart polyline").count() == 2
        dashboard.finish("ui-dashboard-dledger.png")

        dashboard.open(other.url)
        wait_for(lambda: dashboard.state()["polls"] >= 1, what="the follower's page polling")
        assert page.text_content("#role") == f"FOLLOWER {other.node_id} (leader {leader.node_id})"
        assert sorted(dashboard.rows()) == sorted(
            [[f"{leader.node_id} (leader)", f"127.0.0.1:{leader.dledger_port}", "-", "-", "-",
              "-"], [paused.node_id, f"127.0.0.1:{paused.dledger_port}", "-", "-", "-", "-"]])
        assert dashboard.state()["history"] == {}
        dashboard.finish("ui-dashboard-dledger-follower.png")


def _facts(page: Any, table: str) -> dict[str, str]:
    """A panel's label/value rows."""
    rows: list[list[str]] = page.eval_on_selector_all(
        f"#{table} tbody tr", "rows => rows.map((row) => [row.cells[0].textContent, "
                              "row.cells[1].textContent])")
    return dict(rows)


def test_dashboard_time_axis_legend_panels_and_empty_tables(launch: Launcher) -> None:
    """On a fresh SYNC_MASTER with its slave: the chart's x axis is the last five minutes with
    a labelled tick (HH:MM) at each minute, and each sample sits at its own time (the page's
    few seconds fill the right end only, not the width); the y axis of an all-zero diff runs
    from 0 B to 1 KiB in labelled ticks; the legend is a list under the chart, nothing of it
    inside; the readiness, disk and offsets panels show the broker's values; the empty lag and
    topic tables say they are empty."""
    master = launch("ui-master", "SYNC_MASTER")
    launch("ui-slave", "SLAVE", master=master)
    wait_for(lambda: caught_up(master), what="the slave connected")
    with _dashboard() as dashboard:
        page = dashboard.page
        dashboard.open(master.url)
        wait_for(lambda: dashboard.state()["polls"] >= 5
                 and len(next(iter(dashboard.state()["history"].values()), [])) >= 5,
                 what="the page charting the slave")
        state = dashboard.state()
        chart = state["chart"]
        plot = chart["plot"]
        width = plot["right"] - plot["left"]

        ticks = chart["xTicks"]
        assert len(ticks) in (5, 6), ticks
        assert [tick["label"] for tick in ticks] == page.eval_on_selector_all(
            "#diff-chart text.x-tick", "ticks => ticks.map((tick) => tick.textContent)")
        for tick in ticks:
            assert re.fullmatch(r"\d\d:\d\d", tick["label"]), tick
            assert tick["t"] % 60_000 == 0 and chart["from"] <= tick["t"] <= chart["now"]
            assert tick["x"] == pytest.approx(
                plot["left"] + width * (tick["t"] - chart["from"]) / 300_000)

        ((slave_id, samples),) = state["history"].items()
        points = chart["series"][slave_id]
        assert len(points) == len(samples)
        for (x, _), sample in zip(points, samples, strict=True):
            assert x == pytest.approx(plot["left"] + width * (sample["t"] - chart["from"])
                                      / 300_000)
        span_s = (samples[-1]["t"] - samples[0]["t"]) / 1000
        assert points[-1][0] - points[0][0] == pytest.approx(width * span_s / 300, abs=1)
        assert points[0][0] > plot["left"] + 0.8 * width, "the samples are stretched"

        assert max(_diffs(state)) == 0
        assert chart["yTop"] == 1024
        assert [tick["label"] for tick in chart["yTicks"]] == [
            "0 B", "256 B", "512 B", "768 B", "1 KiB"]
        assert page.eval_on_selector_all(
            "#diff-chart text.y-tick", "ticks => ticks.map((tick) => tick.textContent)") == [
            "0 B", "256 B", "512 B", "768 B", "1 KiB"]

        assert page.eval_on_selector_all("#legend li", "items => items.map((i) => "
                                                       "i.textContent)") == [slave_id]
        assert slave_id not in (page.text_content("#diff-chart") or "")
        chart_box = page.locator("#diff-chart").bounding_box()
        legend_box = page.locator("#legend").bounding_box()
        assert chart_box is not None and legend_box is not None
        assert legend_box["y"] >= chart_box["y"] + chart_box["height"]

        store = master.get_json("/admin/store")
        wait_for(lambda: _facts(page, "readiness").get("ready") == "yes",
                 what="the readiness panel")
        readiness = _facts(page, "readiness")
        assert readiness["state"] == "RUNNING" and readiness["role"] == "SYNC_MASTER"
        disk = _facts(page, "disk")
        assert re.fullmatch(r"[\d.]+ (B|KiB|MiB|GiB)", disk["data dir on disk"]), disk
        assert re.fullmatch(r"[\d.]+ %", disk["filesystem used"]), disk
        assert disk["commit-log files"] == "none yet"  # the first put makes the first
        offsets = _facts(page, "offsets")
        assert offsets["max offset"] == str(store["max_offset"])
        assert offsets["min offset"] == "0" and offsets["failed queues"] == "0"

        assert page.text_content("#lag tbody td.empty") == (
            "No consumer group yet: lag shows once a group exists or commits an offset.")
        assert page.text_content("#topics tbody td.empty") == "No topic yet."
        dashboard.finish("ui-dashboard-panels.png")
