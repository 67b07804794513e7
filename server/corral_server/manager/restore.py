"""Start-up: every stored agent comes back in creation order, from its record.

Headers only: no timeline row is read and no provider session opens until a turn needs one
(that session then resumes the stored provider session, actor_session.py). The timeline's head
is authoritative for epoch and next_seq. A record that did not decode, or whose timeline or
provider is gone, is reported and skipped; the others load. A turn that was running ends with
"interrupted by a daemon restart", through the agent's queue like any turn end.

Must not: open a provider session or read a timeline's rows.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import replace

from corral_server.domain.agent import Agent, Idle, Initializing, Running
from corral_server.manager.actor import AgentActor
from corral_server.manager.actor_deps import ActorDeps
from corral_server.manager.directory import AgentDirectory
from corral_server.providers.base import Provider
from corral_server.records.store import LoadedAgents
from corral_server.timeline.store import TimelineStore

log = logging.getLogger(__name__)


async def restore(
    loaded: LoadedAgents,
    *,
    directory: AgentDirectory,
    providers: Mapping[str, Provider],
    timeline: TimelineStore,
    deps: Callable[[Provider], ActorDeps],
) -> None:
    for bad in loaded.bad:
        log.error("agent %s: its stored record is unreadable (%s); skipped", *bad)
    interrupted: list[AgentActor] = []
    for agent in loaded.agents:
        restored = _restored(agent, providers, timeline)
        if restored is None:
            continue
        actor = AgentActor(restored, deps(providers[agent.provider]))
        directory.add(actor)
        if restored.is_closed:
            actor.retire()
        elif isinstance(restored.lifecycle, Running):
            interrupted.append(actor)
    for actor in interrupted:
        await actor.call(actor.end_interrupted_turn)


def _restored(
    agent: Agent, providers: Mapping[str, Provider], timeline: TimelineStore
) -> Agent | None:
    """The agent as it comes back (None: skipped, and why is logged)."""
    try:
        head = timeline.head(agent.id)
    except KeyError:
        log.error("agent %s: its timeline is missing; skipped", agent.id)
        return None
    if agent.provider not in providers:
        why = f"provider {agent.provider!r} is not configured"
        log.error("agent %s: %s; skipped", agent.id, why)
        return None
    # provider_session_id stays: the first turn resumes that session (actor_session.py).
    restored = agent
    if (agent.epoch, agent.next_seq) != (head.epoch, head.next_seq):
        # Only when they differ: `replace` costs ~25 us, a tenth of P3 with 10,000 agents.
        restored = replace(agent, epoch=head.epoch, next_seq=head.next_seq)
    if isinstance(restored.lifecycle, Initializing):
        restored = replace(restored, lifecycle=Idle())  # its create never finished
    return restored
