"""The part of an agent's actor for prompts (docs/design.md#turns): starting a turn,
and for prompts sent while one runs QUEUE, STEER, REPLACE's handoff, and what follows a turn;
a sub-agent's notice and its wake. Runs on the actor's queue only."""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import replace
from typing import assert_never

from corral_server import errors
from corral_server.domain import events as ev
from corral_server.domain.agent import (
    Agent,
    AgentError,
    Closed,
    Errored,
    QueuedBy,
    QueuedPrompt,
    Running,
)
from corral_server.domain.content import Prompt, prompt_text
from corral_server.domain.timeline import SubagentNotice, UserMessage
from corral_server.hub import Prepared
from corral_server.manager import titles
from corral_server.manager.actor_core import ActorCore
from corral_server.manager.actor_session import SessionKeeper
from corral_server.manager.deadlines import deadline
from corral_server.manager.echo_book import EchoBook
from corral_server.manager.sanitize import sanitize_text
from corral_server.manager.turns import (
    ActiveTurn,
    Disposition,
    ForegroundRun,
    IfRunning,
    StartedTurn,
)
from corral_server.timeline.store import NewRow

log = logging.getLogger(__name__)

# Prompts one agent may hold queued (each up to a prompt's size limit).
MAX_QUEUED_PROMPTS = 32


class Prompts:
    def __init__(
        self,
        core: ActorCore,
        *,
        sessions: SessionKeeper,
        echoes: EchoBook,
    ) -> None:
        self._core = core
        self._sessions = sessions
        self._echoes = echoes

    @property
    def agent(self) -> Agent:
        return self._core.state.agent

    async def start_turn(
        self, prompt: Prompt, client_message_id: str, if_running: IfRunning, queued_by: QueuedBy
    ) -> StartedTurn:
        """A prompt, decided on the queue (docs/design.md#turns): start a turn when
        none runs; otherwise REJECT (AGENT_BUSY), QUEUE (FIFO in Agent.queued_prompts),
        STEER (into the running turn when the provider can, else queued), or REPLACE (the
        manager canceled the running turn and opened a handoff: start now, as its
        successor)."""
        self._core.state.ensure_open()
        if self._core.deps.is_shutting_down():
            raise errors.ShuttingDown()  # queued before the drain: refused, not acknowledged
        turns = self._core.turns
        replacing = if_running is IfRunning.REPLACE and turns.handoff and turns.active is None
        if turns.busy and not replacing:
            match if_running:
                case IfRunning.REJECT | IfRunning.REPLACE:
                    raise errors.AgentBusy(self.agent.id, turns.busy_turn_id)
                case IfRunning.QUEUE:
                    return await self.enqueue(prompt, client_message_id, queued_by)
                case IfRunning.STEER:
                    return await self._steer_or_queue(prompt, client_message_id, queued_by)
                case _:
                    assert_never(if_running)
        await self._sessions.ensure()
        turn_id = await self._start(
            prompt, client_message_id, self._core.state.snapshot.queued_prompts
        )
        disposition = Disposition.REPLACED if replacing else Disposition.STARTED
        return StartedTurn(disposition, turn_id, client_message_id)

    async def _start(
        self, prompt: Prompt, client_message_id: str, queued_after: tuple[QueuedPrompt, ...]
    ) -> str:
        """Start a turn now: the provider names it, then TurnStarted, Running (with the queue
        left behind), the prompt's row. Ends a handoff either way."""
        deps = self._core.deps
        session = self._sessions.current
        assert session is not None
        handoff, self._core.turns.handoff = self._core.turns.handoff, False
        try:
            deps.provider.validate_prompt(prompt)
            start = session.start_turn(prompt)
            turn_id = await deadline(
                deps.clock, deps.timeouts.start_turn_s, start, "start_turn", deps.call_times
            )
        except Exception as exc:
            if handoff or isinstance(exc, errors.ProviderTimeout):
                # A hung provider, or a successor that could not start: the agent says so
                # instead of looking busy (or idle) for ever.
                code = exc.reason if isinstance(exc, errors.CorralError) else "START_FAILED"
                why = exc.message if isinstance(exc, errors.CorralError) else str(exc)
                error = AgentError(sanitize_text(why)[:500], code)
                self._core.state.set(
                    replace(self._core.state.snapshot, lifecycle=Errored(error), last_error=error)
                )
            raise
        settled = asyncio.get_running_loop().create_future()
        started = self.begin(ForegroundRun(turn_id, settled), queued_after, prompt)
        text = prompt_text(prompt)
        message = UserMessage(text, client_message_id, client_message_id)
        row = NewRow(message, deps.clock.now_ms(), turn_id)
        self._echoes.clear()
        self._echoes.remember(client_message_id, text, self._core.writer.reserved_seq)
        await self._core.writer.append([row], lead=(started,))
        await self._core.state.durable()
        return turn_id

    def begin(
        self,
        active: ActiveTurn,
        queued: tuple[QueuedPrompt, ...] | None = None,
        prompt: Prompt | None = None,
    ) -> Prepared:
        """The manager's own, authoritative turn_started (docs/design.md#turns): the turn
        runs from here; the caller publishes the returned event (a foreground turn, right
        before its prompt's row, once that row is committed: the stream's ack is durable).
        A prompt gives an untitled agent its fallback title (docs/design.md#titles) in the
        same change."""
        started = self._core.deps.publisher.prepare(ev.TurnStarted(self.agent.id, active.turn_id))
        self._core.turns.active = active
        if self._core.deps.counts is not None:
            self._core.deps.counts.started += 1
        agent = self._core.state.snapshot
        queue = agent.queued_prompts if queued is None else queued
        if prompt is not None:
            agent = titles.with_prompt_title(agent, prompt)
        self._core.state.set(
            replace(agent, lifecycle=Running(active.turn_id), queued_prompts=queue)
        )
        return started

    def _enqueue(
        self, prompt: Prompt, client_message_id: str, queued_by: QueuedBy = QueuedBy.CLIENT
    ) -> StartedTurn:
        """QUEUE: the prompt waits in Agent.queued_prompts (FIFO) and starts when the running
        turn ends; the running turn is not marked interrupted (docs/design.md#turns)."""
        self._core.deps.provider.validate_prompt(prompt)
        queued = self._core.state.snapshot.queued_prompts
        if len(queued) >= MAX_QUEUED_PROMPTS:
            raise errors.ResourceExhausted(
                f"agent {self.agent.id!r} already has {len(queued)} queued prompts "
                f"(max_queued_prompts: {MAX_QUEUED_PROMPTS})",
                metadata={"agent_id": self.agent.id, "limit": str(MAX_QUEUED_PROMPTS)},
            )
        client_message_id = client_message_id or f"queued-{uuid.uuid4().hex}"
        if any(q.client_message_id == client_message_id for q in queued):
            raise errors.AlreadyExists(
                f"a prompt with client_message_id {client_message_id!r} is already queued",
                metadata={"client_message_id": client_message_id},
            )
        entry = QueuedPrompt(client_message_id, prompt, self._core.deps.clock.now_ms(), queued_by)
        self._core.state.set(replace(self._core.state.snapshot, queued_prompts=(*queued, entry)))
        return StartedTurn(Disposition.QUEUED, "", client_message_id)

    async def enqueue(
        self, prompt: Prompt, client_message_id: str, queued_by: QueuedBy = QueuedBy.CLIENT
    ) -> StartedTurn:
        """QUEUE, acknowledged once the queue holding the prompt is stored."""
        started = self._enqueue(prompt, client_message_id, queued_by)
        await self._core.state.durable()
        return started

    async def _steer_or_queue(
        self, prompt: Prompt, client_message_id: str, queued_by: QueuedBy = QueuedBy.CLIENT
    ) -> StartedTurn:
        """STEER: into the running turn when the provider takes it (the prompt's row joins
        that turn), else the prompt is queued and the answer says QUEUED."""
        active, session, deps = self._core.turns.active, self._sessions.current, self._core.deps
        if active is not None and session is not None and deps.provider.info().can_steer:
            deps.provider.validate_prompt(prompt)
            try:
                steer = session.steer(active.turn_id, prompt)
                taken = await deadline(
                    deps.clock, deps.timeouts.interrupt_s, steer, "steer", deps.call_times
                )
            except Exception:
                log.warning("agent %s: steer failed; queued", self.agent.id, exc_info=True)
                taken = False
            if taken:
                text = prompt_text(prompt)
                message = UserMessage(text, client_message_id, client_message_id)
                row = NewRow(message, deps.clock.now_ms(), active.turn_id)
                self._echoes.remember(client_message_id, text, self._core.writer.reserved_seq)
                await self._core.writer.append([row])
                return StartedTurn(Disposition.STEERED, active.turn_id, client_message_id)
        return await self.enqueue(prompt, client_message_id, queued_by)

    def remove_queued(self, client_message_id: str) -> Agent:
        queued = self._core.state.snapshot.queued_prompts
        kept = tuple(q for q in queued if q.client_message_id != client_message_id)
        if len(kept) == len(queued):
            raise errors.QueuedPromptNotFound(self.agent.id, client_message_id)
        self._core.state.set(replace(self._core.state.snapshot, queued_prompts=kept))
        return self.agent

    def open_handoff(self) -> str | None:
        """REPLACE, step 1 (on the queue, before the cancel): from now until the successor
        starts, the agent keeps reporting Running (no idle moment any subscriber could see)
        and REJECT prompts stay busy. Returns the running turn's id (None: nothing runs)."""
        return self._core.turns.open_handoff()

    async def close_handoff(self) -> None:
        """REPLACE abandoned (the provider refused to stop the turn): the handoff ends; if
        the turn ended meanwhile, what follows a turn follows now."""
        self._core.turns.handoff = False
        if self._core.turns.active is None and isinstance(
            self._core.state.snapshot.lifecycle, Running
        ):
            self.after_turn()

    def after_turn(self) -> None:
        """No turn runs and none is handed over: start the next queued prompt, else show
        the lifecycle the last turn ended in."""
        if self._core.state.snapshot.queued_prompts and not self._core.deps.is_shutting_down():
            self._core.turns.handoff = True
            self._core.jobs.post(self._start_next_queued)
        elif isinstance(self._core.state.snapshot.lifecycle, Running):
            self._core.state.set(
                replace(self._core.state.snapshot, lifecycle=self._core.turns.ended)
            )

    async def _start_next_queued(self) -> None:
        if self._core.jobs.stopped or isinstance(self._core.state.snapshot.lifecycle, Closed):
            self._core.turns.handoff = False
            return
        if self._core.turns.active is not None:
            self._core.turns.handoff = False  # an autonomous turn took the slot: its end goes on
            return
        queued = self._core.state.snapshot.queued_prompts
        if not queued or self._core.deps.is_shutting_down():
            self._core.turns.handoff = False
            self.after_turn()
            return
        if self._sessions.current is None and not await self._opened_for_queue():
            return
        first = queued[0]
        await self._start(first.content, first.client_message_id, queued[1:])

    async def _opened_for_queue(self) -> bool:
        """A restored agent (its turn ended by the restart) opens its provider session for
        its queue, as a prompt would. One that cannot is errored with the queue kept: never
        retried in a loop (a job that posts itself again never lets the event loop run)."""
        try:
            await self._sessions.ensure()
        except Exception as exc:
            self._core.turns.handoff = False
            why = exc.message if isinstance(exc, errors.CorralError) else str(exc)
            code = exc.reason if isinstance(exc, errors.CorralError) else "START_FAILED"
            error = AgentError(
                sanitize_text(f"the queued prompt could not start: {why}")[:500], code
            )
            self._core.state.set(
                replace(self._core.state.snapshot, lifecycle=Errored(error), last_error=error)
            )
            log.warning("agent %s: %s", self.agent.id, error.message)
            return False
        return True

    async def add_notice(
        self, notice: SubagentNotice, wake: Prompt | None, client_message_id: str
    ) -> None:
        """A sub-agent's result (subagents/announce.py): its notice row, then, when `wake`
        is given, a turn carrying it (queued behind a running one). One step on the queue,
        so the row and the wake are never split by another change of this agent."""
        self._core.state.ensure_open()
        await self._core.writer.flush()
        turn_id = self._core.turns.active.turn_id if self._core.turns.active is not None else ""
        await self._core.writer.append([NewRow(notice, self._core.deps.clock.now_ms(), turn_id)])
        if wake is not None:
            await self.start_turn(wake, client_message_id, IfRunning.QUEUE, QueuedBy.SUBAGENT)
