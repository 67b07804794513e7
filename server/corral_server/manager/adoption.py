"""Cluster: an agent this node takes over from a lost node (cluster/node_loss.py), restored from
its record in the read model as a start-up restores a stored agent, and left `errored` with the
reason (its provider process died with the other node; a ReloadAgent starts one here).

The errored snapshot is written by the new owner's actor through its channel, so it is one
record and one `agent_upserted` in the stream, seen by every node.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import replace

from corral_server.clock import Clock
from corral_server.domain.agent import Agent, AgentError, Errored
from corral_server.jobs import done_with
from corral_server.manager import stopping
from corral_server.manager.actor import AgentActor
from corral_server.manager.actor_deps import ActorDeps
from corral_server.manager.directory import AgentDirectory
from corral_server.manager.restore import restore
from corral_server.manager.specs import Timeouts
from corral_server.providers.base import Provider
from corral_server.records.store import LoadedAgents
from corral_server.timeline.store import TimelineStore

log = logging.getLogger(__name__)
DROP_WAIT_S = 10.0


async def adopt(
    agent: Agent,
    error: AgentError | None,
    *,
    directory: AgentDirectory,
    providers: Mapping[str, Provider],
    timeline: TimelineStore,
    deps: Callable[[Provider], ActorDeps],
) -> bool:
    """The agent restored here and, with `error`, errored; False when it could not be (its
    provider is not configured here, its timeline is missing: restore.py logs why)."""
    if error is not None:  # a turn it was running died with its node: nothing to interrupt
        agent = replace(agent, lifecycle=Errored(error))
    await restore(
        LoadedAgents([agent], []),
        directory=directory,
        providers=providers,
        timeline=timeline,
        deps=deps,
    )
    actor = directory.find(agent.id)
    if actor is None:
        return False
    if error is not None:
        await actor.call(lambda: done_with(actor.errored(error)))
    return True


async def release(
    actor: AgentActor, clock: Clock, timeouts: Timeouts, directory: AgentDirectory
) -> Agent:
    """The agent handed to another node (ReloadAgent {node}, cluster/relocation.py): its turn
    canceled, its provider session closed and its actor gone from this node. The record
    stays as it is, for the next owner to restore."""
    await stopping.cancel_for_reload(actor, clock, timeouts)
    await actor.shutdown()
    directory.remove(actor.agent.id)
    return actor.agent


async def drop(
    actor: AgentActor, clock: Clock, timeouts: Timeouts, directory: AgentDirectory
) -> None:
    """The agent's writes stopped (its cluster channel broke): stopped here as a hand-over
    stops it (its provider session closed), within DROP_WAIT_S, else at once; gone from this
    node's actors either way. Its writes fail meanwhile: they are logged, not kept."""
    try:
        await asyncio.wait_for(release(actor, clock, timeouts, directory), DROP_WAIT_S)
    except Exception:
        log.exception("agent %s: not stopped cleanly; stopped at once", actor.agent.id)
        actor.kill()
    directory.remove(actor.agent.id)
