"""The agent manager: the registry of agents and the front door for every command.

It owns which agents exist (live actors, closed records), create idempotency and close
de-duplication. It never changes an agent's state itself: every change is a call onto that
agent's actor (actor.py), the agent's single writer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import replace
from typing import Any, TypeVar, assert_never

from corral_server import errors
from corral_server.clock import Clock
from corral_server.domain.agent import (
    PARENT_AGENT_ID_LABEL,
    Agent,
    AgentId,
    Closed,
    Errored,
    Idle,
    Initializing,
    PendingPermission,
    PermissionResponse,
    QueuedPrompt,
    Running,
)
from corral_server.domain.content import Prompt
from corral_server.domain.events import AgentRemoved, AgentUpserted, TurnTerminal
from corral_server.domain.timeline import Cursor, Direction, FetchResult, SubagentNotice
from corral_server.manager import permissions
from corral_server.manager.actor import AgentActor
from corral_server.manager.actor_state import ActorDeps, TurnCounts
from corral_server.manager.deadlines import deadline, within
from corral_server.manager.importing import check_import
from corral_server.manager.presence import PresenceBook
from corral_server.manager.selector import parse_selector
from corral_server.manager.specs import AgentUpdate, CreateSpec, Timeouts
from corral_server.manager.turns import CancelOutcome, IfRunning, StartedTurn, WaitStatus
from corral_server.manager.validate import (
    Limits,
    check_cwd,
    check_id,
    check_labels,
    check_prompt,
    check_title,
)
from corral_server.manager.writer import Publisher
from corral_server.providers.base import Provider, ProviderInfo
from corral_server.records.store import (
    AgentRecords,
    CreateRequests,
    FinishedTurns,
    LoadedAgents,
)
from corral_server.timeline.activity import (
    DEFAULT_ACTIVITY_MAX_CHARS,
    ActivityDigest,
    curate_activity,
)
from corral_server.timeline.store import TimelineStore

T = TypeVar("T")
log = logging.getLogger(__name__)

DEFAULT_PAGE_SIZE = 100
# WaitForIdle's longest wait; clients re-wait for longer.
MAX_WAIT_S = 24 * 3600.0
# CreateAgent request ids remembered for idempotent retries: the most recent this many, so
# hostile clients cannot grow the table without bound.
MAX_REMEMBERED_CREATES = 10_000
MAX_PAGE_SIZE = 1000


class AgentManager:
    def __init__(
        self,
        *,
        providers: Mapping[str, Provider],
        timeline: TimelineStore,
        publisher: Publisher,
        clock: Clock,
        limits: Limits = Limits(),
        timeouts: Timeouts = Timeouts(),
        new_id: Callable[[], str] = lambda: uuid.uuid4().hex,
        records: AgentRecords | None = None,
        requests: CreateRequests | None = None,
        finished: FinishedTurns | None = None,
        daemon_tag: str = "",
    ) -> None:
        self._providers = dict(providers)
        self._timeline = timeline
        self._publisher = publisher
        self._clock = clock
        self.limits = limits
        self._timeouts = timeouts
        self._new_id = new_id
        self._records = records
        # CreateAgent request ids kept durably (None: only the in-memory window below).
        self._requests = requests
        self._finished = finished
        # Every agent process carries it (providers/reaping.py): a daemon restarted on the
        # same state directory reaps what this one leaves if it is killed.
        self._daemon_tag = daemon_tag
        # Clients' presence (Heartbeat), for the notification plan of attention events.
        self.presence = PresenceBook()
        # Turns started and ended, by outcome (read by the metrics endpoint).
        self.turn_counts = TurnCounts()
        self._actors: dict[str, AgentActor] = {}  # insertion order = creation order
        self._creates: dict[str, tuple[CreateSpec, asyncio.Future[tuple[Agent, str]]]] = {}
        self._closes: dict[str, asyncio.Future[Agent]] = {}
        # Set by refuse_new_work (the drain): new turns and creates answer SHUTTING_DOWN,
        # and every WaitForIdle ends with it.
        self._shutting_down = False
        self._draining = asyncio.Event()
        # Sub-agent hooks (subagents/registry.py sets them): `on_settled` is told, on the
        # agent's task, when an agent settles (a turn ended, no successor follows);
        # `on_archive` runs before an archive cascade closes its agents (ids, agent first).
        self.on_settled: Callable[[Agent, TurnTerminal], None] | None = None
        self.on_archive: Callable[[list[str]], Awaitable[None]] | None = None
        # Told (on the loop) of each agent a close or an archive leaves closed (app.py: the MCP
        # endpoint ends what that agent has open).
        self.on_closed: Callable[[str], None] | None = None

    # --- reads ---------------------------------------------------------------------------

    def get(self, agent_id: str) -> Agent:
        return self._actor(agent_id).agent

    def agents(self) -> list[Agent]:
        """Every agent's current snapshot (for the metrics endpoint)."""
        return [actor.agent for actor in self._actors.values()]

    def snapshot(self, agent_ids: frozenset[str]) -> list[Agent]:
        """Every agent in scope (empty = all), for a fresh subscription."""
        if agent_ids:
            return [a.agent for i, a in self._actors.items() if i in agent_ids]
        return [a.agent for a in self._actors.values()]

    def list_agents(
        self,
        *,
        page_size: int,
        page_token: str,
        label_selector: str,
        include_archived: bool,
        parent_agent_id: str,
    ) -> tuple[list[Agent], str]:
        """Agents in creation order. The token is the id of the last agent of the previous
        page, so a page stays correct while agents are created behind it."""
        selector = parse_selector(label_selector)
        size = page_size or DEFAULT_PAGE_SIZE
        if size > MAX_PAGE_SIZE:
            raise errors.InvalidArgument.field("page_size", f"at most {MAX_PAGE_SIZE}")
        ids = list(self._actors)
        start = 0
        if page_token:
            if page_token not in self._actors:
                raise errors.InvalidArgument.field("page_token", "unknown or expired page token")
            start = ids.index(page_token) + 1
        out: list[Agent] = []
        for agent_id in ids[start:]:
            agent = self._actors[agent_id].agent
            if agent.archived_at_ms is not None and not include_archived:
                continue
            if parent_agent_id and agent.parent_agent_id != parent_agent_id:
                continue
            if not selector.matches(agent.labels):
                continue
            if len(out) == size:
                return out, out[-1].id
            out.append(agent)
        return out, ""

    async def fetch_timeline(
        self, agent_id: str, direction: Direction, cursor: Cursor | None, limit: int | None
    ) -> FetchResult:
        self._actor(agent_id)
        return await self._timeline.fetch(agent_id, direction, cursor, limit)

    async def activity(
        self, agent_id: str, start: Cursor | None, end: Cursor | None, max_chars: int
    ) -> ActivityDigest:
        """A plain-text digest of rows start..end (inclusive; default the whole timeline),
        newest rows first to survive the `max_chars` budget. Reads a bounded page only: every
        rendered row takes at least a few characters, so more rows could never fit."""
        self._actor(agent_id)
        budget = max_chars or DEFAULT_ACTIVITY_MAX_CHARS
        if budget < 0:
            raise errors.InvalidArgument.field("max_chars", "must not be negative")
        epoch = self._timeline.head(agent_id).epoch
        for name, cursor in (("start_cursor", start), ("end_cursor", end)):
            if cursor is not None and cursor.epoch != epoch:
                raise errors.InvalidArgument.field(
                    f"{name}.epoch", "the cursor is from another epoch"
                )
        rows_limit = budget // 4 + 1
        if end is None:
            page = await self._timeline.fetch(agent_id, Direction.TAIL, None, rows_limit)
        else:
            after_end = Cursor(end.epoch, min(end.seq + 1, self._timeline.head(agent_id).next_seq))
            page = await self._timeline.fetch(agent_id, Direction.BEFORE, after_end, rows_limit)
        rows = [r for r in page.rows if start is None or r.seq >= start.seq]
        digest = curate_activity(rows, budget)
        if page.has_older and (start is None or (rows and rows[0].seq > start.seq)):
            digest = replace(digest, truncated=True)  # older rows in range were not even read
        return digest

    def providers_info(self) -> list[ProviderInfo]:
        return [p.info() for p in self._providers.values()]

    # --- create --------------------------------------------------------------------------

    async def create(self, spec: CreateSpec) -> tuple[Agent, str]:
        """Create an agent (and start its initial prompt). The same request_id returns the
        first call's agent instead of creating a duplicate."""
        self._check_open()
        if spec.request_id:
            check_id("request_id", spec.request_id, self.limits)
            known = self._creates.get(spec.request_id)
            if known is not None:
                first, future = known
                if not first.same_request(spec):
                    raise errors.AlreadyExists(
                        f"request_id {spec.request_id!r} was used for a different CreateAgent",
                        metadata={"request_id": spec.request_id},
                    )
                agent, turn_id = await asyncio.shield(future)
                return self.get(agent.id), turn_id
            stored = await self._created_before(spec)
            if stored is not None:
                return stored
        provider = self._validate_create(spec)
        future = asyncio.get_running_loop().create_future()
        if spec.request_id:
            self._creates[spec.request_id] = (spec, future)
            if len(self._creates) > MAX_REMEMBERED_CREATES:  # oldest first: dicts keep order
                del self._creates[next(iter(self._creates))]
        try:
            result = await self._create(spec, provider)
            if spec.request_id and self._requests is not None:
                # Durable: a retry after a restart finds this agent (no window).
                agent_id = result[0].id
                now = self._clock.now_ms()
                await self._requests.remember(spec.request_id, spec.fingerprint(), agent_id, now)
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
        if self._requests is None:
            return None
        found = await self._requests.find(spec.request_id)
        if found is None:
            return None
        fingerprint, agent_id = found
        if fingerprint != spec.fingerprint():
            raise errors.AlreadyExists(
                f"request_id {spec.request_id!r} was used for a different CreateAgent",
                metadata={"request_id": spec.request_id},
            )
        actor = self._actors.get(agent_id)
        if actor is None:
            return None  # its agent is gone (a record that did not load): create anew
        return actor.agent, ""

    def _validate_create(self, spec: CreateSpec) -> Provider:
        if not spec.provider:
            raise errors.InvalidArgument.field("provider", f"required; one of {self._names()}")
        provider = self._providers.get(spec.provider)
        if provider is None:
            raise errors.UnknownProvider(spec.provider, self._names())
        if not (info := provider.info()).available:
            raise errors.ProviderUnavailable(info.name, info.unavailable_reason)
        check_cwd(spec.cwd)
        check_title(spec.title, self.limits)
        check_labels(spec.labels, self.limits)
        self._check_parent(spec.labels, None)
        if spec.mode:
            _check_choice(provider, "mode", spec.mode)
        if spec.model:
            _check_choice(provider, "model", spec.model)
        if spec.initial_prompt:
            check_prompt(spec.initial_prompt, self.limits, "initial_prompt")
            provider.validate_prompt(spec.initial_prompt)
        return provider

    async def _new_actor(
        self, provider: Provider, provider_name: str, cwd: str, title: str, labels: dict[str, str]
    ) -> AgentActor:
        """A new agent, Initializing, with a fresh timeline (a new epoch), listed at once."""
        agent_id = AgentId(self._new_id())
        head = await self._timeline.create(agent_id)
        now = self._clock.now_ms()
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
        )
        actor = AgentActor(agent, self._deps(provider))
        self._actors[agent_id] = actor
        self._publisher.publish(AgentUpserted(agent))
        return actor

    async def _create(self, spec: CreateSpec, provider: Provider) -> tuple[Agent, str]:
        actor = await self._new_actor(
            provider, spec.provider, spec.cwd, spec.title, dict(spec.labels)
        )
        try:
            registered = await actor.call(lambda: actor.register(spec.model, spec.mode))
            turn_id = ""
            if spec.initial_prompt:
                started = await actor.call(
                    lambda: actor.start_turn(spec.initial_prompt, "", IfRunning.REJECT)
                )
                turn_id = started.turn_id
                registered = actor.agent
        except BaseException:
            await self._discard(actor)
            raise
        return registered, turn_id

    async def import_agent(self, provider_name: str, provider_session_id: str, cwd: str) -> Agent:
        """ImportAgent (issue 8, item 6; importing.py): the provider reads the session's
        conversation first (under the create deadline), so a session it cannot read creates
        nothing; then a new agent holds it as history rows under its fresh epoch, idle, and
        its first turn resumes that provider session."""
        self._check_open()
        provider, importer = check_import(
            self._providers, provider_name, provider_session_id, cwd, self.limits
        )
        read = importer.import_history(provider_session_id, cwd, self._daemon_tag)
        items = await deadline(self._clock, self._timeouts.create_session_s, read, "import")
        if not items:
            raise errors.FailedPrecondition(
                f"provider session {provider_session_id!r} holds no conversation to import",
                metadata={"provider": provider_name, "provider_session_id": provider_session_id},
            )
        self._check_open()
        actor = await self._new_actor(provider, provider_name, cwd, "", {})
        try:
            return await actor.call(lambda: actor.prime(items, provider_session_id))
        except BaseException:
            await self._discard(actor)
            raise

    async def _discard(self, actor: AgentActor) -> None:
        """Undo a create that failed half-way: CreateAgent is all or nothing, so no ghost
        agent stays listed and no session is left open."""
        agent_id = actor.agent.id
        self._actors.pop(agent_id, None)
        await actor.shutdown()  # closes the session if one was opened; stops the task
        await self._timeline.drop(agent_id)
        if self._records is not None:
            await self._records.delete(agent_id)
        self._publisher.publish(AgentRemoved(agent_id))

    # --- restart (issue 6, item 4) ------------------------------------------------------------

    async def restore(self, loaded: LoadedAgents) -> None:
        """Start-up: every stored agent comes back in creation order, from its record (headers
        only: no timeline row is read, no provider session opens until a turn needs one; that
        session resumes the stored provider session). The
        timeline's head is authoritative for epoch and next_seq. A record that did not decode,
        or whose timeline is gone, is reported and skipped; the others load. A turn that was
        running ends with "interrupted by a daemon restart" (through the agent's queue)."""
        for bad in loaded.bad:
            log.error("agent %s: its stored record is unreadable (%s); skipped", *bad)
        interrupted: list[AgentActor] = []
        for agent in loaded.agents:
            provider = self._providers.get(agent.provider)
            try:
                head = self._timeline.head(agent.id)
            except KeyError:
                log.error("agent %s: its timeline is missing; skipped", agent.id)
                continue
            if provider is None:
                why = f"provider {agent.provider!r} is not configured"
                log.error("agent %s: %s; skipped", agent.id, why)
                continue
            # provider_session_id stays: the first turn resumes that session (actor_session.py).
            restored = replace(agent, epoch=head.epoch, next_seq=head.next_seq)
            if isinstance(restored.lifecycle, Initializing):
                restored = replace(restored, lifecycle=Idle())  # its create never finished
            actor = AgentActor(restored, self._deps(provider))
            self._actors[agent.id] = actor
            if restored.is_closed:
                actor.retire()
            elif isinstance(restored.lifecycle, Running):
                interrupted.append(actor)
        for actor in interrupted:
            await actor.call(actor.end_interrupted_turn)

    # --- updates -------------------------------------------------------------------------

    async def update(self, agent_id: str, change: AgentUpdate) -> Agent:
        actor = self._actor(agent_id)
        if change.title is not None:
            check_title(change.title, self.limits)
        if change.labels is not None:
            check_labels(change.labels, self.limits)
            self._check_parent(change.labels, agent_id)
        provider = self._providers[actor.agent.provider]
        if change.mode is not None:
            _check_choice(provider, "mode", change.mode)
        if change.model is not None:
            _check_choice(provider, "model", change.model)
        if change == AgentUpdate():
            raise errors.InvalidArgument.field("update_mask", "nothing to update")
        return await actor.call(lambda: _async(actor.update(change)))

    # --- turns ---------------------------------------------------------------------------

    async def send_prompt(
        self, agent_id: str, prompt: Prompt, client_message_id: str, if_running: IfRunning
    ) -> StartedTurn:
        """Start a turn. Its events reach readers through the publisher (the hub): StreamTurn
        follows them there like any other subscriber."""
        self._check_open()
        actor = self._actor(agent_id)
        check_prompt(prompt, self.limits)
        if len(client_message_id) > self.limits.max_id_chars:
            raise errors.InvalidArgument.field(
                "client_message_id", f"at most {self.limits.max_id_chars} chars"
            )
        if if_running is IfRunning.REPLACE and actor.active_turn is not None:
            await self._cancel_for_replace(actor)
        return await actor.call(lambda: actor.start_turn(prompt, client_message_id, if_running))

    async def _cancel_for_replace(self, actor: AgentActor) -> None:
        """REPLACE (seed 000, 5.1): open a handoff (the agent keeps reporting Running), then
        cancel the running turn; a refused cancel closes the handoff and abandons the
        replace: the running turn goes on."""
        turn_id = await actor.call(lambda: _async(actor.open_handoff()))
        if turn_id is None:
            return
        outcome, _ = await self.cancel(actor.agent.id)
        if outcome is CancelOutcome.REFUSED:
            await actor.call(actor.close_handoff)
            raise errors.ProviderRefusedInterrupt(
                f"agent {actor.agent.id!r}: the provider refused to stop turn {turn_id!r}; "
                "the replace was abandoned and that turn goes on",
                metadata={"agent_id": actor.agent.id, "turn_id": turn_id},
            )

    async def add_notice(
        self,
        agent_id: str,
        notice: SubagentNotice,
        wake: Prompt | None = None,
        client_message_id: str = "",
    ) -> None:
        """A sub-agent's result for its requester: the notice row, and with `wake` a turn
        carrying it (queued if the agent is busy), in one step of the agent's queue."""
        actor = self._actor(agent_id)
        if wake is not None:
            self._check_open()
            check_prompt(wake, self.limits)
        await actor.call(lambda: actor.add_notice(notice, wake, client_message_id))

    async def rows_settled(self, agent_id: str) -> None:
        """Until every row the agent has handed to its store so far is stored (a reader that
        fetches next sees them). A closed agent's rows are already settled or about to be."""
        actor = self._actor(agent_id)
        with contextlib.suppress(errors.AgentClosed):
            await actor.call(actor.barrier)

    async def respond_permission(
        self, agent_id: str, request_id: str, response: PermissionResponse
    ) -> Agent:
        """Answer a pending permission (seed 000, section 10)."""
        actor = self._actor(agent_id)
        check_id("request_id", request_id, self.limits)
        return await actor.call(lambda: actor.respond_permission(request_id, response))

    async def rewind(self, agent_id: str, message_id: str) -> Agent:
        """Rewind to before a user message the provider confirmed (seed 000, 6.4)."""
        self._check_open()
        actor = self._actor(agent_id)
        check_id("message_id", message_id, self.limits)
        return await actor.call(lambda: actor.rewind(message_id))

    def queued_prompt(self, agent_id: str, client_message_id: str) -> QueuedPrompt:
        """A queued prompt in full (listings show its summary)."""
        check_id("client_message_id", client_message_id, self.limits)
        for queued in self.get(agent_id).queued_prompts:
            if queued.client_message_id == client_message_id:
                return queued
        raise errors.QueuedPromptNotFound(agent_id, client_message_id)

    def pending_permission(self, agent_id: str, request_id: str) -> PendingPermission:
        """A pending permission request in full (listings clip its input)."""
        check_id("request_id", request_id, self.limits)
        return permissions.find(self.get(agent_id), request_id)

    async def remove_queued(self, agent_id: str, client_message_id: str) -> Agent:
        """Remove a queued prompt before it starts."""
        actor = self._actor(agent_id)
        check_id("client_message_id", client_message_id, self.limits)
        return await actor.call(lambda: _async(actor.remove_queued(client_message_id)))

    async def cancel(self, agent_id: str) -> tuple[CancelOutcome, Agent]:
        """Seed 000, section 5.4: never invent a cancel the provider did not confirm.

        1. Read the running turn on the agent's queue; none: NOT_RUNNING.
        2. Ask the provider to stop exactly that turn (fenced by its id, under the interrupt
           deadline). NOT_RUNNING: it ended by itself meanwhile, and a later turn is never
           touched.
        3. Wait for the turn to settle: it did -> SETTLED; it did not and the provider had
           confirmed -> end it ourselves, SETTLED; it did not and the provider had not
           confirmed -> REFUSED (the turn goes on).
        """
        actor = self._actor(agent_id)
        active = await actor.call(lambda: _async(actor.active_turn))
        if active is None:
            return CancelOutcome.NOT_RUNNING, actor.agent
        outcome = await actor.stop_turn(active)  # steps 2 and 3
        if outcome is CancelOutcome.NOT_RUNNING:
            # It ended by itself: answer with the snapshot after its end, as a settle would.
            await within(self._clock, self._timeouts.settle_s, asyncio.shield(active.settled))
        return outcome, actor.agent

    async def wait_for_idle(
        self, agent_id: str, timeout_s: float | None
    ) -> tuple[WaitStatus, Agent]:
        """Until the agent stops running: IDLE, ERROR, PERMISSION (a pending permission), or
        TIMEOUT after `timeout_s` on the manager's clock (None: no limit)."""
        actor = self._actor(agent_id)
        if timeout_s is not None and not 0 <= timeout_s <= MAX_WAIT_S:
            raise errors.InvalidArgument.field("timeout", f"from 0 to {MAX_WAIT_S:.0f} seconds")
        deadline_ms = None if timeout_s is None else self._clock.now_ms() + timeout_s * 1000
        while True:
            agent = actor.agent
            if agent.pending_permissions:
                return WaitStatus.PERMISSION, agent
            match agent.lifecycle:
                case Idle():
                    return WaitStatus.IDLE, agent
                case Errored():
                    return WaitStatus.ERROR, agent
                case Closed():
                    raise errors.AgentClosed(agent_id)
                case Initializing() | Running():
                    pass
                case _:
                    assert_never(agent.lifecycle)
            if self._shutting_down:
                raise errors.ShuttingDown()
            remaining_s = None
            if deadline_ms is not None:
                remaining_s = (deadline_ms - self._clock.now_ms()) / 1000
                if remaining_s <= 0:
                    return WaitStatus.TIMEOUT, actor.agent
            changed = _first_of(actor.changed.wait(), self._draining.wait())
            if remaining_s is None:
                await changed
                continue
            if not await within(self._clock, remaining_s, _true_after(changed)):
                return WaitStatus.TIMEOUT, actor.agent

    async def clear_attention(self, agent_ids: Sequence[str]) -> list[Agent]:
        """Clear the "unread" mark of each agent (all ids are checked before any changes)."""
        if not agent_ids:
            raise errors.InvalidArgument.field("agent_ids", "name at least one agent")
        # Check every id before changing anything: a request that fails changes nothing.
        actors = [self._actor(agent_id) for agent_id in agent_ids]
        for actor in actors:
            if actor.agent.is_closed:
                raise errors.AgentClosed(actor.agent.id)
        return [await _clear_attention(actor) for actor in actors]

    async def detach(self, agent_id: str) -> Agent:
        """No longer a child: drop the parent label, so cascades never reach it again."""
        actor = self._actor(agent_id)
        return await actor.call(lambda: _async(actor.detach()))

    async def reload(self, agent_id: str, rehydrate: bool) -> Agent:
        """Restart the agent's provider session (seed 000, section 4.2): the running turn is
        canceled first, and a provider that refuses to stop it abandons the reload
        (PROVIDER_REFUSED_INTERRUPT) rather than forcing two turns onto one timeline."""
        self._check_open()
        actor = self._actor(agent_id)
        if actor.active_turn is not None:
            outcome, _ = await self.cancel(agent_id)
            if outcome is CancelOutcome.REFUSED:
                raise errors.ProviderRefusedInterrupt(
                    f"agent {agent_id!r}: the provider refused to stop the running turn; "
                    "the reload was abandoned",
                    metadata={"agent_id": agent_id},
                )
        return await actor.call(lambda: actor.reload(rehydrate))

    # --- archive (seed 000, section 4.3) --------------------------------------------------

    async def archive(self, agent_id: str) -> list[str]:
        """Archive the agent and, by cascade, every descendant that still carries its parent
        label (a detached child is no longer one): each is marked archived and closed, kept
        whole, and hidden from ListAgents unless archived ones are asked for. Returns the ids
        archived, the agent first, then breadth first."""
        self._check_open()
        self._actor(agent_id)
        archived: list[str] = []
        members = self._with_descendants(agent_id)
        if self.on_archive is not None:
            await self.on_archive(members)
        for member in members:
            actor = self._actors[member]
            if actor.agent.is_closed:
                actor.archive_closed()
            else:
                try:
                    await actor.call(actor.archive)
                except errors.AgentClosed:
                    actor.archive_closed()  # closed meanwhile
            self._told_closed(actor)
            archived.append(member)
        return archived

    def _with_descendants(self, agent_id: str) -> list[str]:
        """`agent_id` and its descendants by the parent label, breadth first, each once."""
        children: dict[str, list[str]] = {}
        for other_id, actor in self._actors.items():
            parent = actor.agent.parent_agent_id
            if parent:
                children.setdefault(parent, []).append(other_id)
        order, seen = [agent_id], {agent_id}
        for current in order:
            for child in children.get(current, ()):
                if child not in seen:
                    seen.add(child)
                    order.append(child)
        return order

    # --- close and shutdown --------------------------------------------------------------

    async def close(self, agent_id: str) -> Agent:
        """Concurrent closes of one agent share one outcome."""
        actor = self._actor(agent_id)
        pending = self._closes.get(agent_id)
        if pending is None:
            pending = asyncio.ensure_future(self._close(actor))
            self._closes[agent_id] = pending
        return await asyncio.shield(pending)

    async def _close(self, actor: AgentActor) -> Agent:
        try:
            return await actor.call(actor.close)
        except errors.AgentClosed:
            return actor.agent
        finally:
            self._closes.pop(actor.agent.id, None)
            self._told_closed(actor)

    def _told_closed(self, actor: AgentActor) -> None:
        if self.on_closed is not None and actor.agent.is_closed:
            self.on_closed(actor.agent.id)

    def refuse_new_work(self) -> None:
        """The drain's first step: new turns and creates answer SHUTTING_DOWN from now on,
        and every WaitForIdle ends with it at once."""
        self._shutting_down = True
        self._draining.set()

    async def shutdown(self) -> None:
        """Refuse new work, then stop every actor through its queue (sessions closed under
        their deadlines, records kept). Bounded: actors still busy after
        `Timeouts.shutdown_s` are stopped regardless."""
        self.refuse_new_work()
        actors = list(self._actors.values())
        stopping = asyncio.gather(*(a.shutdown() for a in actors), return_exceptions=True)
        if await within(self._clock, self._timeouts.shutdown_s, stopping) is None:
            for actor in actors:
                actor.kill()
            await asyncio.gather(*(a.stopped() for a in actors))

    # --- helpers ----

    def _deps(self, provider: Provider) -> ActorDeps:
        return ActorDeps(
            provider,
            self._timeline,
            self._publisher,
            self._clock,
            lambda: self._shutting_down,
            self._timeouts,
            self._records,
            self._finished,
            self.presence,
            self.turn_counts,
            self._settled,
            self._daemon_tag,
        )

    def _settled(self, agent: Agent, terminal: TurnTerminal) -> None:
        if self.on_settled is not None:
            self.on_settled(agent, terminal)

    def _actor(self, agent_id: str) -> AgentActor:
        if not agent_id:
            raise errors.InvalidArgument.field("agent_id", "required")
        if len(agent_id) > self.limits.max_id_chars:
            raise errors.InvalidArgument.field(
                "agent_id", f"at most {self.limits.max_id_chars} chars"
            )
        actor = self._actors.get(agent_id)
        if actor is None:
            raise errors.AgentNotFound(agent_id)
        return actor

    def _check_parent(self, labels: Mapping[str, str], agent_id: str | None) -> None:
        """The parent label must name another existing agent and must not close a cycle:
        cascades (archive, kill) walk this tree."""
        parent = labels.get(PARENT_AGENT_ID_LABEL)
        if parent is None:
            return
        field = f"labels[{PARENT_AGENT_ID_LABEL!r}]"
        if parent not in self._actors:
            raise errors.InvalidArgument.field(field, "must name an existing agent")
        seen: set[str] = set()
        cursor: str = parent
        while cursor and cursor not in seen:
            if cursor == agent_id:
                raise errors.InvalidArgument.field(field, "an agent cannot descend from itself")
            seen.add(cursor)
            ancestor = self._actors.get(cursor)
            cursor = ancestor.agent.parent_agent_id if ancestor is not None else ""

    def _check_open(self) -> None:
        if self._shutting_down:
            raise errors.ShuttingDown()

    def _names(self) -> tuple[str, ...]:
        return tuple(sorted(self._providers))


def _check_choice(provider: Provider, field: str, value: str) -> None:
    """`value` must be one of the provider's modes (or models), when it lists any."""
    info = provider.info()
    choices = [m.id for m in (info.modes if field == "mode" else info.models)]
    if choices and value not in choices:
        raise errors.InvalidArgument.field(
            field, f"unknown {field} {value!r}; one of {', '.join(choices)}"
        )


async def _clear_attention(actor: AgentActor) -> Agent:
    try:
        return await actor.call(lambda: _async(actor.clear_attention()))
    except errors.AgentClosed:
        # Closed after the request was checked: its record cannot change any more, and
        # failing now would leave the agents before it cleared: answer it as it is.
        return actor.agent


async def _async(value: T) -> T:
    return value


async def _true_after(wait: Awaitable[object]) -> bool:
    await wait
    return True


async def _first_of(*waits: Coroutine[Any, Any, object]) -> None:
    """Until the first of `waits` finishes (the others are cancelled)."""
    tasks = [asyncio.ensure_future(w) for w in waits]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
