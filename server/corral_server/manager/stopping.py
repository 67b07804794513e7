"""Stopping turns and agents, for the manager: CancelTurn's outcomes, the cancels of REPLACE
and of a reload, the refusal of new work, and by agent id (`Stopping`) the archive cascade,
close de-duplication and the bounded shutdown of every actor.

Each step is a call onto the agent's actor (or, for the interrupt, a fenced call off its
queue). Must not: change an agent's state itself.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field

from corral_server import errors
from corral_server.clock import Clock
from corral_server.domain.agent import Agent
from corral_server.jobs import done_with
from corral_server.manager.actor import AgentActor
from corral_server.manager.deadlines import within
from corral_server.manager.directory import AgentDirectory
from corral_server.manager.hooks import ManagerHooks
from corral_server.manager.specs import Timeouts
from corral_server.manager.turns import CancelOutcome


async def cancel(
    actor: AgentActor, clock: Clock, timeouts: Timeouts
) -> tuple[CancelOutcome, Agent]:
    """Never invent a cancel the provider did not confirm.

    1. Read the running turn on the agent's queue; none: NOT_RUNNING.
    2. Ask the provider to stop exactly that turn (fenced by its id, under the interrupt
       deadline). NOT_RUNNING: it ended by itself meanwhile, and a later turn is never
       touched.
    3. Wait for the turn to settle: it did -> SETTLED; it did not and the provider had
       confirmed -> end it ourselves, SETTLED; it did not and the provider had not
       confirmed -> REFUSED (the turn goes on).
    """
    active = await actor.call(lambda: done_with(actor.active_turn))
    if active is None:
        return CancelOutcome.NOT_RUNNING, actor.agent
    outcome = await actor.stop_turn(active)  # steps 2 and 3
    if outcome is CancelOutcome.NOT_RUNNING:
        # It ended by itself: answer with the snapshot after its end, as a settle would.
        await within(clock, timeouts.settle_s, asyncio.shield(active.settled))
    return outcome, actor.agent


async def cancel_for_replace(actor: AgentActor, clock: Clock, timeouts: Timeouts) -> None:
    """REPLACE: open a handoff (the agent keeps reporting Running), then cancel the running
    turn; a refused cancel closes the handoff and abandons the replace: the running turn
    goes on."""
    turn_id = await actor.call(lambda: done_with(actor.open_handoff()))
    if turn_id is None:
        return
    outcome, _ = await cancel(actor, clock, timeouts)
    if outcome is CancelOutcome.REFUSED:
        await actor.call(actor.close_handoff)
        raise errors.ProviderRefusedInterrupt(
            f"agent {actor.agent.id!r}: the provider refused to stop turn {turn_id!r}; "
            "the replace was abandoned and that turn goes on",
            metadata={"agent_id": actor.agent.id, "turn_id": turn_id},
        )


async def cancel_for_reload(actor: AgentActor, clock: Clock, timeouts: Timeouts) -> None:
    """A reload cancels the running turn first (docs/design.md#resume); a provider that
    refuses to stop it abandons the reload (PROVIDER_REFUSED_INTERRUPT) rather than forcing
    two turns onto one timeline."""
    if actor.active_turn is None:
        return
    outcome, _ = await cancel(actor, clock, timeouts)
    if outcome is CancelOutcome.REFUSED:
        raise errors.ProviderRefusedInterrupt(
            f"agent {actor.agent.id!r}: the provider refused to stop the running turn; "
            "the reload was abandoned",
            metadata={"agent_id": actor.agent.id},
        )


@dataclass(slots=True, eq=False)
class Stopping:
    """Archive, close and shutdown by agent id. Each agent an archive or a close leaves
    closed is told to `hooks.on_closed` (read at each call: app.py sets it after
    construction)."""

    directory: AgentDirectory
    new_work: NewWork
    clock: Clock
    shutdown_s: float
    hooks: ManagerHooks
    # One close of an agent at a time: concurrent ones await the same future.
    _closing: dict[str, asyncio.Future[Agent]] = field(default_factory=dict, init=False)

    async def archive(self, agent_id: str) -> list[str]:
        """Archive the agent and, by cascade, every descendant that still carries its parent
        label (a detached child is no longer one): each is marked archived and closed, kept
        whole, and hidden from ListAgents unless archived ones are asked for. Returns the ids
        archived, the agent first, then breadth first."""
        self.new_work.check()
        self.directory.actor(agent_id)
        members = self.directory.with_descendants(agent_id)
        if self.hooks.on_archive is not None:
            await self.hooks.on_archive(members)
        archived: list[str] = []
        for actor in [self.directory.actors[member] for member in members]:  # found up front
            if actor.agent.is_closed:
                actor.archive_closed()
            else:
                try:
                    await actor.call(actor.archive)
                except errors.AgentClosed:
                    actor.archive_closed()  # closed meanwhile
            self._told_closed(actor)
            archived.append(actor.agent.id)
        return archived

    async def close(self, agent_id: str) -> Agent:
        """Concurrent closes of one agent share one outcome."""
        actor = self.directory.actor(agent_id)
        pending = self._closing.get(agent_id)
        if pending is None:
            pending = asyncio.ensure_future(self._close(actor))
            self._closing[agent_id] = pending
        return await asyncio.shield(pending)

    async def _close(self, actor: AgentActor) -> Agent:
        try:
            return await actor.call(actor.close)
        except errors.AgentClosed:
            return actor.agent
        finally:
            self._closing.pop(actor.agent.id, None)
            self._told_closed(actor)

    def _told_closed(self, actor: AgentActor) -> None:
        if self.hooks.on_closed is not None and actor.agent.is_closed:
            self.hooks.on_closed(actor.agent.id)

    async def shutdown(self) -> None:
        """Refuse new work, then stop every actor through its queue (bounded by
        `shutdown_s`; records kept)."""
        self.new_work.refuse()
        actors = list(self.directory.actors.values())
        await shutdown_all(actors, self.clock, self.shutdown_s)


class NewWork:
    """Whether new work is still taken. The drain's first step refuses it: new turns and
    creates answer SHUTTING_DOWN from then on, and every WaitForIdle ends with it at once
    (woken by `refusing`)."""

    def __init__(self) -> None:
        self.refused = False
        self.refusing = asyncio.Event()

    def refuse(self) -> None:
        self.refused = True
        self.refusing.set()

    def is_refused(self) -> bool:
        return self.refused

    def check(self) -> None:
        if self.refused:
            raise errors.ShuttingDown()


async def shutdown_all(actors: Sequence[AgentActor], clock: Clock, shutdown_s: float) -> None:
    """Stop every actor through its queue (sessions closed under their deadlines, records
    kept). Bounded: actors still busy after `shutdown_s` are stopped regardless."""
    stopping = asyncio.gather(*(a.shutdown() for a in actors), return_exceptions=True)
    if await within(clock, shutdown_s, stopping) is None:
        for actor in actors:
            actor.kill()
        await asyncio.gather(*(a.stopped() for a in actors))
