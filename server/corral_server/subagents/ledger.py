"""The run records in memory and the one queue every change to them goes through.

Every change is a job on `_jobs` (a `jobs.JobQueue`, the one an agent's actor runs on too),
run by one task in order: a job's
record writes (`put`) are stored before its caller goes on, then each changed run is published
once (a `SubagentRunUpdated` event). Jobs never interleave, so a check and the write it guards
(a limit and the slot it claims) need no lock.

Must not: decide anything about a run (the registry's parts do, inside jobs); import grpc or
protobuf.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from corral_server import errors
from corral_server.domain.events import SubagentRunUpdated
from corral_server.domain.subagents import SubagentRun
from corral_server.jobs import JobQueue
from corral_server.records.store import RunStore
from corral_server.subagents import queries as q

T = TypeVar("T")
log = logging.getLogger(__name__)


class RunLedger:
    def __init__(
        self, store: RunStore, publish: Callable[[SubagentRunUpdated], object] | None
    ) -> None:
        self._store = store
        # The event hub: every change of a run is published once it is stored.
        self._publish = publish
        self.runs: dict[str, SubagentRun] = {}  # insertion order = spawn order
        self.by_child: dict[str, str] = {}  # child agent id -> its newest run id
        # Held until `open` has loaded the records: nothing runs on a half-loaded ledger.
        self._jobs = JobQueue(
            "subagent-registry", refusal=errors.ShuttingDown, on_error=self._job_failed, held=True
        )
        self._opened = False
        # The record writes of the job running (awaited before its caller is answered) and
        # the runs they changed (published after that).
        self._writes: list[asyncio.Future[None]] = []
        self._changed: dict[str, SubagentRun] = {}
        self._background: set[asyncio.Task[Any]] = set()

    # --- life ------------------------------------------------------------------------------

    async def open(self) -> None:
        """Load the stored runs and start taking jobs."""
        loaded = await self._store.load()
        for bad in loaded.bad:
            log.error("sub-agent run %s: its stored record is unreadable (%s)", *bad)
        for run in loaded.runs:
            self.runs[run.run_id] = run
            if run.child_agent_id:
                self.by_child[run.child_agent_id] = run.run_id
        self._opened = True
        self._jobs.start()

    @property
    def opened(self) -> bool:
        return self._opened

    @property
    def stopped(self) -> bool:
        """Set once the ledger takes no more jobs (the registry is stopping)."""
        return self._jobs.stopped

    def refuse(self) -> None:
        """Take no more jobs; those queued still run (until `stop`)."""
        self._jobs.refuse()

    async def stop_background(self) -> None:
        self._jobs.refuse()
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)

    async def stop(self) -> None:
        self._jobs.stop()
        await self._jobs.stopped_running()

    # --- reads ----------------------------------------------------------------------------

    def get(self, run_id: str) -> SubagentRun:
        run = self.runs.get(run_id)
        if run is None:
            raise errors.SubagentRunNotFound(run_id)
        return run

    def index(self) -> q.RunIndex:
        return q.RunIndex(self.runs.values())

    # --- writes (in a job) -----------------------------------------------------------------

    def put(self, run: SubagentRun) -> None:
        """Replace the run's record (in a job): stored before the job's caller goes on."""
        is_new = run.run_id not in self.runs
        self.runs[run.run_id] = run
        # A child's newest run is the last one stored with it first (a steer's replacement);
        # linking an existing run to its child maps it too (the registry's `_link`).
        if run.child_agent_id and (is_new or run.child_agent_id not in self.by_child):
            self.by_child[run.child_agent_id] = run.run_id
        self._writes.append(self._store.put(run))
        self._changed[run.run_id] = run

    def forget(self, run_id: str) -> SubagentRun | None:
        """Drop the run's record (in a job), stored before the job's caller goes on."""
        run = self.runs.pop(run_id, None)
        if run is not None:
            if self.by_child.get(run.child_agent_id) == run_id:
                del self.by_child[run.child_agent_id]
            self._changed.pop(run_id, None)
            self._writes.append(self._store.delete(run_id))
        return run

    # --- the queue ----------------------------------------------------------------------------

    async def call(self, op: Callable[[], Awaitable[T]]) -> T:
        """Run `op` as a job; its result once its writes are stored."""
        if not self._opened:
            raise errors.ShuttingDown()
        return await self._jobs.call(lambda: self._job(op))

    def post(self, op: Callable[[], Awaitable[object]]) -> None:
        """Run `op` as a job nobody awaits (its errors are logged)."""
        self._jobs.post(lambda: self._job(op))

    def in_background(self, work: Coroutine[Any, Any, None]) -> None:
        """Slow work off the queue (stopping a child), cancelled at stop."""
        task = asyncio.create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _job(self, op: Callable[[], Awaitable[T]]) -> T:
        """`op`, then its record writes stored, then each run it changed published once."""
        result = await op()
        writes, self._writes = self._writes, []
        if writes:
            await asyncio.gather(*writes)
        self._announce_changes()
        return result

    async def _job_failed(self, exc: Exception, awaited: bool) -> None:
        self._writes, self._changed = [], {}
        if not awaited and not isinstance(exc, errors.CorralError):
            log.error("sub-agent registry: a job failed", exc_info=exc)

    def _announce_changes(self) -> None:
        changed, self._changed = self._changed, {}
        if self._publish is not None:
            for run in changed.values():
                self._publish(SubagentRunUpdated(run))
