"""Every node's follower: it reads the stream in order from the last sequence it applied and
hands each batch to the read model (apply.py), so that every node, the owner included, builds
the same read model and its hub numbers the same events with the same revisions.

It reads with `EventLog.read` (from the stream's leader, so never behind an acknowledged
append, and working as soon as appends do after a failover), woken by a plain subscription to
the stream's subjects (every append is a message there too); a wake that came before the
stream stored its message is caught by a short re-read. `applied(sequence)` is a future that
resolves once the local read model committed that far: the owner's writes wait for it.

Must not: compute anything of its own into the read model (every value comes from the entry).
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
from collections.abc import Callable
from functools import partial

import nats.aio.client
from nats.aio.msg import Msg

from corral_server.cluster.log import Batch, EventLog

log = logging.getLogger(__name__)

READ_BATCHES = 256  # batches read per round
IN_FLIGHT = 64  # a round of this many batches waits for its local commit before the next
REREAD_S = 0.2  # a wake-up may come before the stream stored its message: read again after


class Follower:
    def __init__(
        self,
        event_log: EventLog,
        client: nats.aio.client.Client,
        apply: Callable[[Batch], asyncio.Future[None]],
        position: int,
    ) -> None:
        self._log = event_log
        self._client = client
        self._apply = apply
        self.read_to = position  # handed to the read model
        self.committed = position  # committed in the local database
        self._waiters: list[tuple[int, int, asyncio.Future[None]]] = []
        self._order = itertools.count()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._subscription: object | None = None
        self.failure: BaseException | None = None

    async def start(self) -> None:
        async def woken(_: Msg) -> None:
            self._wake.set()

        self._subscription = await self._client.subscribe(self._log.prefix + ">", cb=woken)
        self._task = asyncio.ensure_future(self._run())

    def applied(self, sequence: int) -> asyncio.Future[None]:
        """Resolves once the local read model committed everything up to `sequence`."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self.failure is not None:
            future.set_exception(self.failure)
        elif self.committed >= sequence:
            future.set_result(None)
        else:
            heapq.heappush(self._waiters, (sequence, next(self._order), future))
            self._wake.set()
        return future

    async def caught_up(self) -> None:
        """Until the read model has committed the stream as far as it reached at the call."""
        await self.applied(await self._log.end())

    async def _run(self) -> None:
        try:
            while True:
                self._wake.clear()
                batches = await self._log.read(self.read_to + 1, READ_BATCHES)
                last: asyncio.Future[None] | None = None
                for batch in batches:
                    last = self._hand(batch)
                if last is not None and len(batches) >= IN_FLIGHT:
                    await last  # the local database keeps up before more is read
                if len(batches) < READ_BATCHES:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._wake.wait(), REREAD_S)
        except asyncio.CancelledError:
            raise
        except BaseException as error:  # the read model can no longer follow: say so, stop
            log.exception("the cluster follower stopped at sequence %d", self.committed)
            self._fail(error)

    def _hand(self, batch: Batch) -> asyncio.Future[None]:
        done = self._apply(batch)
        self.read_to = batch.sequence
        done.add_done_callback(partial(self._committed, batch.sequence))
        return done

    def _committed(self, sequence: int, done: asyncio.Future[None]) -> None:
        failure = done.exception() if not done.cancelled() else asyncio.CancelledError()
        if failure is not None:
            self._fail(failure)
            return
        self.committed = max(self.committed, sequence)
        while self._waiters and self._waiters[0][0] <= self.committed:
            future = heapq.heappop(self._waiters)[2]
            if not future.done():
                future.set_result(None)

    def _fail(self, failure: BaseException) -> None:
        self.failure = failure
        for _, _, future in self._waiters:
            if not future.done():
                future.set_exception(failure)
        self._waiters = []

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task
        unsubscribe = getattr(self._subscription, "unsubscribe", None)
        if unsubscribe is not None:
            with contextlib.suppress(Exception):
                await unsubscribe()
