"""Waiting on the manager's clock: timeouts that tests drive with a FakeClock."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import TypeVar

from corral_server.clock import Clock
from corral_server.manager.actor import AgentActor

log = logging.getLogger(__name__)
T = TypeVar("T")


async def within(clock: Clock, seconds: float, awaitable: Awaitable[T]) -> T | None:
    """The result of `awaitable`, or None when `seconds` pass first on `clock` (then the
    awaitable is canceled; wrap it in `asyncio.shield` to keep it running)."""
    task = asyncio.ensure_future(awaitable)
    timer = asyncio.ensure_future(clock.sleep(seconds))
    try:
        await asyncio.wait({task, timer}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        timer.cancel()
    if task.done():
        return task.result()
    task.cancel()
    return None


async def confirmed_interrupt(actor: AgentActor) -> bool:
    """Outside the actor's queue on purpose: a provider that hangs on interrupt must not
    stall the agent's writer. An error counts as "not confirmed"."""
    try:
        return await actor.interrupt()
    except Exception:
        log.exception("agent %s: interrupt failed", actor.agent.id)
        return False
