"""When schedules fire: cron expressions (the `cronsim` library) in a time zone, or fixed
intervals from the schedule's creation; all in epoch milliseconds of the daemon's clock.

Must not: read the wall clock (callers pass the clock's `now_ms`).
"""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from corral_server import errors
from corral_server.domain.schedules import Timing

MIN_INTERVAL_MS = 10_000
MAX_INTERVAL_MS = 366 * 86_400_000
MAX_CRON_CHARS = 256
MAX_ZONE_CHARS = 64
# A catch-up counts the firings it stands for up to this many.
MAX_COUNTED_MISSES = 10_000


def check_timing(timing: Timing, now_ms: int) -> None:
    """INVALID_ARGUMENT naming the field for a timing that cannot fire."""
    if bool(timing.cron) == bool(timing.interval_ms):
        raise errors.InvalidArgument.field("cron", "give exactly one of cron and interval")
    if timing.interval_ms and not MIN_INTERVAL_MS <= timing.interval_ms <= MAX_INTERVAL_MS:
        raise errors.InvalidArgument.field("interval", "from 10 s to 366 days")
    if len(timing.time_zone) > MAX_ZONE_CHARS:
        raise errors.InvalidArgument.field("time_zone", f"at most {MAX_ZONE_CHARS} characters")
    zone(timing.time_zone)
    if timing.cron:
        if len(timing.cron) > MAX_CRON_CHARS:
            raise errors.InvalidArgument.field("cron", f"at most {MAX_CRON_CHARS} characters")
        if next_after(timing, now_ms, now_ms) is None:
            raise errors.InvalidArgument.field("cron", f"{timing.cron!r} never fires")


def zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise errors.InvalidArgument.field(
            "time_zone", f"{name!r} is no IANA time zone (e.g. UTC, Europe/Paris)"
        ) from exc


def next_after(timing: Timing, created_ms: int, after_ms: int) -> int | None:
    """The first firing strictly after `after_ms` (None: a cron that never fires)."""
    if timing.interval_ms:
        steps = max(0, (after_ms - created_ms) // timing.interval_ms + 1)
        return created_ms + steps * timing.interval_ms
    start = datetime.fromtimestamp(after_ms / 1000, zone(timing.time_zone))
    try:
        fire = next(CronSim(timing.cron, start))
    except CronSimError as exc:
        raise errors.InvalidArgument.field("cron", f"{timing.cron!r}: {exc}") from exc
    except StopIteration:
        return None
    return int(fire.timestamp() * 1000)


def firings_between(timing: Timing, created_ms: int, first_ms: int, now_ms: int) -> int:
    """How many firings fall in [first_ms, now_ms] (first_ms being one), at most
    MAX_COUNTED_MISSES."""
    count = 0
    due: int | None = first_ms
    while due is not None and due <= now_ms and count < MAX_COUNTED_MISSES:
        count += 1
        due = next_after(timing, created_ms, due)
    return count
