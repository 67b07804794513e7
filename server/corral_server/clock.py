"""Time, injectable. Production uses `SystemClock`; tests use `FakeClock` and advance it, so
grace periods and windows are tested in milliseconds of wall time, never with real sleeps.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import threading
import time
from collections.abc import Callable
from typing import Protocol


class TimerHandle(Protocol):
    def cancel(self) -> None: ...


class Clock(Protocol):
    def now_ms(self) -> int:
        """Wall-clock milliseconds since the Unix epoch."""
        ...

    async def sleep(self, seconds: float) -> None: ...

    def call_later(self, seconds: float, callback: Callable[[], None]) -> TimerHandle: ...


class SystemClock:
    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    def call_later(self, seconds: float, callback: Callable[[], None]) -> TimerHandle:
        return asyncio.get_running_loop().call_later(seconds, callback)


class _FakeTimer:
    __slots__ = ("callback", "canceled")

    def __init__(self, callback: Callable[[], None]) -> None:
        self.callback = callback
        self.canceled = False

    def cancel(self) -> None:
        self.canceled = True


class FakeClock:
    """A clock that moves only when told. `advance` fires due timers and wakes due sleepers
    in deadline order, letting the event loop run between them."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self._now_ms = start_ms
        self._timers: list[tuple[int, int, _FakeTimer]] = []
        self._ids = itertools.count()
        # Lets a test on another thread wait until the code under test armed its timers.
        self._armed = threading.Condition()

    def now_ms(self) -> int:
        return self._now_ms

    def call_later(self, seconds: float, callback: Callable[[], None]) -> TimerHandle:
        timer = _FakeTimer(callback)
        due = self._now_ms + max(0, round(seconds * 1000))
        with self._armed:
            heapq.heappush(self._timers, (due, next(self._ids), timer))
            self._armed.notify_all()
        return timer

    async def sleep(self, seconds: float) -> None:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()

        def wake() -> None:
            if not done.done():
                done.set_result(None)

        timer = self.call_later(seconds, wake)
        try:
            await done
        finally:
            timer.cancel()

    @property
    def pending_timers(self) -> int:
        return sum(1 for _, _, t in self._timers if not t.canceled)

    def wait_for_timer(self, due_in_ms: int, timeout_s: float = 30.0) -> None:
        """Block this thread until a pending timer falls due exactly `due_in_ms` from now (for
        tests whose clock runs on another thread's loop: "the code under test has armed its
        10 s wait", whatever other timers exist)."""

        def armed() -> bool:
            due = self._now_ms + due_in_ms
            return any(d == due and not t.canceled for d, _, t in self._timers)

        with self._armed:
            if not self._armed.wait_for(armed, timeout_s):
                raise TimeoutError(f"no timer due in {due_in_ms} ms was armed")

    async def advance(self, ms: int) -> None:
        """Move time forward by `ms`, firing every timer that falls due on the way."""
        target = self._now_ms + ms
        while self._timers and self._timers[0][0] <= target:
            due, _, timer = heapq.heappop(self._timers)
            self._now_ms = max(self._now_ms, due)
            if not timer.canceled:
                timer.callback()
                await _settle()
        self._now_ms = target
        await _settle()


async def _settle(rounds: int = 5) -> None:
    """Let woken tasks run a few loop iterations."""
    for _ in range(rounds):
        await asyncio.sleep(0)
