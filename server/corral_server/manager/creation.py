"""Creating agents: CreateAgent (validated, registered, its initial prompt started) with its
idempotency by request id (a window in memory, and the durable store when there is one), and
ImportAgent. Both are all or nothing: a create that fails half-way leaves no agent listed, no
session open, no timeline or record behind.

Must not: change an existing agent (every change is a call onto its actor).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field

from corral_server import errors
from corral_server.domain.agent import Agent, AgentId, Initializing, QueuedBy, TitleSource
from corral_server.domain.events import AgentRemoved, AgentUpserted
from corral_server.domain.workspace import Workspace
from corral_server.manager.actor import AgentActor
from corral_server.manager.actor_deps import ActorWiring
from corral_server.manager.deadlines import deadline
from corral_server.manager.directory import AgentDirectory
from corral_server.manager.importing import check_import
from corral_server.manager.specs import CreateSpec, Defaults
from corral_server.manager.turns import IfRunning
from corral_server.manager.validate import (
    Limits,
    check_cwd,
    check_id,
    check_labels,
    check_prompt,
    check_title,
)
from corral_server.providers.base import Provider
from corral_server.records.store import CreateRequests
from corral_server.timeline.store import NewRow
from corral_server.workspace.worktrees import Worktrees

# What ImportAgentExport hands over: an export's rows, in batches, as they are read.
RowBatches = AsyncIterator[Sequence[NewRow]]

# CreateAgent request ids remembered for idempotent retries: the most recent this many, so
# hostile clients cannot grow the table without bound.
MAX_REMEMBERED_CREATES = 10_000


@dataclass(kw_only=True)
class Creation:
    providers: Mapping[str, Provider]
    directory: AgentDirectory
    # The manager's: the stores, hub and clock every actor gets (`deps(provider)`).
    wiring: ActorWiring
    limits: Limits
    check_open: Callable[[], None]
    new_id: Callable[[], str] = lambda: uuid.uuid4().hex
    # CreateAgent request ids kept durably (None: only the in-memory window below).
    requests: CreateRequests | None = None
    # Makes the git worktree a create asks for (workspace/worktrees.py).
    worktrees: Worktrees = field(default_factory=Worktrees)
    # Each provider's model and mode for a create that names none (manager.py's, live).
    defaults: Mapping[str, Defaults] = field(default_factory=dict)
    _creates: dict[str, tuple[CreateSpec, asyncio.Future[tuple[Agent, str]]]] = field(
        default_factory=dict
    )

    async def create(self, spec: CreateSpec) -> tuple[Agent, str]:
        """Create an agent (and start its initial prompt). The same request_id returns the
        first call's agent instead of creating a duplicate."""
        self.check_open()
        if spec.request_id:
            check_id("request_id", spec.request_id, self.limits)
            known = self._creates.get(spec.request_id)
            if known is not None:
                first, future = known
                if not first.same_request(spec):
                    raise _reused(spec.request_id)
                agent, turn_id = await asyncio.shield(future)
                return self.directory.actor(agent.id).agent, turn_id
            stored = await self._created_before(spec)
            if stored is not None:
                return stored
        provider = self._validate(spec)
        future = asyncio.get_running_loop().create_future()
        if spec.request_id:
            self._creates[spec.request_id] = (spec, future)
            if len(self._creates) > MAX_REMEMBERED_CREATES:  # oldest first: dicts keep order
                del self._creates[next(iter(self._creates))]
        try:
            result = await self._create(spec, provider)
            if spec.request_id and self.requests is not None:
                # Durable: a retry after a restart finds this agent (no window).
                agent_id = result[0].id
                now = self.wiring.clock.now_ms()
                await self.requests.remember(spec.request_id, spec.fingerprint(), agent_id, now)
        except Exception as exc:
            self._creates.pop(spec.request_id, None)  # a failed create may be retried
            future.set_exception(exc)  # concurrent retries share the failure...
            future.exception()  # ...and none of them waiting is not an error
            raise
        except BaseException:
            self._creates.pop(spec.request_id, None)
            future.cancel()
            raise
        future.set_result(result)
        return result

    async def _created_before(self, spec: CreateSpec) -> tuple[Agent, str] | None:
        """A request id the durable store remembers (a create from before a restart): the
        same request answers its agent (no turn id: that turn is history); another request
        under the id is ALREADY_EXISTS."""
        if self.requests is None:
            return None
        found = await self.requests.find(spec.request_id)
        if found is None:
            return None
        fingerprint, agent_id = found
        if fingerprint != spec.fingerprint():
            raise _reused(spec.request_id)
        actor = self.directory.find(agent_id)
        if actor is None:
            return None  # its agent is gone (a record that did not load): create anew
        return actor.agent, ""

    def _validate(self, spec: CreateSpec) -> Provider:
        if not spec.provider:
            raise errors.InvalidArgument.field("provider", f"required; one of {self.names()}")
        provider = self.providers.get(spec.provider)
        if provider is None:
            raise errors.UnknownProvider(spec.provider, self.names())
        if not (info := provider.info()).available:
            raise errors.ProviderUnavailable(info.name, info.unavailable_reason)
        check_cwd(spec.cwd)
        check_title(spec.title, self.limits)
        check_labels(spec.labels, self.limits)
        self.directory.check_parent(spec.labels, None)
        if spec.mode:
            check_choice(provider, "mode", spec.mode)
        if spec.model:
            check_choice(provider, "model", spec.model)
        if spec.initial_prompt:
            check_prompt(spec.initial_prompt, self.limits, "initial_prompt")
            provider.validate_prompt(spec.initial_prompt)
        return provider

    async def _new_actor(
        self,
        provider: Provider,
        provider_name: str,
        cwd: str,
        title: str,
        labels: dict[str, str],
        workspace: Workspace | None = None,
        agent_id: AgentId | None = None,
    ) -> AgentActor:
        """A new agent, Initializing, listed at once, with a fresh timeline (a new epoch), or
        the timeline `agent_id` already holds (an import's rows)."""
        if agent_id is None:
            agent_id = AgentId(self.new_id())
            head = await self.wiring.timeline.create(agent_id)
        else:
            head = self.wiring.timeline.head(agent_id)
        now = self.wiring.clock.now_ms()
        agent = Agent(
            id=agent_id,
            provider=provider_name,
            cwd=cwd,
            lifecycle=Initializing(),
            created_at_ms=now,
            updated_at_ms=now,
            epoch=head.epoch,
            next_seq=head.next_seq,
            title=title,
            labels=labels,
            title_source=TitleSource.USER if title else TitleSource.NONE,
            workspace=workspace,
        )
        actor = AgentActor(agent, self.wiring.deps(provider))
        self.directory.add(actor)
        self.wiring.publisher.publish(AgentUpserted(agent))
        return actor

    async def _create(self, spec: CreateSpec, provider: Provider) -> tuple[Agent, str]:
        workspace, cwd = None, spec.cwd
        if spec.worktree is not None:  # made last of the checks: nothing to undo before it
            workspace, cwd = await self.worktrees.make(spec.cwd, spec.worktree, spec.title)
        try:
            actor = await self._new_actor(
                provider, spec.provider, cwd, spec.title, dict(spec.labels), workspace
            )
        except BaseException:
            if workspace is not None:
                await self.worktrees.undo(workspace)
            raise
        try:
            chosen = self.defaults.get(spec.provider)
            model = spec.model or (chosen.model if chosen else "")
            mode = spec.mode or (chosen.mode if chosen else "")
            registered = await actor.call(lambda: actor.register(model, mode))
            turn_id = ""
            if spec.initial_prompt:
                prompt, by = spec.initial_prompt, QueuedBy.CLIENT
                started = await actor.call(
                    lambda: actor.start_turn(prompt, "", IfRunning.REJECT, by)
                )
                turn_id = started.turn_id
                registered = actor.agent
        except BaseException:
            await self._discard(actor)
            raise
        return registered, turn_id

    async def import_agent(self, provider_name: str, provider_session_id: str, cwd: str) -> Agent:
        """ImportAgent (importing.py): the provider reads the session's conversation first
        (under the create deadline), so a session it cannot read creates nothing; then a new
        agent holds it as history rows under its fresh epoch, idle, and its first turn
        resumes that provider session."""
        self.check_open()
        provider, importer = check_import(
            self.providers, provider_name, provider_session_id, cwd, self.limits
        )
        read = importer.import_history(provider_session_id, cwd, self.wiring.daemon_tag)
        timeout_s = self.wiring.timeouts.create_session_s
        items = await deadline(self.wiring.clock, timeout_s, read, "import", self.wiring.call_times)
        if not items:
            raise errors.FailedPrecondition(
                f"provider session {provider_session_id!r} holds no conversation to import",
                metadata={"provider": provider_name, "provider_session_id": provider_session_id},
            )
        self.check_open()
        actor = await self._new_actor(provider, provider_name, cwd, "", {})
        try:
            return await actor.call(lambda: actor.prime(items, provider_session_id))
        except BaseException:
            await self._discard(actor)
            raise

    async def import_rows(self, spec: CreateSpec, batches: RowBatches) -> Agent:
        """ImportAgentExport: a new agent from `spec` (validated as CreateAgent's) holding
        the rows `batches` yields, stored as they come under a timeline no one sees yet (no
        events: a history, not a live turn). Only once every batch is in is the agent listed
        and its session opened; a batch that fails (a bad line) drops the rows, so nothing is
        left. The agent starts from zero usage and no provider session of its own."""
        self.check_open()
        provider = self._validate(spec)
        agent_id = AgentId(self.new_id())
        await self.wiring.timeline.create(agent_id)
        try:
            async for batch in batches:
                await self.wiring.timeline.append(agent_id, batch)
            self.check_open()
        except BaseException:
            await self.wiring.timeline.drop(agent_id)
            raise
        actor = await self._new_actor(
            provider, spec.provider, spec.cwd, spec.title, dict(spec.labels), agent_id=agent_id
        )
        try:
            return await actor.call(lambda: actor.register(spec.model, spec.mode))
        except BaseException:
            await self._discard(actor)
            raise

    async def _discard(self, actor: AgentActor) -> None:
        """Undo a create that failed half-way: CreateAgent is all or nothing, so no ghost
        agent stays listed and no session is left open."""
        agent_id = actor.agent.id
        self.directory.remove(agent_id)
        await actor.shutdown()  # closes the session if one was opened; stops the task
        await self.wiring.timeline.drop(agent_id)
        if self.wiring.records is not None:
            await self.wiring.records.delete(agent_id)
        if actor.agent.workspace is not None:
            await self.worktrees.undo(actor.agent.workspace)
        self.wiring.publisher.publish(AgentRemoved(agent_id))

    def names(self) -> tuple[str, ...]:
        return tuple(sorted(self.providers))


def check_choice(provider: Provider, field: str, value: str) -> None:
    """`value` must be one of the provider's modes (or models), when it lists any."""
    info = provider.info()
    choices = [m.id for m in (info.modes if field == "mode" else info.models)]
    if choices and value not in choices:
        raise errors.InvalidArgument.field(
            field, f"unknown {field} {value!r}; one of {', '.join(choices)}"
        )


def _reused(request_id: str) -> errors.AlreadyExists:
    return errors.AlreadyExists(
        f"request_id {request_id!r} was used for a different CreateAgent",
        metadata={"request_id": request_id},
    )
