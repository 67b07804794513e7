"""Callers waiting for a sub-agent run to end (`wait_for_subagent`), woken by the registry's
run changes instead of polling.

Told of every stored run change (the registry's publish hook, after the hub); a waiter's
timeout runs on the daemon's clock, so tests drive it with a FakeClock.

Must not: change a run, or keep a future after its waiter stopped waiting.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from corral_server.clock import Clock
from corral_server.domain.events import SubagentRunUpdated
from corral_server.domain.subagents import SubagentRun
from corral_server.manager.deadlines import within


class RunWaiters:
    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        # Run id -> the futures of callers waiting for it to end (set once it has ended).
        self._waiting: dict[str, set[asyncio.Future[None]]] = {}

    def notify(self, event: SubagentRunUpdated) -> None:
        """A run changed (its record is stored): wake whoever waits for it, once it ended."""
        if not event.run.ended:
            return
        for future in self._waiting.pop(event.run.run_id, ()):
            if not future.done():
                future.set_result(None)

    async def until_ended(
        self, run_id: str, timeout_s: float, get: Callable[[str], SubagentRun]
    ) -> SubagentRun:
        """The run once it has ended, or as it is when `timeout_s` passed on the clock."""
        run = get(run_id)
        if run.ended or timeout_s <= 0:
            return run
        # No await between the read above and this registration: an end cannot slip between.
        future = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(run_id, set()).add(future)
        try:
            await within(self._clock, timeout_s, future)
        finally:
            waiting = self._waiting.get(run_id)
            if waiting is not None:
                waiting.discard(future)
                if not waiting:
                    del self._waiting[run_id]
        return get(run_id)
