"""One agent's actor: the single writer of its state and timeline (seed 000, section 6.1).

Every change to the agent goes through `_queue`, processed by one task in order: RPC commands
(`call`), provider events (the session's sink posts them) and coalescer timers. So seqs are
assigned in one order, and provider events that arrive while a command awaits the provider
(for example before `start_turn` returns a turn id) wait behind it: staging for free
(seed 000, section 5.2). Order of effects: persist first, then publish, then notify waiters.

Readers (RPCs, subscribers) only read `agent`, which the actor replaces whole.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol, TypeVar, assert_never

from corral_server import errors
from corral_server.clock import Clock, TimerHandle
from corral_server.domain import events as ev
from corral_server.domain.agent import (
    PARENT_AGENT_ID_LABEL,
    Agent,
    Attention,
    AttentionReason,
    Closed,
    Errored,
    Idle,
    Initializing,
    Running,
)
from corral_server.domain.content import Prompt, prompt_text
from corral_server.domain.timeline import ErrorItem, UserMessage
from corral_server.manager.coalescer import WINDOW_MS, Coalescer
from corral_server.manager.turns import (
    ActiveTurn,
    Disposition,
    IfRunning,
    StartedTurn,
    TurnTerminal,
    TurnUpdate,
)
from corral_server.providers.base import (
    Provider,
    ProviderEvent,
    ProviderItem,
    ProviderSession,
    ProviderTurnCanceled,
    ProviderTurnCompleted,
    ProviderTurnFailed,
    ProviderTurnStarted,
    SessionConfig,
)
from corral_server.timeline.store import NewRow, TimelineStore

log = logging.getLogger(__name__)
T = TypeVar("T")


class Publisher(Protocol):
    def publish(self, event: ev.Event) -> int: ...


@dataclass(frozen=True, slots=True)
class ActorDeps:
    provider: Provider
    timeline: TimelineStore
    publisher: Publisher
    clock: Clock
    is_shutting_down: Callable[[], bool]


_Job = tuple[Callable[[], Awaitable[Any]], "asyncio.Future[Any] | None"]


class AgentActor:
    def __init__(self, agent: Agent, deps: ActorDeps) -> None:
        self._snapshot = agent  # replaced whole, only by this actor's task
        # next_seq moves with every append; folding it into the snapshot on every row would
        # cost more than the row, so readers get it folded in on read (`agent`).
        self._next_seq = agent.next_seq
        # Provider events wait here; one queued job drains them in order, in one batch.
        self._inbox: list[ProviderEvent] = []
        self._inbox_queued = False
        self._deps = deps
        self._session: ProviderSession | None = None
        self._queue: asyncio.Queue[_Job | None] = asyncio.Queue()
        self._coalescer = Coalescer()
        self._timer: TimerHandle | None = None
        # Invariant: set exactly while the lifecycle is Running.
        self._active: ActiveTurn | None = None
        # Turns that ended: their late events are dropped (dedupe by turn state, no window).
        self._finished: set[str] = set()
        self._stopped = False
        self._changed = asyncio.Event()
        self._task = asyncio.create_task(self._run(), name=f"agent-actor:{agent.id}")

    # --- the serial queue ---------------------------------------------------------------

    async def call(self, op: Callable[[], Awaitable[T]]) -> T:
        """Run `op` on the actor, after everything queued before it, and return its result."""
        if self._stopped:
            raise errors.AgentClosed(self.agent.id)
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._queue.put_nowait((op, future))
        return await future

    def post(self, op: Callable[[], Awaitable[object]]) -> None:
        if not self._stopped:
            self._queue.put_nowait((op, None))

    async def _run(self) -> None:
        while (job := await self._queue.get()) is not None:
            op, future = job
            try:
                result = await op()
            except Exception as exc:
                if future is None:
                    log.exception("agent %s: background step failed", self.agent.id)
                elif not future.done():
                    future.set_exception(exc)
            else:
                if future is not None and not future.done():
                    future.set_result(result)
        # Stopped: whatever is still queued will never run; fail its callers, never hang them.
        while not self._queue.empty():
            job = self._queue.get_nowait()
            if job is not None and job[1] is not None and not job[1].done():
                job[1].set_exception(errors.AgentClosed(self.agent.id))

    @property
    def agent(self) -> Agent:
        """The current snapshot, for readers."""
        if self._snapshot.next_seq != self._next_seq:
            self._snapshot = replace(self._snapshot, next_seq=self._next_seq)
        return self._snapshot

    @property
    def active_turn(self) -> ActiveTurn | None:
        return self._active

    # --- registration (seed 000, section 4.1) -------------------------------------------

    async def register(self, model: str, mode: str) -> Agent:
        """Ask the provider for a session, then go idle. Events the session reports queue
        behind this step, so none reaches a half-built agent."""
        deps = self._deps
        config = SessionConfig(agent_id=self.agent.id, cwd=self.agent.cwd, model=model, mode=mode)
        session = await deps.provider.create_session(config, self._on_provider_event)
        if deps.is_shutting_down():
            await session.close()  # leave no orphan session behind
            raise errors.ShuttingDown()
        self._session = session
        info = deps.provider.info()
        self._set(
            lifecycle=Idle(),
            provider_session_id=session.session_id,
            model=model or (info.models[0].id if info.models else ""),
            mode=mode or (info.modes[0].id if info.modes else ""),
        )
        return self.agent

    def _on_provider_event(self, event: ProviderEvent) -> None:
        if self._stopped:
            return
        self._inbox.append(event)
        if not self._inbox_queued:
            self._inbox_queued = True
            self._queue.put_nowait((self._drain_inbox, None))

    async def _drain_inbox(self) -> None:
        """Handle every waiting provider event in order; rows that are ready together are
        appended in one batch (one store write, then one publish per row)."""
        self._inbox_queued = False
        events, self._inbox = self._inbox, []
        ready: list[NewRow] = []
        for event in events:
            if isinstance(event, ProviderItem) and not self._stopped:
                if self._accepts(event.turn_id):
                    ready.extend(self._offer(event))
                continue
            await self._append(ready)
            ready = []
            await self._handle_provider_event(event)
        await self._append(ready)

    # --- state ---------------------------------------------------------------------------

    def _set(self, **changes: Any) -> None:
        """Replace the snapshot, bump `updated_at` strictly, publish the upsert."""
        now = self._deps.clock.now_ms()
        updated = max(now, self._snapshot.updated_at_ms + 1)
        self._snapshot = replace(
            self._snapshot, updated_at_ms=updated, next_seq=self._next_seq, **changes
        )
        self._deps.publisher.publish(ev.AgentUpserted(self._snapshot))
        # Wake everyone waiting for a change (WaitForIdle), then start a new generation.
        self._changed.set()
        self._changed = asyncio.Event()

    @property
    def changed(self) -> asyncio.Event:
        """Set at the next change of the snapshot (a fresh event per change)."""
        return self._changed

    def update(self, **changes: Any) -> Agent:
        self._ensure_open()
        self._set(**changes)
        return self.agent

    def clear_attention(self) -> Agent:
        if self._snapshot.attention.required:
            self._set(attention=Attention())
        return self.agent

    def detach(self) -> Agent:
        labels = self._snapshot.labels
        if PARENT_AGENT_ID_LABEL in labels:
            kept = {k: v for k, v in labels.items() if k != PARENT_AGENT_ID_LABEL}
            self._set(labels=kept)
        return self.agent

    def _ensure_open(self) -> None:
        if isinstance(self.agent.lifecycle, Closed):
            raise errors.AgentClosed(self.agent.id)

    async def _append(self, rows: Sequence[NewRow]) -> None:
        if not rows:
            return
        agent_id, epoch = self._snapshot.id, self._snapshot.epoch
        stored = await self._deps.timeline.append(agent_id, rows)
        self._next_seq = stored[-1].seq + 1  # no upsert: rows announce themselves
        publish = self._deps.publisher.publish
        active = self._active
        for row in stored:
            publish(ev.RowAppended(agent_id, epoch, row))
            if active is not None and row.turn_id == active.turn_id:
                active.notify(row)

    # --- turns ---------------------------------------------------------------------------

    async def start_turn(
        self, prompt: Prompt, client_message_id: str, if_running: IfRunning, follow: bool
    ) -> StartedTurn:
        self._ensure_open()
        if self._active is not None:
            match if_running:
                case IfRunning.REJECT:
                    raise errors.AgentBusy(self.agent.id, self._active.turn_id)
                case IfRunning.QUEUE | IfRunning.STEER | IfRunning.REPLACE:
                    raise errors.Unimplemented(
                        f"if_running={if_running.name} needs the queued-prompts capability, "
                        "not yet delivered; use REJECT or cancel the running turn first"
                    )
                case _:
                    assert_never(if_running)
        if isinstance(self.agent.lifecycle, Initializing) or self._session is None:
            raise errors.FailedPrecondition(f"agent {self.agent.id!r} is still initializing")
        self._deps.provider.validate_prompt(prompt)
        turn_id = await self._session.start_turn(prompt)
        loop = asyncio.get_running_loop()
        active = ActiveTurn(turn_id, foreground=True, settled=loop.create_future())
        updates: asyncio.Queue[TurnUpdate | errors.CorralError] | None = None
        if follow:
            updates = asyncio.Queue()
            active.listeners.append(updates)
        self._begin(active)
        message = UserMessage(prompt_text(prompt), client_message_id, client_message_id)
        now = self._deps.clock.now_ms()
        await self._append([NewRow(message, now, turn_id)])
        return StartedTurn(Disposition.STARTED, turn_id, updates)

    def _begin(self, active: ActiveTurn) -> None:
        """The manager's own, authoritative turn_started (seed 000, section 11.1)."""
        self._active = active
        self._set(lifecycle=Running(active.turn_id))
        started = ev.TurnStarted(self.agent.id, active.turn_id)
        self._deps.publisher.publish(started)
        active.notify(started)

    async def _handle_provider_event(self, event: ProviderEvent) -> None:
        if self._stopped or isinstance(self.agent.lifecycle, Closed):
            return
        match event:
            case ProviderTurnStarted(turn_id=turn_id):
                if self._active is None and turn_id not in self._finished:
                    # A turn the provider started by itself: an autonomous run.
                    settled = asyncio.get_running_loop().create_future()
                    self._begin(ActiveTurn(turn_id, foreground=False, settled=settled))
                # else: a duplicate of the turn_started we already published
            case ProviderItem():
                if self._accepts(event.turn_id):
                    await self._append(self._offer(event))
            case ProviderTurnCompleted(turn_id=turn_id, usage=usage):
                await self._terminal(turn_id, ev.TurnCompleted(self.agent.id, turn_id, usage))
            case ProviderTurnFailed(turn_id=turn_id, error=error):
                await self._terminal(turn_id, ev.TurnFailed(self.agent.id, turn_id, error))
            case ProviderTurnCanceled(turn_id=turn_id, reason=reason):
                await self._terminal(turn_id, ev.TurnCanceled(self.agent.id, turn_id, reason))
            case _:
                assert_never(event)

    def _accepts(self, turn_id: str) -> bool:
        active = self._active
        if active is not None:
            return turn_id in ("", active.turn_id) or not active.turn_id
        return turn_id not in self._finished

    def _offer(self, event: ProviderItem) -> tuple[NewRow, ...]:
        """Give a fragment to the coalescer; returns the rows to append now."""
        offered = self._coalescer.offer(event, self._deps.clock.now_ms())
        if offered.arm_timer and self._timer is None:
            self._timer = self._deps.clock.call_later(
                WINDOW_MS / 1000, lambda: self.post(self._flush_on_timer)
            )
        return offered.ready

    async def _flush_on_timer(self) -> None:
        self._timer = None
        await self._flush()

    async def _flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        row = self._coalescer.flush()
        if row is not None:
            await self._append([row])

    async def _terminal(self, turn_id: str, terminal: TurnTerminal) -> None:
        active = self._active
        if active is None or (turn_id and active.turn_id and turn_id != active.turn_id):
            return  # a late or duplicate terminal event: that turn is already settled
        await self._finish(active, replace(terminal, turn_id=active.turn_id or turn_id))

    async def _finish(self, active: ActiveTurn, terminal: TurnTerminal) -> None:
        await self._flush()
        clock = self._deps.clock
        changes: dict[str, Any]
        reason: AttentionReason | None = None
        match terminal:
            case ev.TurnCompleted(usage=usage):
                changes = {"lifecycle": Idle()}
                if usage is not None:
                    changes["last_usage"] = usage
                reason = AttentionReason.FINISHED
            case ev.TurnFailed(error=error):
                await self._append(
                    [NewRow(ErrorItem(error.message, error.code), clock.now_ms(), active.turn_id)]
                )
                changes = {"lifecycle": Errored(error), "last_error": error}
                reason = AttentionReason.ERROR
            case ev.TurnCanceled():
                changes = {"lifecycle": Idle()}
            case _:
                assert_never(terminal)
        self._active = None
        if active.turn_id:  # an id-less autonomous turn must not block the next one
            self._finished.add(active.turn_id)
        publish = self._deps.publisher.publish
        publish(terminal)
        # Attention is edge-triggered: an unread mark, set once (seed 000, section 9).
        raise_attention = reason is not None and not self.agent.attention.required
        if raise_attention and reason is not None:
            changes["attention"] = Attention(True, reason, clock.now_ms())
        self._set(**changes)
        if raise_attention and reason is not None:
            publish(ev.AttentionRequired(self.agent.id, reason))
        if isinstance(terminal, ev.TurnCompleted) and terminal.usage is not None:
            active.notify(terminal.usage)
        active.notify(terminal)
        if not active.settled.done():
            active.settled.set_result(terminal)

    # --- cancel and close ----------------------------------------------------------------

    async def interrupt(self) -> bool:
        """Ask the provider to stop the running turn; True only if it confirmed."""
        session = self._session
        return await session.interrupt() if session is not None else False

    async def force_cancel(self, turn_id: str, reason: str) -> None:
        """The provider confirmed the interrupt but never ended the turn: end it ourselves
        (seed 000, section 5.4 — only after a confirmed interrupt)."""
        active = self._active
        if active is not None and active.turn_id == turn_id:
            await self._finish(active, ev.TurnCanceled(self.agent.id, turn_id, reason))

    async def close(self) -> Agent:
        """Close the runtime and keep the record. A failing session close still broadcasts
        the closed snapshot, then raises (seed 000, section 4.3)."""
        if isinstance(self.agent.lifecycle, Closed):
            return self.agent
        failure: Exception | None = None
        if self._active is not None:
            active = self._active
            await self._finish(
                active, ev.TurnCanceled(self.agent.id, active.turn_id, "agent closed")
            )
        await self._flush()
        if self._session is not None:
            try:
                await self._session.close()
            except Exception as exc:
                failure = exc
        self._set(lifecycle=Closed(self._deps.clock.now_ms()))
        self._stop()
        if failure is not None:
            raise errors.CorralError(
                f"the provider session failed to close: {failure}"
            ) from failure
        return self.agent

    def _stop(self) -> None:
        self._stopped = True
        if self._timer is not None:
            self._timer.cancel()
        self._queue.put_nowait(None)

    async def shutdown(self) -> None:
        """Daemon shutdown: close the session quietly, keep the state as it is; a StreamTurn
        following the running turn ends with SHUTTING_DOWN rather than hanging."""
        if self._active is not None:
            self._active.abort(errors.ShuttingDown())
        if self._session is not None:
            try:
                await self._session.close()
            except Exception:
                log.exception("agent %s: session close failed during shutdown", self.agent.id)
        self._stop()
        await self._task
