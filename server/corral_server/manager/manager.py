"""The agent manager: the front door for every command on agents.

It checks a request, finds the agent's actor (directory.py), and calls it: it never changes
an agent's state itself, every change is a call onto that agent's actor (actor.py), the
agent's single writer. It composes the parts beside it; callers reach three of them directly:
`directory` (directory.py: which agents exist, listing, snapshots, the parent tree), `reads`
(reads.py: timeline pages, tool output, activity, a queued prompt or a pending permission)
and `creation` (creation.py: CreateAgent and its idempotency, ImportAgent, ImportAgentExport).
The others it calls itself: fork.py (ForkAgent, built on creation), restore.py (start-up),
waiting.py (WaitForIdle), live_config.py (UpdateAgent, a reloaded providers file) and
stopping.py (cancels, archive, close, the drain). The wiring every actor gets is
actor_deps.py's `ActorWiring`.
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
    PermissionResponse,
    QueuedBy,
)
from corral_server.domain.content import Prompt
from corral_server.domain.timeline import SubagentNotice
from corral_server.jobs import done_with
from corral_server.manager import adoption, live_config, stopping
from corral_server.manager.actor import AgentActor
from corral_server.manager.actor_deps import ActorWiring
from corral_server.manager.creation import Creation
from corral_server.manager.deadlines import CallTimes
from corral_server.manager.directory import AgentDirectory, RemoteAgentsView
from corral_server.manager.fork import Fork, ForkSpec, fork_agent
from corral_server.manager.hooks import ManagerHooks
from corral_server.manager.live_config import LiveOutcome, ProviderChange
from corral_server.manager.presence import PresenceBook
from corral_server.manager.reads import AgentReads
from corral_server.manager.restore import restore
from corral_server.manager.specs import AgentUpdate, CreateSpec, Defaults, Timeouts
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
from corral_server.timeline.store import TimelineStore
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
        self.limits = limits
        self._new_work = stopping.NewWork()  # refused by refuse_new_work (the drain)
        self.hooks = ManagerHooks()  # app.py sets them, field by field
        # The books the metrics endpoint, Heartbeat and GetUsage read (actor_deps.py).
        self.presence, self.turn_counts = PresenceBook(), TurnCounts()
        self.call_times, self.usage = CallTimes(), usage or UsageBook()
        self._wiring = ActorWiring(
            timeline=timeline,
            publisher=publisher,
            clock=clock,
            is_shutting_down=self._new_work.is_refused,
            timeouts=timeouts,
            records=records,
            finished=finished,
            presence=self.presence,
            counts=self.turn_counts,
            hooks=self.hooks,
            usage=self.usage,
            daemon_tag=daemon_tag,
            call_times=self.call_times,
        )
        # The parts callers reach directly (`remote`: the agents other cluster nodes own).
        self.directory = AgentDirectory(limits, remote)
        self.reads = AgentReads(self.directory, timeline, limits)
        self.creation = Creation(
            providers=self._providers,
            directory=self.directory,
            wiring=self._wiring,
            limits=limits,
            check_open=self._new_work.check,
            new_id=new_id,
            requests=requests,
            worktrees=worktrees or Worktrees(),
            defaults=self.defaults,
        )
        self._stopping = stopping.Stopping(
            self.directory, self._new_work, clock, timeouts.shutdown_s, self.hooks
        )

    # --- reads ---------------------------------------------------------------------------

    def get(self, agent_id: str) -> Agent:
        return self.directory.agent(agent_id)

    def providers_info(self) -> list[ProviderInfo]:
        return [p.info() for p in self._providers.values()]

    # --- create, import, restore ------------------------------------------------------------

    async def create(self, spec: CreateSpec) -> tuple[Agent, str]:
        """Create an agent (and start its initial prompt); idempotent by request id."""
        return await self.creation.create(spec)

    async def fork(self, spec: ForkSpec) -> Fork:
        """ForkAgent: a new agent continuing another's conversation from a cut (fork.py)."""
        return await fork_agent(self.creation, spec)

    async def restore(self, loaded: LoadedAgents) -> None:
        """Start-up: every stored agent comes back in creation order (restore.py)."""
        await restore(
            loaded,
            directory=self.directory,
            providers=self._providers,
            timeline=self._wiring.timeline,
            deps=self._wiring.deps,
        )

    async def adopt(self, agent: Agent, error: AgentError | None) -> bool:
        """Cluster: an agent taken over from a lost node, restored here (adoption.py)."""
        return await adoption.adopt(
            agent,
            error,
            directory=self.directory,
            providers=self._providers,
            timeline=self._wiring.timeline,
            deps=self._wiring.deps,
        )

    async def release(self, agent_id: str) -> Agent:
        """Cluster: the agent handed to another node (ReloadAgent {node}; adoption.py)."""
        actor = self._actor(agent_id)
        w = self._wiring
        return await adoption.release(actor, w.clock, w.timeouts, self.directory)

    async def drop(self, agent_id: str) -> None:
        """Cluster: the agent's writes stopped (its channel broke): stopped here (adoption.py)."""
        actor = self.directory.find(agent_id)
        if actor is not None:
            await adoption.drop(actor, self._wiring.clock, self._wiring.timeouts, self.directory)

    # --- updates -------------------------------------------------------------------------

    async def update(self, agent_id: str, change: AgentUpdate) -> Agent:
        """UpdateAgent (live_config.py)."""
        return await live_config.update(self._actor(agent_id), change, self.limits, self.directory)

    async def apply_providers(
        self, changes: Mapping[str, ProviderChange], removed: Sequence[str]
    ) -> LiveOutcome:
        """A reloaded providers file (live_config.py)."""
        actors = list(self.directory.actors.values())
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
            await stopping.cancel_for_replace(actor, self._wiring.clock, self._wiring.timeouts)
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
        return await stopping.cancel(
            self._actor(agent_id), self._wiring.clock, self._wiring.timeouts
        )

    async def wait_for_idle(
        self, agent_id: str, timeout_s: float | None
    ) -> tuple[WaitStatus, Agent]:
        """Until the agent stops running: IDLE, ERROR, PERMISSION (a pending permission), or
        TIMEOUT after `timeout_s` on the manager's clock (None: no limit)."""
        actor = self._actor(agent_id)
        return await wait_for_idle(actor, self._wiring.clock, timeout_s, self._new_work)

    async def clear_attention(self, agent_ids: Sequence[str]) -> list[Agent]:
        """Clear the "unread" mark of each agent (all ids are checked before any changes)."""
        return [await _clear_attention(actor) for actor in self.directory.open_actors(agent_ids)]

    async def detach(self, agent_id: str) -> Agent:
        """No longer a child: drop the parent label, so cascades never reach it again."""
        actor = self._actor(agent_id)
        return await actor.call(lambda: done_with(actor.detach()))

    async def reload(self, agent_id: str, rehydrate: bool) -> Agent:
        """Restart the agent's provider session (docs/design.md#resume), the running turn
        canceled first (stopping.py)."""
        self._check_open()
        actor = self._actor(agent_id)
        await stopping.cancel_for_reload(actor, self._wiring.clock, self._wiring.timeouts)
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

    def _actor(self, agent_id: str) -> AgentActor:
        return self.directory.actor(agent_id)

    def _check_open(self) -> None:
        self._new_work.check()


async def _clear_attention(actor: AgentActor) -> Agent:
    try:
        return await actor.call(lambda: done_with(actor.clear_attention()))
    except errors.AgentClosed:
        # Closed after the request was checked: its record cannot change any more, and
        # failing now would leave the agents before it cleared: answer it as it is.
        return actor.agent
