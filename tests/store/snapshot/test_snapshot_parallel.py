"""The export's reading budget (a fake clock: no sleep) and the export spread over worker
processes, which writes the serial export's records and stops where it stops."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

import store.snapshot.parallel as parallel
from store import Message, MessageStore
from store.record import StoredMessage
from store.snapshot import ExportRequest, export_snapshot
from store.snapshot.log_reader import iter_records, list_log_files, log_range
from store.snapshot.throttle import Throttle
from tests.store.snapshot.test_snapshot_export import (
    _corrupt_body,
    _corrupt_physical_offset,
    _exported_rows,
)

OpenStore = Callable[..., MessageStore]
FILE_BYTES = 256 * 1024
SEGMENT_BYTES = 20_000  # a dozen segments a file: most start at a header found by search


class FakeClock:
    def __init__(self) -> None:
        self.now_s = 100.0
        self.sleeps_s: list[float] = []

    def __call__(self) -> float:
        return self.now_s

    def sleep(self, duration_s: float) -> None:
        self.sleeps_s.append(duration_s)
        self.now_s += duration_s


def test_throttle_waits_only_when_ahead_of_the_budget() -> None:
    """At 1000 B/s, 500 bytes read at once wait 0.5 s; time that passed meanwhile counts
    toward the budget; no budget never waits."""
    clock = FakeClock()
    throttle = Throttle(1000, clock, clock.sleep)
    throttle.spend(500)
    throttle.spend(500)
    assert clock.sleeps_s == [0.5, 0.5]
    clock.now_s += 2.0  # the export fell behind: it may read 2000 bytes without waiting
    throttle.spend(1500)
    assert clock.sleeps_s == [0.5, 0.5]
    throttle.spend(1000)
    assert clock.sleeps_s == [0.5, 0.5, pytest.approx(0.5)]
    unlimited = Throttle(0, clock, clock.sleep)
    unlimited.spend(10**9)
    assert len(clock.sleeps_s) == 3


def _produce(store: MessageStore, count: int) -> None:
    for index in range(count):
        store.put_message(Message(f"Par{index % 3}", bytes([index % 251]) * (200 + index % 900),
                                  {"KEYS": f"k{index % 11}"}))


def _log(open_store: OpenStore, data_dir: Path, count: int) -> None:
    store = open_store(data_dir=data_dir, mapped_file_size_bytes=FILE_BYTES)
    _produce(store, count)
    store.shutdown()


def test_export_with_a_budget_waits_for_every_byte(open_store: OpenStore,
                                                   tmp_path: Path) -> None:
    """With a budget of 100 kB/s and a clock that moves only when the export waits, the
    export waits window by window, (range bytes) / budget in all, and writes what it writes
    without a budget."""
    _log(open_store, tmp_path / "data", 600)
    clock = FakeClock()
    paced = export_snapshot(ExportRequest(tmp_path / "data", tmp_path / "paced",
                                          bytes_per_s=100_000, clock=clock,
                                          sleep=clock.sleep))
    assert len(clock.sleeps_s) > 2
    assert sum(clock.sleeps_s) == pytest.approx(
        (paced.range_to - paced.range_from) / 100_000)
    export_snapshot(ExportRequest(tmp_path / "data", tmp_path / "free"))
    assert _exported_rows(tmp_path / "paced") == _exported_rows(tmp_path / "free")


def test_parallel_export_writes_the_serial_records(open_store: OpenStore, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Two worker processes over segments of 20 kB (a range that starts and ends mid-file)
    write exactly the serial export's rows, range and per-topic counts."""
    monkeypatch.setattr(parallel, "SEGMENT_BYTES", SEGMENT_BYTES)
    _log(open_store, tmp_path / "data", 1500)
    files = list_log_files(tmp_path / "data" / "commitlog")
    assert len(files) >= 3
    records = list(iter_records(files, *log_range(files)))
    range_from, range_to = records[7].commit_log_offset, records[-5].commit_log_offset
    request = {"range_from": range_from, "range_to": range_to}
    serial = export_snapshot(ExportRequest(tmp_path / "data", tmp_path / "serial", **request))
    spread = export_snapshot(ExportRequest(tmp_path / "data", tmp_path / "spread", workers=2,
                                           **request))
    assert (spread.range_from, spread.range_to, spread.message_count, spread.topics) == (
        serial.range_from, serial.range_to, serial.message_count, serial.topics)
    assert spread.message_count == len(records) - 12
    parts = list((tmp_path / "spread").rglob("part-s*.parquet"))
    assert len({part.name.split("-")[1] for part in parts}) > 10  # written by segments
    assert _exported_rows(tmp_path / "spread") == _exported_rows(tmp_path / "serial")


@pytest.mark.parametrize("corrupt", [_corrupt_body, _corrupt_physical_offset])
@pytest.mark.parametrize("where", ["a segment's first record", "mid-segment"])
def test_parallel_export_stops_at_a_corrupt_record_like_the_serial(
        open_store: OpenStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str,
        corrupt: Callable[[bytearray, StoredMessage, int], None]) -> None:
    """A corrupt record in the second file (the first record of a segment, found by search,
    or one inside a segment) ends the parallel export just before it, as it ends the serial
    one: the later segments' records, written by the workers, are left out."""
    monkeypatch.setattr(parallel, "SEGMENT_BYTES", SEGMENT_BYTES)
    _log(open_store, tmp_path / "data", 1500)
    files = list_log_files(tmp_path / "data" / "commitlog")
    records = list(iter_records(files, *log_range(files)))
    boundary = files[1].start_offset + 3 * SEGMENT_BYTES
    first = next(i for i, r in enumerate(records) if r.commit_log_offset >= boundary)
    victim = records[first if where == "a segment's first record" else first + 4]
    raw = bytearray(files[1].path.read_bytes())
    corrupt(raw, victim, victim.commit_log_offset - files[1].start_offset)
    files[1].path.write_bytes(bytes(raw))
    serial = export_snapshot(ExportRequest(tmp_path / "data", tmp_path / "serial"))
    spread = export_snapshot(ExportRequest(tmp_path / "data", tmp_path / "spread", workers=2))
    assert serial.range_to == spread.range_to == victim.commit_log_offset
    assert _exported_rows(tmp_path / "spread") == _exported_rows(tmp_path / "serial")
    assert len(_exported_rows(tmp_path / "spread")) == records.index(victim)
