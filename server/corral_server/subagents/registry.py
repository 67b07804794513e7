"""The sub-agent run registry (docs/design.md#subagents): the facade over the run records' single
writer.

Owns which runs exist and every change to them, through its parts, each a module:
- ledger.py: the records in memory and the one queue every change goes through;
- spawn (here): a spawn claims its slot (limits checked and claimed in one job, so concurrent
  spawns never pass a limit together), then creates the child and links it;
- ending.py: a run ends once (its child settled, or a timeout decided it);
- control.py: kill (with cascade) and archive;
- steer.py: a running run replaced by a new run of its child;
- outbox.py + announce.py: the announce outbox's states and the tasks that deliver;
- recovery.py: restart recovery;
- sweeper.py: children of finished DELETE runs archived, old records forgotten.

The registry changes agents only through the manager's public methods (create, cancel, close,
remove_queued, add_notice) and hears from them through two methods app.py sets as the
manager's hooks (manager/hooks.py): `on_settled` (an agent's turn ended and nothing follows)
and `on_archive` (before an archive cascade).

Must not: change an agent except through the manager; import grpc or protobuf.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace

from corral_server import errors
from corral_server.clock import Clock
from corral_server.domain.agent import PARENT_AGENT_ID_LABEL, Agent
from corral_server.domain.content import TextPart
from corral_server.domain.events import SubagentRunUpdated, TurnTerminal
from corral_server.domain.subagents import RUN_ID_LABEL, Outcome, RunId, SubagentRun
from corral_server.manager.manager import AgentManager
from corral_server.manager.specs import CreateSpec
from corral_server.manager.validate import Limits
from corral_server.records.store import RunStore
from corral_server.subagents import queries as q
from corral_server.subagents.announce import Announcer
from corral_server.subagents.children import stop_child
from corral_server.subagents.control import RunControl
from corral_server.subagents.core import RunCore
from corral_server.subagents.ending import RunEnding
from corral_server.subagents.ledger import RunLedger
from corral_server.subagents.limits import SpawnRequest, SubagentLimits, check_spawn
from corral_server.subagents.outbox import RunOutbox
from corral_server.subagents.recovery import RunRecovery
from corral_server.subagents.steer import RunSteering
from corral_server.subagents.sweeper import RunSweeper


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
        self._clock = clock
        self.limits = limits or SubagentLimits()
        self._new_id = new_id
        self._ledger = ledger = RunLedger(store, publish)
        core = RunCore(ledger, manager, clock, self.limits)
        outbox = RunOutbox(core)
        self.announcer = Announcer(outbox, manager, clock, recheck_s=self.limits.defer_recheck_s)
        self._ending = RunEnding(core, self.announcer)
        self._control = RunControl(core, self._ending, self.announcer)
        self._recovery = RunRecovery(core, self._ending, self.announcer)
        self._steering = RunSteering(core, self._ending, self.announcer, new_id)
        self._sweeper = RunSweeper(core)

    # --- life ------------------------------------------------------------------------------

    async def open(self) -> None:
        """Load the stored runs and start taking jobs (before the manager restores agents:
        the settle events of interrupted children queue behind the load)."""
        await self._ledger.open()

    async def recover(self) -> None:
        """After the agents are restored (docs/design.md#resume): runs not ended are ended by what
        their child's state says, orphans visibly; due announces resume."""
        await self._ledger.call(self._recovery.recover)
        self._sweeper.start()

    async def stop(self) -> None:
        self._ledger.refuse()
        self._ending.stop()
        self._sweeper.stop()
        await self.announcer.stop()
        await self._ledger.stop_background()
        await self._ledger.stop()

    # --- reads ----------------------------------------------------------------------------

    @property
    def request_limits(self) -> Limits:
        """The manager's request limits (ids, prompts), which a spawn's fields obey too."""
        return self._manager.limits

    @property
    def opened(self) -> bool:
        return self._ledger.opened

    def get(self, run_id: str) -> SubagentRun:
        return self._ledger.get(run_id)

    def index(self) -> q.RunIndex:
        return self._ledger.index()

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
        run = await self._ledger.call(lambda: self._claim(request, controller))
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
            self._ledger.post(lambda: self._release(run.run_id))  # the slot is free again
            raise
        return await self._ledger.call(lambda: self._link(run.run_id, child.id))

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
        self._ledger.put(run)
        return run

    async def _release(self, run_id: str) -> None:
        run = self._ledger.runs.get(run_id)
        if run is not None and not run.child_agent_id:
            self._ledger.forget(run_id)

    async def _link(self, run_id: str, child_id: str) -> SubagentRun:
        run = self.get(run_id)
        self._ledger.by_child[child_id] = run_id
        if run.child_agent_id != child_id or run.started_at_ms is None:
            started = run.started_at_ms or self._clock.now_ms()
            run = replace(run, child_agent_id=child_id, started_at_ms=started)
            self._ledger.put(run)
        if run.ended and run.outcome is Outcome.KILLED:
            # Killed before it was linked.
            self._ledger.in_background(stop_child(self._manager, child_id))
        elif not run.ended and run.run_timeout_s:
            self._ending.arm_timeout(run)
        return run

    # --- kill ------------------------------------------------------------------------------

    async def kill(self, run_id: str, cascade: bool) -> list[str]:
        """End the run (and with `cascade` every run below it) as KILLED, announces
        suppressed, then stop their children (docs/design.md#subagents)."""
        return await self._control.kill(run_id, cascade)

    async def steer(self, run_id: str, message: str, controller: str = "") -> SubagentRun:
        """Replace the running run with a new run of its child on `message`
        (docs/design.md#subagents); the new run. `controller`: who steers, for the rate limit ("":
        the run's own)."""
        return await self._steering.steer(run_id, message, controller)

    # --- the manager's hooks (app.py sets them on the manager) ---------------------------

    def on_settled(self, agent: Agent, terminal: TurnTerminal) -> None:
        """An agent's turn ended and nothing follows it. On the agent's task: never blocks."""
        # Its newest run (a steered child has had several); before the run is linked, the
        # label.
        run_id = self._ledger.by_child.get(agent.id) or agent.labels.get(RUN_ID_LABEL)
        if run_id and not self._ledger.stopped:
            self._ledger.post(lambda: self._ending.child_settled(run_id, agent, terminal))
        self.announcer.kick()

    async def on_archive(self, members: list[str]) -> None:
        """Before an archive cascade closes `members` (the agent first)."""
        await self._control.on_archive(members)


def _parties(run: SubagentRun) -> tuple[str, str]:
    return run.requester_agent_id, run.controller_agent_id
