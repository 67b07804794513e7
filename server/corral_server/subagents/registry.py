"""The sub-agent run registry (seed 002): the single writer of run records.

Owns which runs exist and every change to them: a spawn claims its slot (limits checked and
claimed in one job, so concurrent spawns never pass a limit together), a run ends once (its
child settled, or a kill, a timeout, an archive, a restart decided it), and its announce moves
through the outbox states (announce.py does the delivering). Every change is a job on
`_jobs`, run by one task in order; a job's record writes are stored before its caller goes on.

The registry changes agents only through the manager's public methods (create, cancel, close,
remove_queued, add_notice) and hears from them through the manager's two hooks: `on_settled`
(an agent's turn ended and nothing follows) and `on_archive` (before an archive cascade).

Must not: change an agent except through the manager; import grpc or protobuf.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, replace
from typing import Any, TypeVar, assert_never

from corral_server import errors
from corral_server.clock import Clock, TimerHandle
from corral_server.domain.agent import (
    PARENT_AGENT_ID_LABEL,
    Agent,
    Initializing,
    Running,
)
from corral_server.domain.content import TextPart
from corral_server.domain.events import (
    SubagentRunUpdated,
    TurnCanceled,
    TurnCompleted,
    TurnFailed,
    TurnTerminal,
)
from corral_server.domain.subagents import (
    MAX_RESULT_CHARS,
    RUN_ID_LABEL,
    AnnounceState,
    Delivering,
    Outcome,
    RunId,
    SubagentRun,
)
from corral_server.domain.timeline import AssistantMessage, Direction, SubagentNotice
from corral_server.manager.manager import AgentManager
from corral_server.manager.specs import CreateSpec
from corral_server.manager.turns import CancelOutcome
from corral_server.manager.validate import Limits
from corral_server.subagents import queries as q
from corral_server.subagents.announce import (
    Announcer,
    Deliver,
    Finished,
    Step,
    Wait,
    notice_text,
    wake_prompt,
)
from corral_server.subagents.limits import SpawnRequest, SubagentLimits, check_spawn
from corral_server.subagents.store import RunStore

T = TypeVar("T")
log = logging.getLogger(__name__)

_Job = tuple[Callable[[], Awaitable[Any]], "asyncio.Future[Any] | None"]
# Rows read from a child's tail to find its last reply.
_RESULT_ROWS = 50


@dataclass(frozen=True, slots=True)
class Counts:
    active: int
    pending: int


class SubagentRegistry:
    def __init__(
        self,
        manager: AgentManager,
        store: RunStore,
        clock: Clock,
        limits: SubagentLimits | None = None,
        new_id: Callable[[], str] = lambda: uuid.uuid4().hex,
        publish: Callable[[SubagentRunUpdated], object] | None = None,
    ) -> None:
        self._manager = manager
        self._store = store
        self._clock = clock
        self.limits = limits or SubagentLimits()
        self._new_id = new_id
        # The event hub: every change of a run is published once it is stored.
        self._publish = publish
        self._runs: dict[str, SubagentRun] = {}  # insertion order = spawn order
        self._by_child: dict[str, str] = {}  # child agent id -> its newest run id
        self._jobs: asyncio.Queue[_Job | None] = asyncio.Queue()
        self._worker: asyncio.Task[None] | None = None
        self._stopped = False
        # The record writes of the job running (awaited before its caller is answered) and
        # the runs they changed (published after that).
        self._writes: list[asyncio.Future[None]] = []
        self._changed: dict[str, SubagentRun] = {}
        # How a run ends when its child next settles, decided before (a timeout).
        self._forced: dict[str, tuple[Outcome, str]] = {}
        self._timers: dict[str, TimerHandle] = {}
        self._background: set[asyncio.Task[Any]] = set()
        self.announcer = Announcer(self, manager, clock, recheck_s=self.limits.defer_recheck_s)
        manager.on_settled = self._on_settled
        manager.on_archive = self._on_archive

    # --- life ------------------------------------------------------------------------------

    async def open(self) -> None:
        """Load the stored runs and start taking jobs (before the manager restores agents:
        the settle events of interrupted children queue behind the load)."""
        loaded = await self._store.load()
        for bad in loaded.bad:
            log.error("sub-agent run %s: its stored record is unreadable (%s)", *bad)
        for run in loaded.runs:
            self._runs[run.run_id] = run
            if run.child_agent_id:
                self._by_child[run.child_agent_id] = run.run_id
        self._worker = asyncio.create_task(self._work(), name="subagent-registry")

    async def recover(self) -> None:
        """After the agents are restored (seed 002, 5.7): runs not ended are ended by what
        their child's state says, orphans visibly; due announces resume."""
        await self._call(self._recover)

    async def stop(self) -> None:
        self._stopped = True
        for timer in self._timers.values():
            timer.cancel()
        await self.announcer.stop()
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        if self._worker is not None:
            self._jobs.put_nowait(None)
            await asyncio.gather(self._worker, return_exceptions=True)

    # --- reads ----------------------------------------------------------------------------

    @property
    def request_limits(self) -> Limits:
        """The manager's request limits (ids, prompts), which a spawn's fields obey too."""
        return self._manager.limits

    @property
    def opened(self) -> bool:
        return self._worker is not None

    def get(self, run_id: str) -> SubagentRun:
        run = self._runs.get(run_id)
        if run is None:
            raise errors.SubagentRunNotFound(run_id)
        return run

    def index(self) -> q.RunIndex:
        return q.RunIndex(self._runs.values())

    def list_runs(
        self, agent_id: str, descendants: bool, active_only: bool
    ) -> tuple[list[SubagentRun], Counts]:
        """Runs the agent requested or controls (every run for ""), with `descendants` also
        every run below it, breadth first; and the agent's descendant counts."""
        index = self.index()
        if not agent_id:
            runs = list(index.all)
            counts = Counts(sum(not r.ended for r in runs), sum(r.pending for r in runs))
        else:
            self._manager.get(agent_id)  # AGENT_NOT_FOUND for an unknown agent
            found = {r.run_id: r for r in index.all if agent_id in _parties(r)}
            below = q.descendant_runs(index, agent_id)
            if descendants:
                found.update((r.run_id, r) for r in below)
            runs = list(found.values())
            counts = Counts(
                q.count_active_descendants(index, agent_id),
                q.count_pending_descendants(index, agent_id),
            )
        if active_only:
            runs = [r for r in runs if not r.ended]
        return runs, counts

    # --- spawn ----------------------------------------------------------------------------

    async def spawn(self, request: SpawnRequest) -> SubagentRun:
        """Claim a slot (limits), create the child agent on the task, link it to the run."""
        requester = self._manager.get(request.requester_agent_id)
        if requester.is_closed:
            raise errors.AgentClosed(requester.id)
        controller = request.controller_agent_id or requester.id
        if controller != requester.id:
            self._manager.get(controller)
        check_spawn(request, self._manager.limits)
        run = await self._call(lambda: self._claim(request, controller))
        labels = {PARENT_AGENT_ID_LABEL: requester.id, RUN_ID_LABEL: run.run_id}
        spec = CreateSpec(
            provider=request.provider or requester.provider,
            cwd=requester.cwd,
            model=request.model,
            title=request.label or request.task.splitlines()[0][:200],
            labels=labels,
            initial_prompt=(TextPart(request.task),),
        )
        try:
            child, _ = await self._manager.create(spec)
        except BaseException:
            self._post(lambda: self._release(run.run_id))  # the slot is free again
            raise
        return await self._call(lambda: self._link(run.run_id, child.id))

    async def _claim(self, request: SpawnRequest, controller: str) -> SubagentRun:
        """Checked and claimed in one job (no await between): limits hold under any
        concurrency."""
        index = self.index()
        requester = request.requester_agent_id
        parent_depth = q.depth_of(index, requester)
        limits = self.limits
        if parent_depth + 1 > limits.max_depth:
            raise errors.SubagentLimit(
                "SUBAGENT_DEPTH_LIMIT",
                f"agent {requester!r} is at spawn depth {parent_depth}; a child would pass "
                f"max_spawn_depth {limits.max_depth}",
                limit=limits.max_depth,
                current=parent_depth,
            )
        active = q.active_children(index, requester)
        if active >= limits.max_children:
            raise errors.SubagentLimit(
                "SUBAGENT_CHILDREN_LIMIT",
                f"agent {requester!r} already has {active} active sub-agent runs "
                f"(max_children_per_agent {limits.max_children})",
                limit=limits.max_children,
                current=active,
            )
        run = SubagentRun(
            run_id=RunId(self._new_id()),
            child_agent_id="",
            requester_agent_id=requester,
            controller_agent_id=controller,
            task=request.task,
            created_at_ms=self._clock.now_ms(),
            depth=parent_depth + 1,
            label=request.label,
            cleanup=request.cleanup,
            run_timeout_s=request.run_timeout_s,
            expects_completion_message=request.expects_completion_message,
        )
        self._put(run)
        return run

    async def _release(self, run_id: str) -> None:
        run = self._runs.pop(run_id, None)
        if run is not None and not run.child_agent_id:
            self._writes.append(self._store.delete(run_id))

    async def _link(self, run_id: str, child_id: str) -> SubagentRun:
        run = self.get(run_id)
        self._by_child[child_id] = run_id
        if run.child_agent_id != child_id or run.started_at_ms is None:
            started = run.started_at_ms or self._clock.now_ms()
            run = replace(run, child_agent_id=child_id, started_at_ms=started)
            self._put(run)
        if run.ended and run.outcome is Outcome.KILLED:
            self._in_background(self._stop_child(child_id))  # killed before it was linked
        elif not run.ended and run.run_timeout_s:
            self._arm_timeout(run)
        return run

    # --- ending ---------------------------------------------------------------------------

    def _on_settled(self, agent: Agent, terminal: TurnTerminal) -> None:
        """The manager's hook, on the agent's task: never blocks."""
        run_id = agent.labels.get(RUN_ID_LABEL) or self._by_child.get(agent.id)
        if run_id and not self._stopped:
            self._post(lambda: self._child_settled(run_id, agent, terminal))
        self.announcer.kick()

    async def _child_settled(self, run_id: str, agent: Agent, terminal: TurnTerminal) -> None:
        run = self._runs.get(run_id)
        if run is None or run.ended or run.child_agent_id not in ("", agent.id):
            return  # a later turn of the child, or not its run
        forced = self._forced.pop(run_id, None)
        outcome, reason = forced or _outcome_of(terminal)
        fallback = terminal.error.message if isinstance(terminal, TurnFailed) else ""
        result = await self._last_reply(agent.id, terminal.turn_id) or fallback
        usage = terminal.usage if isinstance(terminal, TurnCompleted) else None
        self._end(replace(run, child_agent_id=agent.id), outcome, reason, result, usage)

    def _end(
        self,
        run: SubagentRun,
        outcome: Outcome,
        reason: str,
        result: str = "",
        usage: Any = None,
        announce: bool = True,
    ) -> SubagentRun:
        timer = self._timers.pop(run.run_id, None)
        if timer is not None:
            timer.cancel()
        now = self._clock.now_ms()
        ended = replace(
            run,
            started_at_ms=run.started_at_ms or now,
            ended_at_ms=now,
            outcome=outcome,
            end_reason=reason,
            result_text=result[:MAX_RESULT_CHARS],
            usage=usage or run.usage,
            announce_state=AnnounceState.PENDING if announce else AnnounceState.SUPPRESSED,
            announced_at_ms=None if announce else now,
        )
        self._put(ended)
        if announce:
            self.announcer.start(run.run_id)
        return ended

    async def _last_reply(self, agent_id: str, turn_id: str = "") -> str:
        """The agent's last assistant row (of `turn_id` when given), or ""."""
        try:
            await self._manager.rows_settled(agent_id)
            page = await self._manager.fetch_timeline(agent_id, Direction.TAIL, None, _RESULT_ROWS)
        except errors.CorralError:
            return ""
        for row in reversed(page.rows):
            if isinstance(row.item, AssistantMessage) and (not turn_id or row.turn_id == turn_id):
                return row.item.text
        return ""

    def _arm_timeout(self, run: SubagentRun) -> None:
        started = run.started_at_ms or run.created_at_ms
        left_s = max(0.0, (started + run.run_timeout_s * 1000 - self._clock.now_ms()) / 1000)
        run_id = run.run_id
        self._timers[run_id] = self._clock.call_later(
            left_s, lambda: self._post(lambda: self._timed_out(run_id))
        )

    async def _timed_out(self, run_id: str) -> None:
        self._timers.pop(run_id, None)
        run = self._runs.get(run_id)
        if run is None or run.ended or not run.child_agent_id:
            return
        self._forced[run_id] = (Outcome.TIMEOUT, f"timeout after {run.run_timeout_s} s")
        self._in_background(self._stop_child(run.child_agent_id))

    # --- kill and archive (seed 002, 5.4) -----------------------------------------------------

    async def kill(self, run_id: str, cascade: bool) -> list[str]:
        """End the run (and with `cascade` every run below it) as KILLED, announces
        suppressed, then stop their children: queues cleared, turns interrupted."""
        killed = await self._call(lambda: self._mark_killed(run_id, cascade))
        await asyncio.gather(*(self._stop_child(r.child_agent_id) for r in killed))
        return [r.run_id for r in killed]

    async def _mark_killed(self, run_id: str, cascade: bool) -> list[SubagentRun]:
        run = self.get(run_id)
        marked = [run]
        if cascade and run.child_agent_id:
            marked.extend(q.descendant_runs(self.index(), run.child_agent_id))
        return self._suppress(marked, "killed")

    def _suppress(self, runs: list[SubagentRun], reason: str) -> list[SubagentRun]:
        """Runs not ended end KILLED; every announce not finished is suppressed. Returns the
        runs this ended (their children still have to be stopped)."""
        killed: list[SubagentRun] = []
        now = self._clock.now_ms()
        for run in runs:
            run = self._runs[run.run_id]
            if not run.ended:
                self._forced.pop(run.run_id, None)
                killed.append(self._end(run, Outcome.KILLED, reason, announce=False))
            elif not run.announce_state.finished:
                self._put(
                    replace(run, announce_state=AnnounceState.SUPPRESSED, announced_at_ms=now)
                )
        self.announcer.kick()
        return killed

    async def _on_archive(self, members: list[str]) -> None:
        """Before an archive closes `members`: their runs end KILLED, unannounced (the
        archive itself closes the children)."""
        if self._stopped:
            return
        wanted = set(members)
        await self._call(
            lambda: _sync(
                self._suppress(
                    [r for r in self._runs.values() if r.child_agent_id in wanted],
                    "requester archived",
                )
            )
        )

    async def _stop_child(self, child_id: str) -> None:
        """Clear its queue, then interrupt its turn; a provider that refuses is closed."""
        if not child_id:
            return
        try:
            for queued in self._manager.get(child_id).queued_prompts:
                with contextlib.suppress(errors.QueuedPromptNotFound):
                    await self._manager.remove_queued(child_id, queued.client_message_id)
            outcome, _ = await self._manager.cancel(child_id)
            if outcome is CancelOutcome.REFUSED:
                await self._manager.close(child_id)
        except (errors.AgentNotFound, errors.AgentClosed):
            pass
        except Exception:
            log.exception("sub-agent %s: could not be stopped", child_id)

    # --- the announce outbox (announce.Outbox) ----------------------------------------------

    async def announce_step(self, run_id: str) -> Step:
        return await self._call(lambda: self._announce_step(run_id))

    async def _announce_step(self, run_id: str) -> Step:
        run = self._runs.get(run_id)
        if run is None or not run.ended or run.announce_state.finished:
            return Finished()
        now = self._clock.now_ms()
        pending = 0
        if run.child_agent_id:
            pending = q.count_pending_descendants(self.index(), run.child_agent_id)
        waiting = pending > 0 or self._busy(run.child_agent_id)
        since = run.deferred_since_ms if run.deferred_since_ms is not None else now
        note = ""
        if waiting:
            if now - since < self.limits.defer_limit_s * 1000:
                if run.announce_state is not AnnounceState.DEFERRED:
                    self._put(
                        replace(run, announce_state=AnnounceState.DEFERRED, deferred_since_ms=since)
                    )
                return Wait()
            note = (
                f"announced after waiting {self.limits.defer_limit_s / 60:g} min; "
                f"{pending} descendant runs were still pending"
            )
        result = run.result_text
        if run.deferred_since_ms is not None:  # the child may have answered its children since
            result = (await self._last_reply(run.child_agent_id))[:MAX_RESULT_CHARS] or result
        try:
            head = self._manager.get(run.requester_agent_id)
        except errors.AgentNotFound:
            self._give_up(run, "the requester no longer exists")
            return Finished()
        delivering = run.delivering or Delivering(head.epoch, head.next_seq)
        ready = replace(
            run, announce_state=AnnounceState.PENDING, delivering=delivering, result_text=result
        )
        self._put(ready)
        text = notice_text(ready, note)
        notice = SubagentNotice(run.run_id, run.child_agent_id, text)
        wake = wake_prompt(text) if run.expects_completion_message else None
        return Deliver(ready, notice, wake, run.delivering)

    async def announce_delivered(self, run_id: str) -> None:
        await self._call(lambda: self._finish_announce(run_id, AnnounceState.DELIVERED))

    async def announce_failed(self, run_id: str, why: str, permanent: bool) -> float | None:
        return await self._call(lambda: self._announce_failed(run_id, why, permanent))

    async def _announce_failed(self, run_id: str, why: str, permanent: bool) -> float | None:
        run = self._runs.get(run_id)
        if run is None or run.announce_state.finished:
            return None
        backoff = self.limits.retry_backoff_s
        if permanent or run.attempts >= len(backoff):
            self._give_up(run, why)
            return None
        self._put(replace(run, attempts=run.attempts + 1))
        return backoff[run.attempts]

    def _give_up(self, run: SubagentRun, why: str) -> None:
        log.warning("sub-agent run %s: announce given up: %s", run.run_id, why)
        self._finish(run, AnnounceState.GIVEN_UP)

    async def _finish_announce(self, run_id: str, state: AnnounceState) -> None:
        run = self._runs.get(run_id)
        # Delivered is the truth even if a kill suppressed the announce meanwhile.
        if run is not None and (
            state is AnnounceState.DELIVERED or not run.announce_state.finished
        ):
            self._finish(run, state)

    def _finish(self, run: SubagentRun, state: AnnounceState) -> None:
        self._put(replace(run, announce_state=state, announced_at_ms=self._clock.now_ms()))

    def _busy(self, agent_id: str) -> bool:
        try:
            lifecycle = self._manager.get(agent_id).lifecycle
        except errors.CorralError:
            return False
        return isinstance(lifecycle, Running | Initializing)

    # --- restart (seed 002, 5.7) ------------------------------------------------------------

    async def _recover(self) -> None:
        for run in list(self._runs.values()):
            if not run.ended:
                self._recover_running(run)
            elif not run.announce_state.finished:
                self.announcer.start(run.run_id)

    def _recover_running(self, run: SubagentRun) -> None:
        if not run.child_agent_id:
            self._end(run, Outcome.UNKNOWN, "orphaned: the daemon stopped before the child started")
            return
        try:
            child = self._manager.get(run.child_agent_id)
        except errors.AgentNotFound:
            self._end(run, Outcome.UNKNOWN, "orphaned: the child agent no longer exists")
            return
        if self._busy(child.id):
            if run.run_timeout_s:
                self._arm_timeout(run)
            return  # its settle ends it
        if child.is_closed:
            self._end(run, Outcome.KILLED, "orphaned: the child agent was closed")
        elif child.last_error is not None and child.last_error.code == "DAEMON_RESTARTED":
            self._end(run, Outcome.ERROR, "error: interrupted by a daemon restart")
        else:
            self._end(run, Outcome.UNKNOWN, "orphaned: the child settled across a daemon restart")

    # --- the queue ----------------------------------------------------------------------------

    def _put(self, run: SubagentRun) -> None:
        """Replace the run's record (in a job): stored before the job's caller goes on."""
        self._runs[run.run_id] = run
        if run.child_agent_id:
            self._by_child[run.child_agent_id] = run.run_id
        self._writes.append(self._store.put(run))
        self._changed[run.run_id] = run

    async def _call(self, op: Callable[[], Awaitable[T]]) -> T:
        if self._stopped or self._worker is None:
            raise errors.ShuttingDown()
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._jobs.put_nowait((op, future))
        return await future

    def _post(self, op: Callable[[], Awaitable[object]]) -> None:
        if not self._stopped:
            self._jobs.put_nowait((op, None))

    async def _work(self) -> None:
        while (job := await self._jobs.get()) is not None:
            op, future = job
            try:
                result = await op()
                writes, self._writes = self._writes, []
                if writes:
                    await asyncio.gather(*writes)
                self._announce_changes()
            except Exception as exc:
                self._writes, self._changed = [], {}
                if future is None:
                    if not isinstance(exc, errors.CorralError):
                        log.exception("sub-agent registry: a job failed")
                elif not future.done():
                    future.set_exception(exc)
            else:
                if future is not None and not future.done():
                    future.set_result(result)
        while not self._jobs.empty():
            job = self._jobs.get_nowait()
            if job is not None and job[1] is not None and not job[1].done():
                job[1].set_exception(errors.ShuttingDown())

    def _announce_changes(self) -> None:
        changed, self._changed = self._changed, {}
        if self._publish is not None:
            for run in changed.values():
                self._publish(SubagentRunUpdated(run))

    def _in_background(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)


def _parties(run: SubagentRun) -> tuple[str, str]:
    return run.requester_agent_id, run.controller_agent_id


def _outcome_of(terminal: TurnTerminal) -> tuple[Outcome, str]:
    match terminal:
        case TurnCompleted():
            return Outcome.OK, "complete"
        case TurnFailed(error=error):
            return Outcome.ERROR, f"error: {error.message}"[:500]
        case TurnCanceled(reason=reason):
            return Outcome.KILLED, f"canceled: {reason}"[:500] if reason else "canceled"
        case _:
            assert_never(terminal)


async def _sync(value: T) -> T:
    return value
