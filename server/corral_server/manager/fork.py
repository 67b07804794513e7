"""ForkAgent (docs/design.md#forks): a new agent holding another agent's conversation up to a
cut, whose provider session continues from exactly there.

Preflight, then announce. The steps, in order; each failure undoes what the ones before made
(the fork's rows, its session) and nothing was ever shown:

1. Check the request (title, labels, the cut's shape) and find the source.
2. Settle the source's rows, then copy those before the cut into a timeline of the fork's new
   id (fork_rows.py). No one can see it: no actor, no record, no event.
3. Make the fork's provider session at the cut:
   - the provider's own fork (`SessionForker`), when it has one: the cut must be a user
     message the provider confirmed (as Rewind requires: docs/design.md#echo-and-rewind),
     named by its provider id, in a turn the provider named, of the source's session;
   - otherwise a new session primed with a context attachment of the copied rows
     (fork_priming.py), closed when the priming turn ended;
   - nothing before the cut: no session yet (the fork's first turn opens a new one).
4. Announce: the fork's actor is made idle with that provider session id (its first turn
   resumes it, as after ImportAgent), listed, stored and published in one step.

Must not: change the source, or publish anything about the fork before step 4.
"""

from __future__ import annotations

import contextlib
import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

from corral_server import errors
from corral_server.domain.agent import Agent, AgentId, Idle, TitleSource
from corral_server.domain.timeline import UserMessage
from corral_server.jobs import done_with
from corral_server.manager.actor import AgentActor
from corral_server.manager.creation import Creation
from corral_server.manager.deadlines import deadline
from corral_server.manager.fork_priming import ATTACHMENT_CHARS, attachment, primed_session
from corral_server.manager.fork_rows import Cut, CutAt, copy_until_cut
from corral_server.manager.reads import activity
from corral_server.manager.specs import AgentUpdate
from corral_server.manager.validate import check_id, check_labels, check_title
from corral_server.providers.base import ForkPoint, Provider, SessionConfig, forker_of

# The label every fork carries: "<source agent id>@<epoch>:<seq>", the cut as a cursor of the
# source (its first row the fork left out).
FORKED_FROM_LABEL = "corral.forked-from"


class ForkSession(enum.Enum):
    """How the fork's provider session continues the conversation."""

    PROVIDER = "provider"  # the provider's own fork
    CONTEXT = "context"  # a new session primed with the context attachment
    NEW = "new"  # nothing before the cut: a new session, opened by the first turn


@dataclass(frozen=True, slots=True)
class ForkSpec:
    agent_id: str
    at: CutAt
    title: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Fork:
    agent: Agent
    rows: int
    session: ForkSession


async def fork_agent(creation: Creation, spec: ForkSpec) -> Fork:
    creation.check_open()
    _check(creation, spec)
    actor = creation.directory.actor(spec.agent_id)
    provider = creation.providers[actor.agent.provider]
    if not (info := provider.info()).available:
        raise errors.ProviderUnavailable(info.name, info.unavailable_reason)
    with contextlib.suppress(errors.AgentClosed):  # a closed agent's rows are settled
        await actor.call(actor.barrier)
    source = actor.agent  # after its rows settled: the provider session id they belong to
    fork_id = AgentId(creation.new_id())
    await creation.wiring.timeline.create(fork_id)
    try:
        cut = await copy_until_cut(creation.wiring.timeline, source.id, fork_id, spec.at)
        session_id, how = await _session_at_cut(creation, provider, source, fork_id, cut, spec)
        creation.check_open()
        agent = _fork_snapshot(creation, source, fork_id, cut, spec, session_id)
    except BaseException:
        await creation.wiring.timeline.drop(fork_id)
        raise
    return Fork(await _announce(creation, provider, agent), cut.copied, how)


def _check(creation: Creation, spec: ForkSpec) -> None:
    limits = creation.limits
    check_id("agent_id", spec.agent_id, limits)
    if bool(spec.at.message_id) == (spec.at.cursor is not None):
        raise errors.InvalidArgument.field("at", "name a message_id or a cursor (one of them)")
    if spec.at.message_id:
        check_id("message_id", spec.at.message_id, limits)
    check_title(spec.title, limits)
    labels = {**spec.labels, FORKED_FROM_LABEL: ""}
    check_labels(labels, limits)
    creation.directory.check_parent(spec.labels, None)


async def _session_at_cut(
    creation: Creation,
    provider: Provider,
    source: Agent,
    fork_id: AgentId,
    cut: Cut,
    spec: ForkSpec,
) -> tuple[str, ForkSession]:
    """Step 3: the provider session id of the fork, and how it was made."""
    forker = forker_of(provider)
    if forker is not None:
        point = _native_point(source, cut, spec)
        if point is None:  # nothing before the cut
            return "", ForkSession.NEW
        call = forker.fork_session(point, source.cwd, creation.wiring.daemon_tag)
        timeout_s = creation.wiring.timeouts.create_session_s
        times = creation.wiring.call_times
        made = await deadline(creation.wiring.clock, timeout_s, call, "fork_session", times)
        return made, ForkSession.PROVIDER
    if cut.copied == 0:
        return "", ForkSession.NEW
    digest = await activity(creation.wiring.timeline, fork_id, None, None, ATTACHMENT_CHARS)
    config = SessionConfig(
        fork_id, source.cwd, source.model, source.mode, daemon_tag=creation.wiring.daemon_tag
    )
    prompt = attachment(digest)
    session_id = await primed_session(provider, config, prompt, creation)
    return session_id, ForkSession.CONTEXT


def _native_point(source: Agent, cut: Cut, spec: ForkSpec) -> ForkPoint | None:
    """Where the provider forks: the confirmed user message at the cut. None when nothing is
    before the cut; MESSAGE_NOT_CONFIRMED when the cut is anything else the provider could not
    place (an unconfirmed message, another row, the end of the timeline)."""
    if cut.copied == 0:
        return None
    row = cut.row
    named = spec.at.message_id or (row.provider_message_id if row is not None else "")
    if (
        row is None
        or type(row.item) is not UserMessage
        or not row.provider_message_id
        or not row.turn_id
        or not source.provider_session_id
    ):
        what = named or f"at seq {cut.seq}"
        raise errors.MessageNotConfirmed(source.id, what, doing="fork a provider's session")
    return ForkPoint(source.provider_session_id, row.provider_message_id, row.turn_id)


def _fork_snapshot(
    creation: Creation, source: Agent, fork_id: AgentId, cut: Cut, spec: ForkSpec, session_id: str
) -> Agent:
    """The fork as it is announced: idle, the source's provider, cwd, model and mode, its own
    title and labels (none of the source's: a fork is not a child of the source's parent), no
    workspace of its own (the source's worktree stays the source's), zero usage."""
    head = creation.wiring.timeline.head(fork_id)
    now = creation.wiring.clock.now_ms()
    labels = {**spec.labels, FORKED_FROM_LABEL: f"{source.id}@{cut.epoch}:{cut.seq}"}
    return Agent(
        id=fork_id,
        provider=source.provider,
        cwd=source.cwd,
        lifecycle=Idle(),
        created_at_ms=now,
        updated_at_ms=now,
        epoch=head.epoch,
        next_seq=head.next_seq,
        model=source.model,
        mode=source.mode,
        title=spec.title,
        labels=labels,
        title_source=TitleSource.USER if spec.title else TitleSource.NONE,
        provider_session_id=session_id,
    )


async def _announce(creation: Creation, provider: Provider, agent: Agent) -> Agent:
    """Step 4: listed, then stored and published by the actor's one setter (an update that
    changes nothing else), so the record and the event come from the fork's single writer."""
    actor = AgentActor(agent, creation.wiring.deps(provider))
    creation.directory.add(actor)
    try:
        return await actor.call(lambda: done_with(actor.update(AgentUpdate())))
    except BaseException:
        creation.directory.remove(agent.id)
        await actor.shutdown()
        await creation.wiring.timeline.drop(agent.id)
        if creation.wiring.records is not None:
            await creation.wiring.records.delete(agent.id)
        raise
