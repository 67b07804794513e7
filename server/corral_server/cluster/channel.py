"""One owned agent's way into the stream: its lease, and its entries sent as batches.

The owner's writes for an agent (rows, events, records: entries.py) gather here in call order
while the previous batch is in flight, then go to the stream as ONE message (a group commit
on the loop, as the SQLite store's): one append per round trip, however many rows. Each append
is fenced (it names the sequence of the agent's last batch) and deduped (its id is the lease's
tenure and that position, `log.batch_id`), docs/cluster.md#fencing.

The lease is taken when the channel opens (a new agent, or one this node restores), the
subject claimed (`EventLog.claim`), and the lease renewed every third of its duration on the
clock. A refused append (`Fenced`), a lost lease or a lease another node holds breaks the
channel at once: every write waiting fails with the reason, and nothing more is appended for
the agent by this node.

A write's future resolves once this node's own follower has applied its batch to the local
read model (follower.py), so a read after a write sees it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import nats.errors
import nats.js.errors

from corral_server.clock import Clock
from corral_server.cluster.leases import Lease, LeaseHeld, Leases
from corral_server.cluster.log import Appended, EventLog, Refused, batch_id
from corral_server.errors import AgentOwnedElsewhere, ClusterUnavailable, CorralError

log = logging.getLogger(__name__)

# What the stream answers while it has no leader: nothing was stored, or the same id dedupes.
UNANSWERED = (
    TimeoutError,
    nats.errors.TimeoutError,
    nats.js.errors.NoStreamResponseError,
    nats.js.errors.ServiceUnavailableError,
)

# What a batch leaves free of the servers' largest message, for the headers (ids are short).
HEADROOM = 16 << 10
# A renewal that did not reach NATS is tried again after this part of the lease's duration.
RENEW_RETRY_PARTS = 10


@dataclass(frozen=True)
class ChannelParts:
    """What every channel of a node shares."""

    log: EventLog
    leases: Leases
    clock: Clock
    applied: Callable[[int], asyncio.Future[None]]  # resolves once the follower applied it
    max_payload: int  # the servers' largest message (1 MiB by default; deploy/ sets 8 MB)
    # Told of each batch appended, with its entries and their rows as sent (follower.py
    # `appended`): this node's follower applies them without decoding the message again.
    appended: Callable[[int, tuple[bytes, ...], list[object | None]], None] | None = None


class AgentChannel:
    def __init__(self, agent_id: str, parts: ChannelParts, lease: Lease | None = None) -> None:
        """`lease`: one already taken (a takeover, node_loss.py); else the channel takes it."""
        self.agent_id = agent_id
        self._parts = parts
        self._entries: list[bytes] = []
        self._rows: list[object | None] = []  # each entry's row as sent (None: not a row)
        self._futures: list[tuple[int, asyncio.Future[None]]] = []  # (entries before it, f)
        self._wake = asyncio.Event()
        self._sent = asyncio.Event()  # set while nothing waits to be appended
        self._sent.set()
        self.broken: AgentOwnedElsewhere | ClusterUnavailable | None = None
        self.lease: Lease | None = lease
        # The sequence of this tenure's claim, once appended (or why the channel broke first).
        self.claimed: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._tasks = [asyncio.ensure_future(self._run())]

    def send(
        self,
        entries: list[bytes],
        future: bool = True,
        rows: Sequence[object | None] | None = None,
    ) -> asyncio.Future[None] | None:
        """Queue `entries` for the next batch; their future, when asked for. `rows`: each
        entry's row as the writer had it (replica.py), for this node's own follower."""
        done: asyncio.Future[None] | None = None
        if future:
            done = asyncio.get_running_loop().create_future()
        if self.broken is not None:
            if done is not None:
                done.set_exception(self.broken)
                done.exception()  # retrieved here: the caller may never await it
            return done
        self._entries.extend(entries)
        self._rows.extend(rows if rows is not None else [None] * len(entries))
        if done is not None:
            self._futures.append((len(self._entries), done))
        self._wake.set()
        self._sent.clear()
        return done

    async def _run(self) -> None:
        try:
            expected = await self._take_over()
            while True:
                await self._wake.wait()
                self._wake.clear()
                while self._entries:
                    expected = await self._append(expected)
                self._sent.set()
        except asyncio.CancelledError:
            self._break(AgentOwnedElsewhere(self.agent_id, "", "this node stopped"), quiet=True)
            raise
        except Refused as refused:
            self._break(AgentOwnedElsewhere(self.agent_id, _holder(refused), str(refused)))
        except Exception as error:  # a stream that cannot be reached: stop writing
            log.exception("agent %s: its writes to the stream stopped", self.agent_id)
            self._break(ClusterUnavailable(self.agent_id, f"the stream failed: {error!r}"))

    async def _take_over(self) -> int:
        parts = self._parts
        self.lease = self.lease or await self._acquire()
        self._tasks.append(asyncio.ensure_future(self._renew()))
        claimed = await parts.log.claim(self.agent_id, self.lease.owner)
        self.claimed.set_result(claimed)
        return claimed

    async def _acquire(self) -> Lease:
        """The agent's lease. One this very node still holds is a tenure it lost track of (it
        was killed and restarted within the lease): it waits that one out rather than take
        it, since only an expired lease may be taken; the agent's writes wait meanwhile."""
        leases, clock = self._parts.leases, self._parts.clock
        while True:
            try:
                return await leases.acquire(self.agent_id)
            except LeaseHeld as held:
                if held.node != leases.node:
                    raise
                left_ms = held.expires_ms + leases.skew_ms - clock.now_ms()
                log.info(
                    "agent %s: waiting %d ms for this node's old lease", self.agent_id, left_ms
                )
                await clock.sleep(max(left_ms, 1) / 1000)

    async def _append(self, expected: int) -> int:
        """Send what waits (as much as one message holds) as one batch; the new expected
        sequence."""
        parts, lease = self._parts, self.lease
        assert lease is not None
        bound = parts.max_payload - HEADROOM
        count, size = 0, 0
        for entry in self._entries:
            if size + len(entry) + 4 > bound:
                break
            count, size = count + 1, size + len(entry) + 4
        if not count:
            raise Refused(
                self.agent_id,
                f"an entry of {len(self._entries[0])} bytes does not fit the NATS servers' "
                f"max_payload of {parts.max_payload} bytes (run them with max_payload: 8MB)",
            )
        batch = self._entries[:count]
        if not parts.leases.valid(lease):
            raise Refused(self.agent_id, f"the lease of node {lease.node} expired")
        msg_id = batch_id(self.agent_id, lease.owner, expected)
        appended = await self._appended(batch, expected, msg_id)
        rows = self._rows[:count]
        del self._entries[:count]
        del self._rows[:count]
        if parts.appended is not None and not appended.duplicate:
            parts.appended(appended.sequence, tuple(batch), rows)
        ready = [f for before, f in self._futures if before <= count]
        self._futures = [(before - count, f) for before, f in self._futures if before > count]
        if ready:
            applied = parts.applied(appended.sequence)
            applied.add_done_callback(lambda a: _settle(ready, a, self.agent_id))
        return appended.sequence

    async def _appended(self, batch: list[bytes], expected: int, msg_id: str) -> Appended:
        """The batch appended: tried again with the same message id (stored once, however
        many tries reached the stream) while the stream does not answer (an election that
        outlasts the log's own retries) and the lease is still valid; then Refused."""
        parts, lease = self._parts, self.lease
        assert lease is not None
        while True:
            try:
                return await parts.log.append(self.agent_id, batch, expected, msg_id)
            except UNANSWERED as error:
                if not parts.leases.valid(self.lease or lease):
                    raise Refused(self.agent_id, f"the stream did not answer: {error!r}") from None
                log.warning("agent %s: the stream did not answer; trying again", self.agent_id)

    async def _renew(self) -> None:
        """Every third of the lease, counted from the expiry the last renewal wrote (a renewal
        that came late, on a loop busy with bursts, does not push the next one later too); a
        renewal that fails to reach NATS is tried again after a tenth of the lease (each
        append checks the lease is still valid), one the leases refuse ends it."""
        parts = self._parts
        duration_ms = parts.leases.duration_ms
        pause_ms = duration_ms / 3
        while self.broken is None and self.lease is not None:
            await parts.clock.sleep(pause_ms / 1000)
            try:
                self.lease = await parts.leases.renew(self.lease)
            except Refused as refused:
                self._break(AgentOwnedElsewhere(self.agent_id, "", str(refused)))
                self._tasks[0].cancel()
                return
            except Exception as error:
                log.warning("agent %s: its lease was not renewed: %r", self.agent_id, error)
                pause_ms = duration_ms / RENEW_RETRY_PARTS
                continue
            due_ms = self.lease.expires_ms - duration_ms * 2 / 3
            pause_ms = max(due_ms - parts.clock.now_ms(), 0)

    def _break(self, reason: AgentOwnedElsewhere | ClusterUnavailable, quiet: bool = False) -> None:
        if self.broken is not None:
            return
        self.broken = reason
        if not self.claimed.done():
            self.claimed.set_exception(reason)
            self.claimed.exception()  # retrieved: only a takeover awaits it
        if not quiet:  # a stop is no news; a lost agent is
            log.warning("agent %s: this node stops writing it: %s", self.agent_id, reason.message)
        futures, self._futures, self._entries, self._rows = self._futures, [], [], []
        for _, future in futures:
            if not future.done():
                future.set_exception(reason)
                future.exception()

    async def close(self, grace_s: float = 2.0) -> None:
        """Stop (the daemon stops): what waits is appended first (within `grace_s`), and the
        lease is given up."""
        if self.broken is None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._sent.wait(), grace_s)
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(BaseException):
                await task
        if self.lease is not None:
            with contextlib.suppress(Exception):
                await self._parts.leases.release(self.lease)


def _holder(refused: Refused) -> str:
    return str(getattr(refused, "node", ""))


def _settle(
    futures: list[asyncio.Future[None]], applied: asyncio.Future[None], agent_id: str
) -> None:
    failure = applied.exception() if not applied.cancelled() else asyncio.CancelledError()
    if failure is not None and not isinstance(failure, (CorralError, asyncio.CancelledError)):
        # The read model stopped following (a NATS timeout, a local database failure): the
        # write is in the stream, but this node cannot show it; never an INTERNAL.
        failure = ClusterUnavailable(agent_id, f"the read model stopped: {failure!r}")
    for future in futures:
        if future.done():
            continue
        if failure is None:
            future.set_result(None)
        else:
            future.set_exception(failure)
