"""A serial job queue: the single writer of one piece of state (an agent's actor, the
sub-agent run records).

Jobs run one at a time, in the order they were queued, on one task: a check and the write it
guards never interleave with another job, so they need no lock. `call` queues a job and awaits
its result; `post` queues one nobody awaits. The task starts with the first job and ends when
the queue runs empty (an idle owner holds no task; the next job starts a new one). `stop`
queues the end: every job queued after it, and one cut short by `kill`, fails its caller with
the owner's refusal, so no caller ever hangs.

Must not: know what the jobs change (the owner's `on_error` decides what a failure means).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from corral_server import errors

T = TypeVar("T")

Job = Callable[[], Awaitable[Any]]
# A queued job and the future of its caller (None: posted, nobody awaits it); None: the stop.
_Entry = tuple[Job, "asyncio.Future[Any] | None"] | None


class JobQueue:
    def __init__(
        self,
        name: str,
        *,
        refusal: Callable[[], errors.CorralError],
        on_error: Callable[[Exception, bool], Awaitable[None]],
        held: bool = False,
    ) -> None:
        self._name = name  # the task's name (what a task dump shows)
        # What a caller is told once the queue takes nothing more (AGENT_CLOSED, SHUTTING_DOWN).
        self._refusal = refusal
        # Told of every exception a job raises, with whether a caller awaits it (the caller
        # then gets the exception too): the owner logs it, or records the failure.
        self._on_error = on_error
        self._entries: deque[_Entry] = deque()
        # Set while a task runs the jobs; stays set (done) after the stop job ran.
        self._task: asyncio.Task[None] | None = None
        # Held: jobs wait until `start` (an owner that must load its state first).
        self._held = held
        # Set once the queue takes nothing more: `call` refuses, `post` drops.
        self.stopped = False

    @property
    def running(self) -> bool:
        """Whether a task runs (or ran, up to the stop job) the queue's jobs."""
        return self._task is not None

    async def call(self, op: Callable[[], Awaitable[T]]) -> T:
        """Run `op` after everything queued before it, and return its result."""
        if self.stopped:
            raise self._refusal()
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._put((op, future))
        return await future

    def post(self, op: Callable[[], Awaitable[object]]) -> None:
        """Run `op` after everything queued before it; nobody awaits it (dropped once
        stopped)."""
        if not self.stopped:
            self._put((op, None))

    def start(self) -> None:
        """End a hold: the jobs queued meanwhile run now."""
        self._held = False
        if self._entries and self._task is None:
            self._spawn()

    def refuse(self) -> None:
        """Take nothing more; what is queued still runs (until `stop`)."""
        self.stopped = True

    def stop(self) -> None:
        """Take nothing more, and end the task after what is queued now."""
        self.stopped = True
        if self._task is not None:
            self._entries.append(None)
        else:  # nothing runs: whatever waits (a held queue) never will
            self._fail_waiting()

    def kill(self) -> None:
        """Stop at once, cutting the running job short."""
        self.stopped = True
        if self._task is not None:
            self._task.cancel()

    async def stopped_running(self) -> None:
        """Until the task has ended (at once when none runs)."""
        if self._task is not None:
            await asyncio.wait([self._task])

    def _put(self, entry: _Entry) -> None:
        self._entries.append(entry)
        if self._task is None and not self._held:
            self._spawn()

    def _spawn(self) -> None:
        self._task = asyncio.create_task(self._run(), name=self._name)

    async def _run(self) -> None:
        """Runs queued jobs in order; ends when the queue is empty or at the stop job."""
        future: asyncio.Future[Any] | None = None
        try:
            while True:
                if not self._entries:
                    self._task = None  # no await since the check: no job can slip in
                    return
                entry = self._entries.popleft()
                if entry is None:
                    break
                op, future = entry
                try:
                    result = await op()
                except Exception as exc:
                    await self._on_error(exc, future is not None)
                    if future is not None and not future.done():
                        future.set_exception(exc)
                else:
                    if future is not None and not future.done():
                        future.set_result(result)
                future = None
        finally:
            # Stopped (or killed mid-job): whatever did not run never will; fail its
            # callers, never hang them.
            if future is not None and not future.done():
                future.set_exception(self._refusal())
            self._fail_waiting()

    def _fail_waiting(self) -> None:
        while self._entries:
            entry = self._entries.popleft()
            if entry is not None and entry[1] is not None and not entry[1].done():
                entry[1].set_exception(self._refusal())


def resolved(value: T) -> asyncio.Future[T]:
    """An already resolved future: what a write done at once (in memory, or with nothing to
    write) returns where the caller awaits a future."""
    future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
    future.set_result(value)
    return future


async def done_with(value: T) -> T:
    """`value` as a job's result (a synchronous change run as a job)."""
    return value
