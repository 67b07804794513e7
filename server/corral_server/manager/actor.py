"""One agent's actor: the single writer of its state and timeline (docs/design.md#durability).

Every change to the agent goes through `_jobs` (a `jobs.JobQueue`), processed by one task in
order: RPC commands (`call`), provider events (the session's sink adds them to the inbox,
whose one drain is a job), coalescer timers, and shutdown. So seqs are assigned in one order,
and provider events that arrive while a command awaits the provider (for example before
`start_turn` returns a turn id) wait behind it: staging for free (docs/design.md#turns).

A timeline writer step stores nothing it does not publish (writer.py owns the row path: sanitize at
the provider boundary, encode, store, publish). Any step that still fails ends the running
turn as turn_failed, with an error row, and leaves the agent errored: never stuck in running.

Provider calls run under deadlines on the clock (specs.Timeouts) and carry the turn they are
meant for, so a late interrupt can never stop the next turn.

Readers (RPCs, subscribers) only read `agent`, which the actor replaces whole.

Built from parts that own their state and are called, never inherited: the queue
(jobs.py), the provider-event inbox (inbox.py), the turn book (turn_book.py: active turn,
handoff, finished turns, ownership), the snapshot and its one setter (agent_state.py), echo
reconciliation's memory (echo_book.py), the provider session (actor_session.py), prompts and
the queue of them (actor_prompts.py), permissions and follow-ups (actor_permissions.py), what
came before (actor_history.py: history replay, imports, Rewind, ReloadAgent, restart),
stopping (actor_ending.py), the end of a turn as a pure function (turn_end.py) and the
timeline writer (writer.py). This module wires them, routes provider events, and ends turns
with what turn_end.py decides.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import NamedTuple, TypeVar

from corral_server import errors
from corral_server.domain import events as ev
from corral_server.domain.agent import (
    Agent,
    AgentError,
    PermissionResponse,
    QueuedBy,
)
from corral_server.domain.content import Prompt
from corral_server.domain.timeline import SubagentNotice
from corral_server.jobs import JobQueue
from corral_server.manager.actor_core import ActorCore
from corral_server.manager.actor_deps import ActorDeps
from corral_server.manager.actor_ending import WRITER_FAILED, Ending
from corral_server.manager.actor_history import HistoryKeeper
from corral_server.manager.actor_live import LiveDesk
from corral_server.manager.actor_permissions import PermissionDesk
from corral_server.manager.actor_prompts import Prompts
from corral_server.manager.actor_session import SessionKeeper
from corral_server.manager.agent_state import AgentState
from corral_server.manager.echo_book import EchoBook
from corral_server.manager.inbox import ProviderInbox
from corral_server.manager.provider_events import ProviderEvents
from corral_server.manager.specs import AgentUpdate
from corral_server.manager.turn_book import TurnBook
from corral_server.manager.turn_end import end_turn
from corral_server.manager.turns import (
    ActiveTurn,
    CancelOutcome,
    IfRunning,
    StartedTurn,
)
from corral_server.manager.writer import TimelineWriter
from corral_server.providers.base import (
    InterruptResult,
    Provider,
    ProviderEvent,
    ProviderItem,
)
from corral_server.timeline.store import NewRow

T = TypeVar("T")
log = logging.getLogger(__name__)


class _Parts(NamedTuple):
    sessions: SessionKeeper
    prompts: Prompts
    permissions: PermissionDesk
    ending: Ending
    history: HistoryKeeper
    inbox: ProviderInbox
    live: LiveDesk


class AgentActor:
    def __init__(self, agent: Agent, deps: ActorDeps) -> None:
        self._agent_id = agent.id
        self._deps = deps
        writer = self._new_writer(agent.epoch, agent.next_seq)
        # The snapshot and the one way it changes (agent_state.py).
        self._state = AgentState(agent, deps, lambda: self._core.writer)
        # The active turn, the handoff, the ended lifecycle, the finished turns.
        self._turns = TurnBook(agent.id, deps.finished)
        # Echo reconciliation: the running turn's prompt rows.
        self._echoes = EchoBook()
        # The serial queue every change goes through (jobs.py). Its task starts with a job
        # and ends when the queue runs empty: an idle agent costs no task (start-up time with
        # many agents, memory per idle agent). Stopped once closed or shut down.
        self._jobs = JobQueue(
            f"agent-actor:{agent.id}",
            refusal=lambda: errors.AgentClosed(self._agent_id),
            on_error=lambda exc, awaited: self._parts.ending.job_failed(exc, awaited),
        )
        self._core = ActorCore(deps, self._state, self._jobs, self._turns, writer)
        # The parts that act (below) are built at the agent's first change, not here: most
        # restored agents stay idle, and building them was a third of start-up with 10,000.
        self._built: _Parts | None = None

    @property
    def _parts(self) -> _Parts:
        parts = self._built
        if parts is None:
            parts = self._built = self._wire_parts(self._core)
        return parts

    def _wire_parts(self, core: ActorCore) -> _Parts:
        # The provider session, opened, resumed, lost and closed (actor_session.py).
        sessions = SessionKeeper(core, on_event=self._on_provider_event, finish=self._finish)
        # Starting turns, the prompt queue, steer, REPLACE's handoff (actor_prompts.py).
        prompts = Prompts(core, sessions=sessions, echoes=self._echoes)
        # Pending permissions, answers and follow-ups (actor_permissions.py).
        permissions = PermissionDesk(core, sessions=sessions, control=self, finish=self._finish)
        # Interrupts, close, archive, shutdown, kill; failed jobs (actor_ending.py).
        ending = Ending(core, sessions=sessions, permissions=permissions, finish=self._finish)
        # History replay, imports, echoes, rewind, reload, restart (actor_history.py).
        history = HistoryKeeper(
            core,
            new_writer=self._install_writer,
            sessions=sessions,
            echoes=self._echoes,
            register=self.register,
            finish=self._finish,
        )
        # What each provider event changes (provider_events.py); they wait in the inbox,
        # and one queued job drains them in order, in one batch.
        events = ProviderEvents(
            core,
            prompts=prompts,
            history=history,
            permissions=permissions,
            finish=self._finish,
        )
        inbox = ProviderInbox(events, self._jobs.post)
        # Live model and mode changes, and restarts for a changed provider (actor_live.py).
        live = LiveDesk(core, sessions=sessions, drain=inbox.drain_now)
        return _Parts(sessions, prompts, permissions, ending, history, inbox, live)

    def _new_writer(self, epoch: str, next_seq: int) -> TimelineWriter:
        deps = self._deps
        return TimelineWriter(
            self._agent_id,
            epoch,
            next_seq,
            timeline=deps.timeline,
            publisher=deps.publisher,
            clock=deps.clock,
            on_window=lambda: self._jobs.post(self._flush_window),
        )

    async def _flush_window(self) -> None:
        """The coalescer's window passed: its row goes to the store, and the queue does not
        wait for the commit (the next fragments are coalesced meanwhile: waiting held a burst
        in the inbox for a whole commit). A failed commit breaks the writer; a job of its own
        then raises it (the queue's on_error fails the turn), unless a step before it did."""
        writer = self._writer

        def committed(stored: asyncio.Future[None]) -> None:
            if stored.cancelled() or stored.exception() is not None:
                self._jobs.post(writer.barrier)

        writer.flush_nowait().add_done_callback(committed)

    def _install_writer(self, epoch: str, next_seq: int) -> TimelineWriter:
        """A re-based timeline (rewind, rehydrating reload) gets a timeline writer of its own."""
        self._core.writer = self._new_writer(epoch, next_seq)
        return self._core.writer

    @property
    def _writer(self) -> TimelineWriter:
        return self._core.writer

    # --- the serial queue ---------------------------------------------------------------

    async def call(self, op: Callable[[], Awaitable[T]]) -> T:
        """Run `op` on the actor, after everything queued before it, and return its result."""
        return await self._jobs.call(op)

    @property
    def agent(self) -> Agent:
        """The current snapshot, for readers."""
        return self._state.agent

    @property
    def active_turn(self) -> ActiveTurn | None:
        return self._turns.active

    async def register(self, model: str, mode: str) -> Agent:
        """Open the agent's first provider session, then go idle (actor_session.py)."""
        return await self._parts.sessions.register(model, mode)

    def _on_provider_event(self, event: ProviderEvent) -> None:
        if not self._jobs.stopped:
            self._parts.inbox.add(event)

    # --- state ---------------------------------------------------------------------------

    @property
    def changed(self) -> asyncio.Event:
        """Set at the next change of the snapshot (a fresh event per change)."""
        return self._state.changed

    def update(self, change: AgentUpdate) -> Agent:
        return self._state.update(change)

    async def update_live(self, change: AgentUpdate) -> Agent:
        """UpdateAgent, a model or mode change going to the provider first (actor_live.py)."""
        return await self._parts.live.update(change)

    async def restart_with(self, provider: Provider) -> bool:
        return await self._parts.live.restart_with(provider)

    @property
    def provider(self) -> Provider:
        """The provider the agent runs with now (a restart that waits changes it later)."""
        return self._core.deps.provider

    @property
    def restart_pending(self) -> bool:
        return self._parts.live.pending is not None

    def clear_attention(self) -> Agent:
        return self._state.clear_attention()

    def detach(self) -> Agent:
        return self._state.detach()

    def errored(self, error: AgentError) -> Agent:
        """Errored with `error` (an agent taken over from a lost node, adoption.py)."""
        self._state.errored(error)
        return self._state.agent

    async def respond_permission(self, request_id: str, response: PermissionResponse) -> Agent:
        """RespondToPermission (actor_permissions.py), on the queue."""
        return await self._parts.permissions.respond(request_id, response)

    async def prime(self, items: Sequence[ProviderItem], provider_session_id: str) -> Agent:
        return await self._parts.history.prime(items, provider_session_id)

    async def end_interrupted_turn(self) -> None:
        await self._parts.history.end_interrupted_turn()

    async def reload(self, rehydrate: bool) -> Agent:
        return await self._parts.history.reload(rehydrate)

    async def rewind(self, message_id: str) -> Agent:
        return await self._parts.history.rewind(message_id)

    # --- stopping (actor_ending.py) --------------------------------------------------------

    async def interrupt(self, turn_id: str) -> InterruptResult:
        return await self._parts.ending.interrupt(turn_id)

    async def stop_turn(self, active: ActiveTurn) -> CancelOutcome:
        return await self._parts.ending.stop_turn(active)

    async def close(self) -> Agent:
        return await self._parts.ending.close()

    async def archive(self) -> Agent:
        return await self._parts.ending.archive()

    def archive_closed(self) -> Agent:
        return self._parts.ending.archive_closed()

    async def shutdown(self) -> None:
        await self._parts.ending.shutdown()

    def retire(self) -> None:
        self._parts.ending.retire()

    def kill(self) -> None:
        self._parts.ending.kill()

    async def stopped(self) -> None:
        await self._parts.ending.stopped()

    # --- prompts (actor_prompts.py) --------------------------------------------------------

    async def start_turn(
        self, prompt: Prompt, client_message_id: str, if_running: IfRunning, queued_by: QueuedBy
    ) -> StartedTurn:
        return await self._parts.prompts.start_turn(
            prompt, client_message_id, if_running, queued_by
        )

    def remove_queued(self, client_message_id: str) -> Agent:
        return self._parts.prompts.remove_queued(client_message_id)

    def open_handoff(self) -> str | None:
        return self._turns.open_handoff()

    async def close_handoff(self) -> None:
        await self._parts.prompts.close_handoff()

    async def add_notice(
        self, notice: SubagentNotice, wake: Prompt | None, client_message_id: str
    ) -> None:
        await self._parts.prompts.add_notice(notice, wake, client_message_id)

    async def barrier(self) -> None:
        """Until every row handed to the timeline store so far is stored and published."""
        await self._writer.barrier()

    # --- ending turns ----------------------------------------------------------------------

    async def _finish(self, active: ActiveTurn, terminal: ev.TurnTerminal) -> None:
        """End `active` with `terminal` (turn_end.py decides the values): its pending row, a
        row saying how it ended (failed or canceled), its unanswered requests, the terminal
        event, the new snapshot, attention. Always ends the turn: a pending row that cannot
        be stored turns the end into a WRITER_FAILED failure."""
        terminal = await self._flushed(active, terminal)
        now = self._deps.clock.now_ms()
        successor = self._turns.handoff or bool(self._state.snapshot.queued_prompts)
        end = end_turn(self._state.snapshot, terminal, successor, now)
        if end.closing_row is not None:
            try:
                await self._writer.append([NewRow(end.closing_row, now, active.turn_id)])
            except Exception:
                log.exception("agent %s: a turn's closing row could not be stored", self.agent.id)
        # A turn's unanswered requests end with it (docs/design.md#permissions).
        asked = {
            p.id for p in self._state.snapshot.pending_permissions if p.turn_id == active.turn_id
        }
        self._parts.permissions.resolve(asked, None)
        self._turns.finish(active)
        self._turns.ended = end.ended
        if self._deps.counts is not None:
            self._deps.counts.count_end(terminal)
        usage = terminal.usage if isinstance(terminal, ev.TurnCompleted) else None
        if usage is not None and self._deps.usage is not None:
            self._deps.usage.record(self.agent, active.turn_id, usage, now)
        publisher = self._deps.publisher
        self._writer.publish((publisher.prepare(terminal),))
        pending = self._state.snapshot.pending_permissions
        self._state.set(
            self._parts.sessions.with_session_id(replace(end.snapshot, pending_permissions=pending))
        )
        if end.attention is not None:
            self._writer.publish((publisher.prepare(self._state.attention(end.attention)),))
        if not active.settled.done():
            active.settled.set_result(terminal)
        if not successor:
            self._deps.settled(self._state.snapshot, terminal)
        if not successor:
            self._parts.live.settled()
        if successor and not self._turns.handoff:
            self._parts.prompts.after_turn()

    async def _flushed(self, active: ActiveTurn, terminal: ev.TurnTerminal) -> ev.TurnTerminal:
        """The turn's pending row stored, and every row handed over before it (a row the
        coalescer's window sent without waiting may still be in flight: the agent is idle
        only once its turn's rows are stored): `terminal`, or a WRITER_FAILED failure if one
        could not be (the row is dropped; the turn ends either way)."""
        try:
            await self._writer.flush()
            await self._writer.barrier()
        except Exception:
            log.exception("agent %s: the last row of a turn could not be stored", self.agent.id)
            self._writer.discard_pending()
            error = AgentError("corral could not record the end of the turn", WRITER_FAILED)
            return ev.TurnFailed(self.agent.id, active.turn_id, error)
        return terminal
