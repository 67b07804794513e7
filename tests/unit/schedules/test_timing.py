"""Schedule timing without a daemon: cron expressions in a time zone across a daylight saving
change, intervals from the creation, missed firings counted with a cap, bad timings refused."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from corral_server import errors
from corral_server.domain.schedules import Timing
from corral_server.schedules.timing import (
    MAX_COUNTED_MISSES,
    check_timing,
    firings_between,
    next_after,
)


def ms(year: int, month: int, day: int, hour: int = 0) -> int:
    return int(datetime(year, month, day, hour, tzinfo=UTC).timestamp() * 1000)


def test_nine_in_paris_is_eight_utc_in_winter_and_seven_in_summer() -> None:
    paris = Timing(cron="0 9 * * *", time_zone="Europe/Paris")
    assert next_after(paris, 0, ms(2026, 3, 28, 12)) == ms(2026, 3, 29, 7)  # the change's day
    assert next_after(paris, 0, ms(2026, 3, 27, 12)) == ms(2026, 3, 28, 8)


def test_an_interval_fires_from_the_creation_strictly_after_the_time_given() -> None:
    every = Timing(interval_ms=60_000)
    assert next_after(every, 1_000, 1_000) == 61_000
    assert next_after(every, 1_000, 61_000) == 121_000
    assert firings_between(every, 1_000, 61_000, 61_000 + 4 * 60_000) == 5


def test_missed_firings_are_counted_up_to_the_cap() -> None:
    every = Timing(interval_ms=10_000)
    assert firings_between(every, 0, 10_000, 10**12) == MAX_COUNTED_MISSES


@pytest.mark.parametrize(
    ("timing", "field"),
    [
        (Timing(cron="0 25 * * *"), "cron"),
        (Timing(cron="* * *"), "cron"),
        (Timing(), "cron"),
        (Timing(cron="* * * * *", interval_ms=60_000), "cron"),
        (Timing(interval_ms=5_000), "interval"),
        (Timing(cron="* * * * *", time_zone="Nowhere/Else"), "time_zone"),
    ],
)
def test_timings_that_cannot_fire_are_refused_naming_the_field(timing: Timing, field: str) -> None:
    with pytest.raises(errors.InvalidArgument) as refused:
        check_timing(timing, ms(2026, 1, 1))
    assert [v.field for v in refused.value.violations] == [field]
