"""The agent manager: the front door for every command on agents.

It checks a request, finds the agent's actor (directory.py), and calls it: it never changes
an agent's state itself, every change is a call onto that agent's actor (actor.py), the
agent's single writer. It composes the parts beside it and hands each request to its part:
directory.py (which agents exist, listing, the parent tree), creation.py (CreateAgent and its
idempotency, ImportAgent, ImportAgentExport; fork.py builds ForkAgent on it), restore.py
(start-up), waiting.py (WaitForIdle), reads.py (reads by agent id), live_config.py
(UpdateAgent, a reloaded providers file) and stopping.py (cancels, archive, close, the drain).
It owns the wiring every actor gets (`ActorDeps`).
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Mapping, Sequence

from corral_server import errors
from corral_server.clock import Clock
from corral_server.domain.agent import (
    Agent,
    AgentError,
    PendingPermission,
    PermissionResponse,
    QueuedBy,
    QueuedPrompt,
)
from corral_server.domain.content import Prompt
from corral_server.domain.events import TurnTerminal
from corral_server.domain.timeline import Cursor, Direction, FetchResult, SubagentNotice
from corral_server.jobs import done_with
from corral_server.manager import adoption, live_config, stopping
from corral_server.manager.actor import AgentActor
from corral_server.manager.actor_deps import ActorDeps
from corral_server.manager.creation import Creation, RowBatches
from corral_server.manager.deadlines import CallTimes
from corral_server.manager.directory import AgentDirectory, RemoteAgentsView
from corral_server.manager.fork import Fork, ForkSpec, fork_agent
from corral_server.manager.hooks import ManagerHooks
from corral_server.manager.live_config import LiveOutcome, ProviderChange
from corral_server.manager.presence import PresenceBook
from corral_server.manager.reads import AgentReads
from corral_server.manager.restore import restore
from corral_server.manager.specs import AgentUpdate, CreateSpec, Defaults, ListQuery, Timeouts
from corral_server.manager.turn_end import TurnCounts
from corral_server.manager.turns import CancelOutcome, IfRunning, StartedTurn, WaitStatus
from corral_server.manager.usage import UsageBook
from corral_server.manager.validate import (
    Limits,
    check_id,
    check_optional_id,
    check_prompt,
)
from corral_server.manager.waiting import MAX_WAIT_S, wait_for_idle
from corral_server.manager.writer import Publisher
from corral_server.providers.base import Provider, ProviderInfo
from corral_server.records.store import AgentRecords, CreateRequests, FinishedTurns, LoadedAgents
from corral_server.timeline.activity import ActivityDigest
from corral_server.timeline.store import OutputChunk, TimelineStore
from corral_server.workspace.worktrees import Worktrees

__all__ = ["MAX_WAIT_S", "AgentManager"]


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
        worktrees: Worktrees | None = None,
        usage: UsageBook | None = None,
        defaults: Mapping[str, Defaults] | None = None,
        remote: RemoteAgentsView | None = None,
    ) -> None:
        self._providers = dict(providers)
        # Each provider's model and mode for a CreateAgent naming none (a reload moves them).
        self.defaults = dict(defaults or {})
        self._timeline = timeline
        self._publisher = publisher
        self._clock = clock
        self.limits = limits
        self._timeouts = timeouts
        self._records = records
        self._finished = finished
        # Every agent process carries it (providers/reaping.py): a daemon restarted on the
        # same state directory reaps what this one leaves if it is killed.
        self._daemon_tag = daemon_tag
        # Clients' presence (Heartbeat), for the notification plan of attention events.
        self.presence = PresenceBook()
        # Turns started and ended, by outcome, and how long provider calls took (read by the
        # metrics endpoint).
        self.turn_counts = TurnCounts()
        self.call_times = CallTimes()
        self.usage = usage or UsageBook()  # completed turns' usage (GetUsage, the metrics)
        # `remote`: a cluster node's view of the agents other nodes own (cluster/).
        self._agents = AgentDirectory(limits, remote)
        self._reads = AgentReads(self._agents, timeline, limits)
        # Refused by refuse_new_work (the drain).
        self._new_work = stopping.NewWork()
        self._creation = Creation(
            providers=self._providers,
            directory=self._agents,
            timeline=timeline,
            publisher=publisher,
            clock=clock,
            limits=limits,
            timeouts=timeouts,
            deps=self._deps,
            check_open=self._new_work.check,
            new_id=new_id,
            records=records,
            requests=requests,
            daemon_tag=daemon_tag,
            worktrees=worktrees or Worktrees(),
            defaults=self.defaults,
            call_times=self.call_times,
        )
        self.hooks = ManagerHooks()  # app.py sets them, field by field
        self._stopping = stopping.Stopping(
            self._agents, self._new_work, clock, timeouts.shutdown_s, self.hooks
        )

    # --- reads ---------------------------------------------------------------------------

    def get(self, agent_id: str) -> Agent:
        return self._agents.agent(agent_id)

    def agents(self) -> list[Agent]:
        """Every agent's current snapshot (for the metrics endpoint)."""
        return self._agents.agents()

    def snapshot(self, agent_ids: frozenset[str]) -> list[Agent]:
        """Every agent in scope (empty = all), for a fresh subscription."""
        return self._agents.snapshot(agent_ids)

    def list_agents(self, query: ListQuery) -> tuple[list[Agent], str]:
        """Agents in creation order, a page at a time (directory.py)."""
        return self._agents.page(query)

    async def fetch_timeline(
        self, agent_id: str, direction: Direction, cursor: Cursor | None, limit: int | None
    ) -> FetchResult:
        return await self._reads.fetch_timeline(agent_id, direction, cursor, limit)

    async def fetch_tool_output(
        self, agent_id: str, blob_id: str, offset: int, limit: int
    ) -> OutputChunk:
        return await self._reads.fetch_tool_output(agent_id, blob_id, offset, limit)

    async def tool_output_id(self, agent_id: str, cursor: Cursor) -> str:
        return await self._reads.tool_output_id(agent_id, cursor)

    async def activity(
        self, agent_id: str, start: Cursor | None, end: Cursor | None, max_chars: int
    ) -> ActivityDigest:
        """A plain-text digest of rows start..end (reads.py)."""
        return await self._reads.activity(agent_id, start, end, max_chars)

    def queued_prompt(self, agent_id: str, client_message_id: str) -> QueuedPrompt:
        return self._reads.queued_prompt(agent_id, client_message_id)

    def pending_permission(self, agent_id: str, request_id: str) -> PendingPermission:
        return self._reads.pending_permission(agent_id, request_id)

    def providers_info(self) -> list[ProviderInfo]:
        return [p.info() for p in self._providers.values()]

    # --- create, import, restore ------------------------------------------------------------

    async def create(self, spec: CreateSpec) -> tuple[Agent, str]:
        """Create an agent (and start its initial prompt); idempotent by request id."""
        return await self._creation.create(spec)

    async def import_agent(self, provider_name: str, provider_session_id: str, cwd: str) -> Agent:
        """ImportAgent: a new idle agent holding a provider session's conversation."""
        return await self._creation.import_agent(provider_name, provider_session_id, cwd)

    async def import_rows(self, spec: CreateSpec, batches: RowBatches) -> Agent:
        """ImportAgentExport: a new idle agent holding an export's rows (creation.py)."""
        return await self._creation.import_rows(spec, batches)

    async def fork(self, spec: ForkSpec) -> Fork:
        """ForkAgent: a new agent continuing another's conversation from a cut (fork.py)."""
        return await fork_agent(self._creation, spec)

    async def restore(self, loaded: LoadedAgents) -> None:
        """Start-up: every stored agent comes back in creation order (restore.py)."""
        await restore(
            loaded,
            directory=self._agents,
            providers=self._providers,
            timeline=self._timeline,
            deps=self._deps,
        )

    async def adopt(self, agent: Agent, error: AgentError | None) -> bool:
        """Cluster: an agent taken over from a lost node, restored here (adoption.py)."""
        return await adoption.adopt(
            agent,
            error,
            directory=self._agents,
            providers=self._providers,
            timeline=self._timeline,
            deps=self._deps,
        )

    async def release(self, agent_id: str) -> Agent:
        """Cluster: the agent handed to another node (ReloadAgent {node}; adoption.py)."""
        actor = self._actor(agent_id)
        return await adoption.release(actor, self._clock, self._timeouts, self._agents)

    async def drop(self, agent_id: str) -> None:
        """Cluster: the agent's writes stopped (its channel broke): stopped here (adoption.py)."""
        actor = self._agents.find(agent_id)
        if actor is not None:
            await adoption.drop(actor, self._clock, self._timeouts, self._agents)

    # --- updates -------------------------------------------------------------------------

    async def update(self, agent_id: str, change: AgentUpdate) -> Agent:
        """UpdateAgent (live_config.py)."""
        return await live_config.update(self._actor(agent_id), change, self.limits, self._agents)

    async def apply_providers(
        self, changes: Mapping[str, ProviderChange], removed: Sequence[str]
    ) -> LiveOutcome:
        """A reloaded providers file (live_config.py)."""
        actors = list(self._agents.actors.values())
        return await live_config.apply(actors, changes, removed, self._providers, self.defaults)

    # --- turns ---------------------------------------------------------------------------

    async def send_prompt(
        self, agent_id: str, prompt: Prompt, client_message_id: str, if_running: IfRunning
    ) -> StartedTurn:
        """Start a turn. Its events reach readers through the publisher (the hub): StreamTurn
        follows them there like any other subscriber."""
        self._check_open()
        actor = self._actor(agent_id)
        check_prompt(prompt, self.limits)
        check_optional_id("client_message_id", client_message_id, self.limits)
        if if_running is IfRunning.REPLACE and actor.active_turn is not None:
            await stopping.cancel_for_replace(actor, self._clock, self._timeouts)
        by = QueuedBy.CLIENT
        return await actor.call(lambda: actor.start_turn(prompt, client_message_id, if_running, by))

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
        """Until every row the agent has handed to its timeline store so far is stored (a reader
        that fetches next sees them). A closed agent's rows are already settled or about to be."""
        actor = self._actor(agent_id)
        with contextlib.suppress(errors.AgentClosed):
            await actor.call(actor.barrier)

    async def respond_permission(
        self, agent_id: str, request_id: str, response: PermissionResponse
    ) -> Agent:
        """Answer a pending permission (docs/design.md#permissions)."""
        actor = self._actor(agent_id)
        check_id("request_id", request_id, self.limits)
        return await actor.call(lambda: actor.respond_permission(request_id, response))

    async def rewind(self, agent_id: str, message_id: str) -> Agent:
        """Rewind to before a user message the provider confirmed
        (docs/design.md#echo-and-rewind)."""
        self._check_open()
        actor = self._actor(agent_id)
        check_id("message_id", message_id, self.limits)
        return await actor.call(lambda: actor.rewind(message_id))

    async def remove_queued(self, agent_id: str, client_message_id: str) -> Agent:
        """Remove a queued prompt before it starts."""
        actor = self._actor(agent_id)
        check_id("client_message_id", client_message_id, self.limits)
        return await actor.call(lambda: done_with(actor.remove_queued(client_message_id)))

    async def cancel(self, agent_id: str) -> tuple[CancelOutcome, Agent]:
        """CancelTurn: SETTLED, REFUSED or NOT_RUNNING, never a cancel the provider did not
        confirm (stopping.py numbers the steps)."""
        return await stopping.cancel(self._actor(agent_id), self._clock, self._timeouts)

    async def wait_for_idle(
        self, agent_id: str, timeout_s: float | None
    ) -> tuple[WaitStatus, Agent]:
        """Until the agent stops running: IDLE, ERROR, PERMISSION (a pending permission), or
        TIMEOUT after `timeout_s` on the manager's clock (None: no limit)."""
        actor = self._actor(agent_id)
        return await wait_for_idle(actor, self._clock, timeout_s, self._new_work)

    async def clear_attention(self, agent_ids: Sequence[str]) -> list[Agent]:
        """Clear the "unread" mark of each agent (all ids are checked before any changes)."""
        return [await _clear_attention(actor) for actor in self._agents.open_actors(agent_ids)]

    async def detach(self, agent_id: str) -> Agent:
        """No longer a child: drop the parent label, so cascades never reach it again."""
        actor = self._actor(agent_id)
        return await actor.call(lambda: done_with(actor.detach()))

    async def reload(self, agent_id: str, rehydrate: bool) -> Agent:
        """Restart the agent's provider session (docs/design.md#resume), the running turn
        canceled first (stopping.py)."""
        self._check_open()
        actor = self._actor(agent_id)
        await stopping.cancel_for_reload(actor, self._clock, self._timeouts)
        return await actor.call(lambda: actor.reload(rehydrate))

    # --- archive, close and shutdown ---------------------------------------------------------

    async def archive(self, agent_id: str) -> list[str]:
        """The agent and its descendants archived (stopping.py); their ids, breadth first."""
        return await self._stopping.archive(agent_id)

    async def close(self, agent_id: str) -> Agent:
        """Concurrent closes of one agent share one outcome."""
        return await self._stopping.close(agent_id)

    def refuse_new_work(self) -> None:
        """The drain's first step: new turns and creates answer SHUTTING_DOWN from now on,
        and every WaitForIdle ends with it at once."""
        self._new_work.refuse()

    async def shutdown(self) -> None:
        """Refuse new work, then stop every actor (bounded by `Timeouts.shutdown_s`)."""
        await self._stopping.shutdown()

    # --- helpers ----

    def _deps(self, provider: Provider) -> ActorDeps:
        return ActorDeps(
            provider=provider,
            timeline=self._timeline,
            publisher=self._publisher,
            clock=self._clock,
            is_shutting_down=self._new_work.is_refused,
            timeouts=self._timeouts,
            records=self._records,
            finished=self._finished,
            presence=self.presence,
            counts=self.turn_counts,
            usage=self.usage,
            settled=self._settled,
            daemon_tag=self._daemon_tag,
            call_times=self.call_times,
        )

    def _settled(self, agent: Agent, terminal: TurnTerminal) -> None:
        if self.hooks.on_settled is not None:
            self.hooks.on_settled(agent, terminal)

    def _actor(self, agent_id: str) -> AgentActor:
        return self._agents.actor(agent_id)

    def _check_open(self) -> None:
        self._new_work.check()


async def _clear_attention(actor: AgentActor) -> Agent:
    try:
        return await actor.call(lambda: done_with(actor.clear_attention()))
    except errors.AgentClosed:
        # Closed after the request was checked: its record cannot change any more, and
        # failing now would leave the agents before it cleared: answer it as it is.
        return actor.agent
