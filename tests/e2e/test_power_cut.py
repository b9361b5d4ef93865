"""A power cut under a real SYNC_FLUSH broker process: its files are cut back to what its
msyncs and checkpoint writes made durable (tests/support/power.py, fed by a journal the broker
keeps through the durability seam), then it restarts on them."""

from __future__ import annotations

import os
import random
import signal
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.brokers import FAST_SETTINGS, BrokerProcess, wait_for
from tests.support.power import DurableImage, replay
from tests.support.processes import pause

pytestmark = pytest.mark.processes

TOPIC = "Power"
QUEUES = 4
FILE_SIZE_BYTES = 256 * 1024
PRODUCERS = 6
# Load runs until this many puts were acknowledged and the log rolled this many files.
ACKED_MIN = 600
FILES_MIN = 4
LOAD_TIMEOUT_S = 60.0
# A slow disk (see DurabilityJournal): the group commit lags, puts wait, kills land mid-sync.
SYNC_DELAY_MS = 20


class Producers:
    """Threads posting single messages and small batches until stopped or refused; every
    201 result is kept by body."""

    def __init__(self, url: str, seed: int) -> None:
        self.acked: dict[str, dict[str, Any]] = {}
        self._url = url
        self._seed = seed
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(index,), daemon=True)
                         for index in range(PRODUCERS)]

    def __enter__(self) -> Producers:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=30)
            assert not thread.is_alive(), "a producer did not stop"

    @property
    def acked_count(self) -> int:
        with self._lock:
            return len(self.acked)

    def _run(self, index: int) -> None:
        chooser = random.Random(self._seed * 100 + index)
        with httpx.Client(base_url=self._url, timeout=10.0) as client:
            sequence = 0
            while not self._stop.is_set():
                bodies = [f"p{index}-{sequence + n}-" + "x" * chooser.randrange(100, 6000)
                          for n in range(chooser.choice([1, 1, 1, 3, 5]))]
                sequence += len(bodies)
                try:
                    results = self._post(client, bodies)
                except httpx.HTTPError:
                    return  # the broker is gone
                with self._lock:
                    self.acked.update((body, result) for body, result in zip(
                        bodies, results, strict=True) if result["http_status"] == 201)

    @staticmethod
    def _post(client: httpx.Client, bodies: list[str]) -> list[dict[str, Any]]:
        if len(bodies) == 1:
            response = client.post(f"/v1/topics/{TOPIC}/messages", json={"body": bodies[0]})
            return [response.json()] if response.status_code < 300 else []
        response = client.post(f"/v1/topics/{TOPIC}/messages:batch",
                               json={"messages": [{"body": body} for body in bodies]})
        results: list[dict[str, Any]] = response.json().get("results", [])
        return results if response.status_code < 300 else []


def _broker(root: Path, name: str, data_dir: Path, entry_point: list[str]) -> BrokerProcess:
    settings = {**FAST_SETTINGS, "mapped_file_size_bytes": FILE_SIZE_BYTES,
                "default_queue_count": QUEUES}
    arguments = ["--role", "ASYNC_MASTER", "--flush-disk-type", "SYNC_FLUSH",
                 "--data-dir", str(data_dir)]
    for key, value in settings.items():
        arguments += ["--set", f"{key}={value}"]
    environment = {key: value for key, value in os.environ.items()
                   if not key.startswith("TWINLOG_")}
    return BrokerProcess(name, "ASYNC_MASTER", data_dir, arguments, environment,
                         root / f"{name}.log", entry_point=entry_point)


def _kill_with_unsynced_log(broker: BrokerProcess, journal: Path) -> None:
    """Freeze the broker (SIGSTOP) at a moment its commit log holds bytes it has not msynced,
    then kill it: the cut then drops a log tail too, not only consume-queue pages."""
    assert broker.process is not None
    pid = broker.process.pid

    def frozen_with_unsynced_log() -> bool:
        pause(pid)
        image = DurableImage()
        replay(journal, image)
        if image.unsynced_page_count((broker.data_dir / "commitlog").iterdir()):
            return True
        os.kill(pid, signal.SIGCONT)
        return False

    wait_for(frozen_with_unsynced_log, LOAD_TIMEOUT_S, "unsynced commit-log bytes")
    os.kill(pid, signal.SIGKILL)
    broker.process.wait(30)


def _read_queue(broker: BrokerProcess, queue_id: int) -> list[dict[str, Any]]:
    """Every message of one queue, checked to sit at consecutive queue offsets."""
    messages: list[dict[str, Any]] = []
    offset = 0
    while True:
        page = broker.get_json(f"/v1/topics/{TOPIC}/queues/{queue_id}/messages", offset=offset,
                               max_messages=1024, body_encoding="utf8")
        if not messages:
            offset = page["min_offset"]
        for message in page["messages"]:
            assert (message["queue_id"], message["queue_offset"]) == (queue_id, offset), (
                f"queue {queue_id}: entry {offset} is missing or points at another record")
            messages.append(message)
            offset += 1
        if not page["messages"]:
            assert offset == page["max_offset"], (
                f"queue {queue_id}: entries stop at {offset}, the queue says {page['max_offset']}")
            return messages


def _check_log_tiles(messages: list[dict[str, Any]], min_offset: int, max_offset: int) -> None:
    """The queues' records cover the log with no gap (a gap only for a file's blank end) and
    end exactly at the log's end: every record is in its queue, the log ends on a boundary.
    The log may also end at the next file's start, when the cut kept the blank that closed
    the last record's file but nothing after it (recovery moves past a blank only)."""

    def next_file(offset: int) -> int:
        return offset - offset % FILE_SIZE_BYTES + FILE_SIZE_BYTES

    position = min_offset
    for message in sorted(messages, key=lambda m: m["commit_log_offset"]):
        offset = message["commit_log_offset"]
        assert offset == position or (offset == next_file(position) and position > min_offset), (
            f"the log has bytes at {position} that no queue entry accounts for (next {offset})")
        position = offset + message["size_bytes"]
    ends_after_blank = max_offset == next_file(position) and position > min_offset
    assert max_offset == position or ends_after_blank, (
        f"the log ends at {max_offset}, its last record at {position}")


@pytest.mark.parametrize(("keep_ratio", "seed"), [(0.0, 1), (0.5, 2)],
                         ids=["drop-every-unsynced-page", "keep-half-the-unsynced-pages"])
def test_sync_flush_broker_keeps_every_201_through_a_power_cut(
    tmp_path: Path, keep_ratio: float, seed: int
) -> None:
    """After a power cut under produce load, a restarted SYNC_FLUSH broker serves every
    message it answered 201, its log ends on a record boundary and every record of the log is
    in its queue at its offset."""
    data_dir, journal = tmp_path / "data", tmp_path / "durability.journal"
    broker = _broker(tmp_path, "power", data_dir,
                     ["-m", "tests.support.power_broker", str(journal), str(SYNC_DELAY_MS)])
    restarted: BrokerProcess | None = None
    try:
        broker.start()
        # The topic first: its creation is a metadata record (store/system_topics.py), at the
        # log's start, in no client queue; the client records tile the log after it.
        created = broker.client.post("/v1/topics", json={"name": TOPIC, "read_queue_count": QUEUES,
                                                         "write_queue_count": QUEUES})
        assert created.status_code == 201, created.text
        metadata_end = broker.get_json("/admin/store")["max_offset"]
        with Producers(broker.url, seed) as producers:
            wait_for(lambda: producers.acked_count >= ACKED_MIN
                     and len(list((data_dir / "commitlog").iterdir())) >= FILES_MIN,
                     LOAD_TIMEOUT_S, "produce load")
            _kill_with_unsynced_log(broker, journal)  # mid-load: puts are in flight
        image = DurableImage()
        events = replay(journal, image)
        chooser = random.Random(seed)
        report = image.cut(data_dir, lambda _path, _page: chooser.random() < keep_ratio)
        log_dirty, log_dropped = (
            sum(len(pages) for path, pages in found.items() if path.parent.name == "commitlog")
            for found in (report.dirty_pages, report.dropped_pages))
        print(f"\n{len(producers.acked)} puts answered 201; {events} durability events; "
              f"{report.dirty_page_count} pages unsynced at the kill ({log_dirty} of the "
              f"commit log), {report.dropped_page_count} dropped ({log_dropped} of the log)")
        assert log_dirty > 0, "no commit-log page was unsynced at the kill"
        restarted = _broker(tmp_path, "restarted", data_dir, ["-m", "app.cli.main"]).start()
        assert restarted.get_json("/admin/broker")["recovery"]["crashed"]
        store = restarted.get_json("/admin/store")
        messages = [m for q in range(QUEUES) for m in _read_queue(restarted, q)]
        stored = {m["body"]: m for m in messages}
        for body, acked in producers.acked.items():
            assert body in stored, f"a 201 message is gone: {acked}"
            kept = stored[body]
            assert (kept["queue_id"], kept["queue_offset"], kept["commit_log_offset"]) == (
                acked["queue_id"], acked["queue_offset"], acked["commit_log_offset"])
        _check_log_tiles(messages, max(store["min_offset"], metadata_end), store["max_offset"])
    finally:
        for process in (broker, restarted):
            if process is not None:
                process.stop()
                process.client.close()
