"""When the hub releases buffered events to its subscribers' readers.

Owns: the flush schedule. Each release costs one stream write per subscriber that has
something new, and a stream write costs far more than appending an event to a buffer
(measured on the P7 bench, 2 cores: ~40 us of daemon CPU per write, grpc.aio's send and its
completion, against well under 1 us to hand an event to a buffer). So under load the hub
releases at most `writes_per_s / live subscribers` times a second: writes grow with time, not
with events, and each write carries more events. When the last release is older than that
interval (a quiet daemon), a release happens at once, so an idle stream adds no latency.

Must not: delay a release by more than one interval, or hold events back from a reader that
is catching up or ending (only LIVE buffers are paced); it never waits: it schedules.
"""

from __future__ import annotations

from collections.abc import Callable

from corral_server.clock import Clock, SystemClock, TimerHandle

# The daemon's default budget (app.Config.subscriber_writes_per_s): at ~40 us a write, about
# a tenth of a core. 100 subscribers then get a write every 40 ms, 10 every 4 ms (measured on
# the P7 bench: 5,000/s gave 0.55x daemon CPU per turn, 2,500/s 0.67x; BENCHMARKS.md, P7).
SUBSCRIBER_WRITES_PER_S = 2_500

# The longest a paced release waits, however many subscribers share the budget: a daemon
# with thousands of subscribers spends more CPU on writes rather than leave every stream
# further behind than a UI frame or three.
MAX_INTERVAL_MS = 50.0


class Pacer:
    """Calls `release` now or schedules it, given how many subscribers are live."""

    __slots__ = ("_clock", "_last_ms", "_ms_per_write", "_release", "_timer")

    def __init__(
        self, release: Callable[[], None], writes_per_s: int | None, clock: Clock | None
    ) -> None:
        """`writes_per_s` None: release at every call (no pacing)."""
        if writes_per_s is not None and writes_per_s < 1:
            raise ValueError("writes_per_s must be positive")
        self._release = release
        self._clock: Clock = clock or SystemClock()
        self._ms_per_write = 0.0 if writes_per_s is None else 1000 / writes_per_s
        # When the last release ran (clock ms); far in the past before the first.
        self._last_ms = -1 << 62
        self._timer: TimerHandle | None = None

    @property
    def scheduled(self) -> bool:
        """A release is scheduled (for tests: the hub only calls `request`)."""
        return self._timer is not None

    def request(self, live: int) -> None:
        """Something is owed to readers: release now if the last release is at least one
        interval old, else make sure one is scheduled for when it will be."""
        if self._timer is not None:
            return
        if self._ms_per_write:
            interval = min(MAX_INTERVAL_MS, live * self._ms_per_write)
            now = self._clock.now_ms()
            wait_ms = self._last_ms + interval - now
            if wait_ms > 0:
                self._timer = self._clock.call_later(wait_ms / 1000, self._fire)
                return
            self._last_ms = now
        self._release()

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _fire(self) -> None:
        self._timer = None
        self._last_ms = self._clock.now_ms()
        self._release()
