"""The sweeper (docs/design.md#subagents): every `sweep_interval_s` on the clock, one job
1. forgets finished records past `retention_s`: ended, announce finished, and no longer the
   link of a live child into the tree (its child is gone or closed, or a newer run of the
   same child, a steer's, holds that link), with nothing pending below the child;
2. picks the children of finished runs with cleanup DELETE whose announce finished at least
   `archive_after_s` ago, and archives them off the queue (an archive closes the agent and
   its descendants, keeps their records and timelines, and hides them from ListAgents:
   docs/design.md#lifecycle; corral never erases an agent's history). A child that is busy, has
   active runs below it, or is the child of a newer run is left for a later sweep.

The next sweep is armed when one fires (not when it ends), so a clock moved far ahead fires
every sweep on the way.

Must not: change an agent except through the manager; import grpc or protobuf.
"""

from __future__ import annotations

import logging

from corral_server import errors
from corral_server.clock import TimerHandle
from corral_server.domain.subagents import Cleanup, SubagentRun
from corral_server.subagents import queries as q
from corral_server.subagents.children import is_busy
from corral_server.subagents.core import RunCore

log = logging.getLogger(__name__)


class RunSweeper:
    def __init__(self, core: RunCore) -> None:
        self._core = core
        self._timer: TimerHandle | None = None
        self._archiving: set[str] = set()  # children whose archive is under way

    def start(self) -> None:
        if self._timer is None:
            self._arm()

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()

    def _arm(self) -> None:
        self._timer = self._core.clock.call_later(self._core.limits.sweep_interval_s, self._tick)

    def _tick(self) -> None:
        if not self._core.ledger.stopped:
            self._arm()
            self._core.ledger.post(self.sweep)

    async def sweep(self) -> None:
        """One sweep (a job of the ledger)."""
        now = self._core.clock.now_ms()
        index = self._core.ledger.index()
        retention_ms = self._core.limits.retention_s * 1000
        for run in list(self._core.ledger.runs.values()):
            if _finished_ms(run) + retention_ms <= now and self._forgettable(run, index):
                self._core.ledger.forget(run.run_id)
        archive_ms = self._core.limits.archive_after_s * 1000
        due = [
            run.child_agent_id
            for run in self._core.ledger.runs.values()
            if run.cleanup is Cleanup.DELETE
            and _finished_ms(run) + archive_ms <= now
            and self._archivable(run, index)
        ]
        for child in due:
            self._archiving.add(child)
            self._core.ledger.in_background(self._archive(child))

    def _forgettable(self, run: SubagentRun, index: q.RunIndex) -> bool:
        child = run.child_agent_id
        if not child:
            return True
        if q.count_pending_descendants(index, child):
            return False
        if self._core.ledger.by_child.get(child) != run.run_id:
            return True  # a newer run of the child links it into the tree
        try:
            return self._core.manager.get(child).is_closed
        except errors.AgentNotFound:
            return True

    def _archivable(self, run: SubagentRun, index: q.RunIndex) -> bool:
        child = run.child_agent_id
        if (
            not child
            or child in self._archiving
            or self._core.ledger.by_child.get(child) != run.run_id
        ):
            return False
        try:
            agent = self._core.manager.get(child)
        except errors.AgentNotFound:
            return False
        return (
            agent.archived_at_ms is None
            and not is_busy(self._core.manager, child)
            and not q.count_active_descendants(index, child)
        )

    async def _archive(self, child: str) -> None:
        try:
            archived = await self._core.manager.archive(child)
            log.info("sub-agent %s: archived by the sweeper (cleanup DELETE): %s", child, archived)
        except errors.CorralError as exc:
            log.warning("sub-agent %s: the sweeper could not archive it: %s", child, exc.message)
        finally:
            self._archiving.discard(child)


def _finished_ms(run: SubagentRun) -> float:
    """When the run was done with (its announce finished), or never (inf)."""
    if not run.ended or not run.announce_state.finished:
        return float("inf")
    return run.announced_at_ms or run.ended_at_ms or 0
