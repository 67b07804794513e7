"""Every node's follower: it reads the stream in order from the last sequence it applied and
hands each batch to the read model (apply.py), so that every node, the owner included, builds
the same read model and its hub numbers the same events with the same revisions.

It reads through an ordered push consumer of the stream from the next sequence it needs (many
batches per round trip, each delivered once it is stored). A gap in what the consumer delivers,
a consumer that goes quiet while a write waits, or one that cannot be made (no meta leader in
an election) falls back to `EventLog.read`: the stream leader's own copy, message by message,
which works as soon as appends do. `applied(sequence)` is a future that resolves once the
local read model committed that far: the owner's writes wait for it.

Must not: compute anything of its own into the read model (every value comes from the entry).
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
from collections.abc import Callable
from dataclasses import replace
from functools import partial

import nats.errors
import nats.js.errors
from nats.aio.msg import Msg

from corral_server.cluster.log import Batch, EventLog, batch_of_message

log = logging.getLogger(__name__)

READ_BATCHES = 256  # batches read from the leader per round
IN_FLIGHT = 64  # batches applied, then the follower waits for their local commit
# What a read answers while the stream's leader is being elected or the node is cut off from
# NATS: the follower reads again from where it is (its position is the read model's own).
UNANSWERED = (
    TimeoutError,
    nats.errors.TimeoutError,
    nats.errors.NoRespondersError,
    nats.js.errors.ServiceUnavailableError,
)
QUIET_S = 0.25  # a consumer this quiet while a write waits: read from the stream leader


class Follower:
    def __init__(
        self,
        event_log: EventLog,
        apply: Callable[[Batch], asyncio.Future[None]],
        position: int,
    ) -> None:
        self._log = event_log
        self._apply = apply
        self.read_to = position  # handed to the read model
        self.committed = position  # committed in the local database
        self._waiters: list[tuple[int, int, asyncio.Future[None]]] = []
        self._order = itertools.count()
        self._task: asyncio.Task[None] | None = None
        self._unconfirmed = 0
        # This node's own batches, acknowledged and not yet read back: applied from what
        # was sent (`appended`) instead of decoding the message again.
        self._own: dict[int, tuple[tuple[bytes, ...], list[object | None]]] = {}
        self.failure: BaseException | None = None
        self.unanswered = 0  # reads the stream did not answer in a row (an election, a cut)
        self.on_failed: Callable[[], None] | None = None  # told once, when it stops

    async def start(self) -> None:
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
        return future

    def appended(self, sequence: int, events: tuple[bytes, ...], rows: list[object | None]) -> None:
        """A batch this node appended at `sequence`: its entries as sent, each with its row
        as the writer had it (None: not a row), kept until the follower reaches it."""
        if sequence > self.read_to:
            self._own[sequence] = (events, rows)

    async def caught_up(self) -> None:
        """Until the read model has committed the stream as far as it reached at the call."""
        await self.applied(await self._log.end())

    async def _run(self) -> None:
        try:
            while self.failure is None:  # a read model that failed is followed no further
                try:
                    await self._follow()
                    self.unanswered = 0
                except UNANSWERED as error:
                    if self.failure is not None:  # the read model itself failed: stop
                        raise
                    self._unanswered(error)
                    await asyncio.sleep(QUIET_S)
        except asyncio.CancelledError:
            raise
        except BaseException as error:  # the read model can no longer follow: say so, stop
            log.exception("the cluster follower stopped at sequence %d", self.committed)
            self._fail(error)

    async def _follow(self) -> None:
        """Through a consumer from the next sequence, until it fails or goes quiet while a
        write waits: then what the stream holds is read from its leader, and again."""
        consumer = None
        try:
            consumer = await self._log.consumer(self.read_to + 1)
        except Exception as error:  # e.g. no meta leader yet: read from the stream leader
            log.debug("no consumer of the stream (%s): reading from its leader", error)
            await self._read_leader(None)
            await asyncio.sleep(QUIET_S)
            return
        try:
            while consumer is not None:
                try:
                    msg = await consumer.next_msg(timeout=QUIET_S)
                except nats.errors.TimeoutError:
                    if any(sequence > self.read_to for sequence, _, _ in self._waiters):
                        break  # a write waits for what the consumer did not bring
                    continue
                batch = self._own_batch(msg) or batch_of_message(msg, self._log.prefix)
                if batch.sequence <= self.read_to:
                    continue  # delivered again after the consumer was remade
                if batch.sequence > self.read_to + 1:
                    await self._read_leader(batch.sequence - 1)
                await self._hand_bounded(batch)
            await self._read_leader(None)
        finally:
            if consumer is not None:
                with contextlib.suppress(Exception):
                    await consumer.unsubscribe()

    def _unanswered(self, error: BaseException) -> None:
        """Said once an outage (the first unanswered read), then quietly counted."""
        self.unanswered += 1
        if self.unanswered == 1:
            log.warning(
                "the stream did not answer a read at sequence %d (%r): reading again",
                self.read_to + 1,
                error,
            )

    async def _read_leader(self, last: int | None) -> None:
        """What the stream holds after the position (up to `last`), from its leader."""
        while last is None or self.read_to < last:
            batches = await self._log.read(self.read_to + 1, READ_BATCHES)
            for batch in batches:
                if last is not None and batch.sequence > last:
                    return
                await self._hand_bounded(batch)
            if len(batches) < READ_BATCHES:
                return

    async def _hand_bounded(self, batch: Batch) -> None:
        done = self._hand(batch)
        self._unconfirmed += 1
        if self._unconfirmed >= IN_FLIGHT:
            self._unconfirmed = 0
            await done  # the local database keeps up before more is taken

    def _own_batch(self, msg: Msg) -> Batch | None:
        """The message as this node appended it, if it did (nothing decoded)."""
        sequence = msg.metadata.sequence.stream
        own = self._own.pop(sequence, None)
        if own is None:
            return None
        agent = msg.subject.removeprefix(self._log.prefix)
        return Batch(sequence, agent, own[0], None, own[1])

    def _hand(self, batch: Batch) -> asyncio.Future[None]:
        if self._own:
            own = self._own.pop(batch.sequence, None)
            if own is not None and batch.rows is None:  # read back from the stream leader
                batch = replace(batch, rows=own[1])
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
        first = self.failure is None
        self.failure = failure
        if first and self.on_failed is not None:
            self.on_failed()
        for _, _, future in self._waiters:
            if not future.done():
                future.set_exception(failure)
        self._waiters = []

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task
