"""Live configuration for the manager (docs/design.md#live-config): UpdateAgent's checks,
and a reloaded providers file applied to the providers, their defaults and the live agents.

Each agent's change is one call onto its actor (its single writer): a provider whose entry
changed what its process starts with is handed to the actor, which restarts the process at its
next idle moment; a changed `model` or `mode` default moves the live agents still on the old
one, through their provider, at once. Must not: change an agent's state itself.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field

from corral_server import errors
from corral_server.domain.agent import Agent
from corral_server.jobs import done_with
from corral_server.manager.actor import AgentActor
from corral_server.manager.creation import check_choice
from corral_server.manager.directory import AgentDirectory
from corral_server.manager.specs import AgentUpdate, Defaults
from corral_server.manager.validate import Limits, check_labels, check_title
from corral_server.providers.base import Provider

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ProviderChange:
    """One provider's entry, changed by a reload: a new provider when what its process starts
    with changed (None: the same processes go on), and its defaults before and after."""

    provider: Provider | None
    before: Defaults
    after: Defaults


@dataclass(slots=True)
class LiveOutcome:
    """What a reload did to the live agents (for its log line)."""

    restarting: list[str] = field(default_factory=list)  # now, or at their next idle moment
    changed: list[str] = field(default_factory=list)  # model or mode changed in place
    refused: list[str] = field(default_factory=list)  # "AGENT: the provider's reason"


async def update(
    actor: AgentActor, change: AgentUpdate, limits: Limits, directory: AgentDirectory
) -> Agent:
    """UpdateAgent: the title and labels checked (a parent label must name another agent and
    close no cycle), the model and mode against the agent's provider, then the change on its
    queue (through the provider when it changes the model or mode)."""
    if change.title is not None:
        check_title(change.title, limits)
    if change.labels is not None:
        check_labels(change.labels, limits)
        directory.check_parent(change.labels, actor.agent.id)
    provider = actor.provider
    if change.mode is not None:
        check_choice(provider, "mode", change.mode)
    if change.model is not None:
        check_choice(provider, "model", change.model)
    if change == AgentUpdate():
        raise errors.InvalidArgument.field("update_mask", "nothing to update")
    return await actor.call(lambda: actor.update_live(change))


async def apply(
    actors: Sequence[AgentActor],
    changes: Mapping[str, ProviderChange],
    removed: Sequence[str],
    providers: MutableMapping[str, Provider],
    defaults: MutableMapping[str, Defaults],
) -> LiveOutcome:
    """The new providers and defaults for new agents (a removed provider takes none; its live
    agents keep theirs), then every live agent of a changed provider told, all at once (each
    on its own queue)."""
    for name in removed:
        providers.pop(name, None)
        defaults.pop(name, None)
    for name, change in changes.items():
        if change.provider is not None:
            providers[name] = change.provider
        defaults[name] = change.after
    outcome = LiveOutcome()
    live = [a for a in actors if not a.agent.is_closed and a.agent.provider in changes]
    await asyncio.gather(*(_apply_one(a, changes[a.agent.provider], outcome) for a in live))
    return outcome


async def _apply_one(actor: AgentActor, change: ProviderChange, outcome: LiveOutcome) -> None:
    agent = actor.agent
    info = actor.provider.info()
    before_model = change.before.model or (info.models[0].id if info.models else "")
    before_mode = change.before.mode or (info.modes[0].id if info.modes else "")
    moved = AgentUpdate(
        model=change.after.model if _moves(agent.model, before_model, change.after.model) else None,
        mode=change.after.mode if _moves(agent.mode, before_mode, change.after.mode) else None,
    )
    try:
        if (provider := change.provider) is not None:
            if moved != AgentUpdate():  # recorded: the restarted process starts with it
                await actor.call(lambda: done_with(actor.update(moved)))
            if await actor.call(lambda: actor.restart_with(provider)):
                outcome.restarting.append(agent.id)
        elif moved != AgentUpdate():
            await actor.call(lambda: actor.update_live(moved))
            outcome.changed.append(agent.id)
    except errors.CorralError as exc:
        outcome.refused.append(f"{agent.id}: {exc.message}")


def _moves(current: str, before: str, after: str) -> bool:
    """An agent still on the old default moves to a new one the entry names."""
    return bool(after) and after != before and current == before
