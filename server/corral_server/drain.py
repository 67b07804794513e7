"""The daemon's drain (SIGTERM, SIGINT): how it stops honestly for a load balancer in front,
bounded by the delay plus the grace.

1. Health goes NOT_SERVING for "" and every service.
2. Everything is still answered for the delay, waited on the daemon's clock, so balancers
   notice and send new calls elsewhere.
3. New work is refused: new turns and creates answer UNAVAILABLE / SHUTTING_DOWN, pending
   WaitForIdle calls end at once with SHUTTING_DOWN.
4. Every Subscribe stream ends with stream_ending (resume point and incarnation).
5. The agents shut down and the server stops, both within the grace.

`Drain` owns the order, the delay and running once; the daemon (app.py) gives it the steps,
since only it knows its parts.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from corral_server.clock import Clock
from corral_server.manager.deadlines import first_of

log = logging.getLogger(__name__)


class Drain:
    def __init__(
        self,
        clock: Clock,
        *,
        not_serving: Callable[[], Awaitable[None]],
        refuse_new_work: Callable[[], None],
        stop: Callable[[float], Awaitable[None]],
    ) -> None:
        self._clock = clock
        self._not_serving = not_serving  # step 1
        self._refuse_new_work = refuse_new_work  # steps 3 and 4
        self._stop = stop  # step 5, given the grace
        # The drain runs once; later calls await the same one. Setting `_skip_delay` ends its
        # delay early (a second signal, or a caller that asks for no delay).
        self._task: asyncio.Future[None] | None = None
        self._skip_delay = asyncio.Event()

    @property
    def started(self) -> bool:
        return self._task is not None

    async def run(self, grace_s: float, delay_s: float) -> None:
        """Drain, or await the drain already under way (a `delay_s` <= 0 cuts its delay)."""
        if delay_s <= 0:
            self._skip_delay.set()
        if self._task is None:
            self._task = asyncio.ensure_future(self._run(grace_s, delay_s))
        await asyncio.shield(self._task)

    def skip_delay(self) -> None:
        """End the delay now (a second SIGTERM)."""
        self._skip_delay.set()

    async def _run(self, grace_s: float, delay_s: float) -> None:
        await self._not_serving()
        log.info("draining: NOT_SERVING, still answering for %.1fs", delay_s)
        await self._hold(delay_s)
        self._refuse_new_work()
        await self._stop(grace_s)

    async def _hold(self, delay_s: float) -> None:
        """Wait `delay_s` on the daemon's clock, or until the delay is skipped."""
        if delay_s <= 0 or self._skip_delay.is_set():
            return
        await first_of(self._clock.sleep(delay_s), self._skip_delay.wait())
