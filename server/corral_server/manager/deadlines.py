"""Waiting on the manager's clock: a result within a time limit, the first of several waits,
and provider calls under deadlines, timed (`CallTimes`). Tests drive them with a FakeClock, so
a 30 s deadline costs microseconds.

Must not: leave a task running once its caller has stopped waiting (the caller cancelled, or
the time ran out), or leave a task whose failure nobody retrieves.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from typing import Any, TypeVar

from corral_server import errors
from corral_server.clock import Clock
from corral_server.histogram import SECONDS_BOUNDS, Histogram

T = TypeVar("T")


class CallTimes:
    """How long provider calls took, by call (`deadline`'s `call`: create_session, start_turn,
    interrupt, close, ...), on the wall clock whatever the daemon's clock; a call that missed
    its deadline counts too, with the time until it was given up. One per manager, for its
    daemon's metrics: two daemons in one process time their calls apart. Added to on the loop
    only; read from the scrape's thread."""

    def __init__(self) -> None:
        self._by_call: dict[str, Histogram] = {}

    def took(self, call: str, seconds: float) -> None:
        histogram = self._by_call.get(call)
        if histogram is None:
            histogram = self._by_call[call] = Histogram(SECONDS_BOUNDS)
        histogram.add(seconds)

    def by_call(self) -> list[tuple[str, Histogram]]:
        """Each call's histogram, by name (a copy of the table: safe off the loop)."""
        return sorted(dict(self._by_call).items())


async def _race(clock: Clock, seconds: float, awaitable: Awaitable[T]) -> asyncio.Future[T] | None:
    """Run `awaitable` until it finishes or `seconds` pass on `clock`: its done future, or
    None when the time ran out (it is then cancelled). Cancelling the caller cancels it too."""
    task = asyncio.ensure_future(awaitable)
    timer = asyncio.ensure_future(clock.sleep(seconds))
    try:
        await asyncio.wait({task, timer}, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:
        task.cancel()
        task.add_done_callback(_retrieve)
        raise
    finally:
        timer.cancel()
    if not task.done():
        task.cancel()
        task.add_done_callback(_retrieve)
        return None
    return task


async def first_of(*waits: Awaitable[object]) -> None:
    """Until the first of `waits` finishes; the others are cancelled and have ended when this
    returns (or is cancelled)."""
    tasks = [asyncio.ensure_future(w) for w in waits]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _retrieve(task: asyncio.Future[Any]) -> None:
    """Nobody awaits an abandoned task: take its outcome so it is never reported unretrieved."""
    if not task.cancelled():
        task.exception()


async def within(clock: Clock, seconds: float, awaitable: Awaitable[T]) -> T | None:
    """The result of `awaitable`, or None when `seconds` pass first on `clock` (then the
    awaitable is cancelled; wrap it in `asyncio.shield` to keep it running)."""
    task = await _race(clock, seconds, awaitable)
    return None if task is None else task.result()


async def deadline(
    clock: Clock, seconds: float, awaitable: Awaitable[T], call: str, times: CallTimes
) -> T:
    """The result of provider call `call`, or ProviderTimeout when `seconds` pass first (the
    call is then cancelled); timed into `times` either way."""
    started = time.perf_counter()
    task = await _race(clock, seconds, awaitable)
    times.took(call, time.perf_counter() - started)
    if task is None:
        raise errors.ProviderTimeout(call, seconds)
    return task.result()
