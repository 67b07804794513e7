"""WaitForIdle: until an agent stops running, read from its snapshots (never through its
queue: a wait must not hold the single writer), woken by each change and by the drain.

Must not: change an agent.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import assert_never

from corral_server import errors
from corral_server.clock import Clock
from corral_server.domain.agent import Agent, Closed, Errored, Idle, Initializing, Running
from corral_server.manager.actor import AgentActor
from corral_server.manager.deadlines import first_of, within
from corral_server.manager.stopping import NewWork
from corral_server.manager.turns import WaitStatus

# WaitForIdle's longest wait; clients re-wait for longer.
MAX_WAIT_S = 24 * 3600.0


def check_wait(timeout_s: float | None) -> None:
    if timeout_s is not None and not 0 <= timeout_s <= MAX_WAIT_S:
        raise errors.InvalidArgument.field("timeout", f"from 0 to {MAX_WAIT_S:.0f} seconds")


async def wait_for_idle(
    actor: AgentActor,
    clock: Clock,
    timeout_s: float | None,
    new_work: NewWork,
) -> tuple[WaitStatus, Agent]:
    """IDLE, ERROR, PERMISSION (a pending permission), or TIMEOUT after `timeout_s` on
    `clock` (None: no limit); SHUTTING_DOWN once the drain begins."""
    check_wait(timeout_s)
    deadline_ms = None if timeout_s is None else clock.now_ms() + timeout_s * 1000
    while True:
        agent = actor.agent
        settled = _settled(agent)
        if settled is not None:
            return settled, agent
        new_work.check()
        remaining_s = None
        if deadline_ms is not None:
            remaining_s = (deadline_ms - clock.now_ms()) / 1000
            if remaining_s <= 0:
                return WaitStatus.TIMEOUT, actor.agent
        changed = first_of(actor.changed.wait(), new_work.refusing.wait())
        if remaining_s is None:
            await changed
            continue
        if not await within(clock, remaining_s, _true_after(changed)):
            return WaitStatus.TIMEOUT, actor.agent


def _settled(agent: Agent) -> WaitStatus | None:
    """What a wait answers for `agent` now (None: it still runs)."""
    if agent.pending_permissions:
        return WaitStatus.PERMISSION
    match agent.lifecycle:
        case Idle():
            return WaitStatus.IDLE
        case Errored():
            return WaitStatus.ERROR
        case Closed():
            raise errors.AgentClosed(agent.id)
        case Initializing() | Running():
            return None
        case _:
            assert_never(agent.lifecycle)


async def _true_after(wait: Awaitable[object]) -> bool:
    await wait
    return True
