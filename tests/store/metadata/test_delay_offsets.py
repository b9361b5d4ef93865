"""Delay offset repository and the RocketMQ delay levels."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine

from store.metadata import (
    DELAY_LEVEL_MAX,
    DELAY_LEVEL_NAMES,
    InvalidDelayLevel,
    InvalidOffset,
    MetadataTable,
    delay_level_duration_ms,
    get_data_version,
    get_delay_offset,
    list_delay_offsets,
    set_delay_offset,
    set_delay_offsets,
)
from tests.support.metadata import FakeClock, database_snapshot


def test_delay_levels_are_rocketmqs() -> None:
    """Levels 1..18 are RocketMQ's default `1s 5s ... 1h 2h` with their durations."""
    assert " ".join(DELAY_LEVEL_NAMES) == (
        "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
    )
    assert DELAY_LEVEL_MAX == 18
    assert delay_level_duration_ms(1) == 1_000
    assert delay_level_duration_ms(5) == 60_000
    assert delay_level_duration_ms(18) == 7_200_000


def test_set_get_and_list_delay_offsets(engine: Engine, clock: FakeClock) -> None:
    """Stored delay offsets read back by level and as a list ordered by level."""
    assert get_delay_offset(engine=engine, delay_level=3) is None
    assert set_delay_offsets(engine=engine, offsets={3: 30, 1: 10}, now_ms=clock()) == 2
    assert get_delay_offset(engine=engine, delay_level=3) == 30
    assert [(o.delay_level, o.queue_offset) for o in list_delay_offsets(engine=engine)] == [
        (1, 10),
        (3, 30),
    ]


def test_delay_version_bumps_on_change_only(engine: Engine, clock: FakeClock) -> None:
    """A batch bumps the delay version once; the same offsets again do not bump it."""
    table = MetadataTable.DELAY_OFFSET
    set_delay_offsets(engine=engine, offsets={1: 1, 2: 2}, now_ms=clock.advance())
    assert get_data_version(engine=engine, table=table).counter == 1
    assert not set_delay_offset(engine=engine, delay_level=1, queue_offset=1, now_ms=clock())
    assert get_data_version(engine=engine, table=table).counter == 1
    # Delay offsets may move back: the schedule service owns them, there is no reset path.
    assert set_delay_offset(engine=engine, delay_level=2, queue_offset=0, now_ms=clock.advance())
    version = get_data_version(engine=engine, table=table)
    assert (version.counter, version.timestamp_ms) == (2, clock())


@pytest.mark.parametrize(
    ("offsets", "error"),
    [
        ({0: 1}, InvalidDelayLevel),
        ({19: 1}, InvalidDelayLevel),
        ({1: 5, 2: -1}, InvalidOffset),
    ],
)
def test_bad_delay_input_is_refused(
    engine: Engine, clock: FakeClock, offsets: dict[int, int], error: type[Exception]
) -> None:
    """Levels outside 1..18 and negative offsets raise clear errors; no part of a batch is kept."""
    before = database_snapshot(engine)
    with pytest.raises(error):
        set_delay_offsets(engine=engine, offsets=offsets, now_ms=clock())
    with pytest.raises(InvalidDelayLevel, match="between 1 and 18"):
        get_delay_offset(engine=engine, delay_level=0)
    assert database_snapshot(engine) == before
