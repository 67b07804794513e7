"""Agent ownership by lease, in a JetStream KV bucket (three replicas): the key is the agent,
the value names the owning node and when the lease expires (docs/cluster.md#leases).

Every change is a compare-and-set on the key's revision: `acquire` creates the key (or replaces
an expired value, naming the revision it read), `renew` and `release` name the revision the
holder last wrote. Two nodes can never both believe they took one lease, since only one write
can follow a revision. The expiry is kept in the value and read against the injectable clock,
not left to the server: a node's writer stops at its own reading of the expiry less the skew
margin, and another node takes the lease only after the expiry plus the margin, so with clocks
within `skew_ms` of each other the two never overlap. The bucket's server-side age limit only
sweeps leases abandoned long ago (an optimisation, never what decides ownership).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import nats.js.errors
from nats.js import JetStreamContext
from nats.js.kv import KeyValue

from corral_server.clock import Clock
from corral_server.cluster.log import WRONG_LAST_SEQUENCE, Refused, led


@dataclass(eq=False)
class LeaseHeld(Refused):
    """Another node (`node`) holds the agent's lease and it has not expired."""

    node: str = ""
    expires_ms: int = 0


@dataclass(eq=False)
class LeaseLost(Refused):
    """The lease expired or another node took it: its holder must stop the agent's writer."""


@dataclass(frozen=True)
class Lease:
    agent: str
    node: str
    revision: int  # the key's revision this holder wrote last: the next renew names it
    expires_ms: int
    epoch: int  # the revision of the acquire: names this tenure in the log (claims, msg ids)

    @property
    def owner(self) -> str:
        """This tenure, as the event log's claims and message ids name it."""
        return f"{self.node}-{self.epoch}"


@dataclass(frozen=True)
class Holder:
    node: str
    expires_ms: int
    revision: int


def encode(node: str, expires_ms: int) -> bytes:
    return json.dumps({"node": node, "expires_ms": expires_ms}).encode()


def decode(value: bytes | None, revision: int) -> Holder:
    fields = json.loads(value or b"{}")
    return Holder(str(fields["node"]), int(fields["expires_ms"]), revision)


def held(agent: str, holder: Holder) -> LeaseHeld:
    detail = f"owned by node {holder.node} until {holder.expires_ms}"
    return LeaseHeld(agent, detail, holder.node, holder.expires_ms)


async def open_bucket(js: JetStreamContext, bucket: str, replicas: int, age_s: float) -> KeyValue:
    """The KV bucket, made when missing with `replicas` and values aging out after `age_s` of
    the servers' time, and waited for until it has a leader."""
    try:
        kv = await js.key_value(bucket)
    except nats.js.errors.BucketNotFoundError:
        try:
            kv = await js.create_key_value(bucket=bucket, replicas=replicas, ttl=age_s)
        except nats.js.errors.BadRequestError:  # another node made it meanwhile
            kv = await js.key_value(bucket)
    # Made by this node or just before by another one: writes need its leader either way.
    await led(js, f"KV_{bucket}")
    return kv


T = TypeVar("T")
UNANSWERED_RETRY_S = 2.0


async def unanswered_retried(op: Callable[[], Awaitable[T]]) -> T:
    """`op()`, tried again for up to UNANSWERED_RETRY_S while no stream server answers it (a
    leader being elected): such a request reached no stream, so trying again cannot write
    twice. A timeout is not retried here (the write may have landed)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + UNANSWERED_RETRY_S
    while True:
        try:
            return await op()
        except nats.js.errors.NoStreamResponseError:
            if loop.time() >= deadline:
                raise
        await asyncio.sleep(0.05)


@dataclass(frozen=True)
class Leases:
    """The leases as node `node` takes and keeps them."""

    _kv: KeyValue
    node: str
    _clock: Clock
    duration_ms: int
    skew_ms: int

    @classmethod
    async def open(
        cls,
        js: JetStreamContext,
        node: str,
        clock: Clock,
        bucket: str = "corral_leases",
        replicas: int = 3,
        duration_ms: int = 10_000,
        skew_ms: int = 1_000,
    ) -> Leases:
        """The bucket, made when missing. Its values age out after three lease durations of
        the servers' time: only leases nobody renewed for that long, long expired."""
        kv = await open_bucket(js, bucket, replicas, 3 * (duration_ms + skew_ms) / 1000)
        return cls(kv, node, clock, duration_ms, skew_ms)

    async def watch(self) -> KeyValue.KeyWatcher:
        """Every lease as it is now, then each change (deleted ones with their operation)."""
        return await self._kv.watchall()

    def valid(self, lease: Lease) -> bool:
        """Whether the holder may still write: before the expiry less the skew margin."""
        return self._clock.now_ms() < lease.expires_ms - self.skew_ms

    async def holder(self, agent: str) -> Holder | None:
        try:
            entry = await self._kv.get(agent)
        except nats.js.errors.KeyNotFoundError:
            return None
        return decode(entry.value, entry.revision or 0)

    async def acquire(self, agent: str) -> Lease:
        """The agent's lease for this node: free, released, or expired (by this node's clock,
        past the skew margin). Raises `LeaseHeld` while any node holds it, this one too."""
        expires_ms = self._clock.now_ms() + self.duration_ms
        value = encode(self.node, expires_ms)
        try:
            revision = await unanswered_retried(lambda: self._kv.create(agent, value))
        except nats.js.errors.KeyWrongLastSequenceError:
            revision = await self._take_expired(agent, value)
        return Lease(agent, self.node, revision, expires_ms, epoch=revision)

    async def _take_expired(self, agent: str, value: bytes) -> int:
        current = await self.holder(agent)
        if current is None:  # released or swept in between: try once more from scratch
            try:
                return await self._kv.create(agent, value)
            except nats.js.errors.KeyWrongLastSequenceError:
                current = await self.holder(agent)
        if current is None:
            raise LeaseHeld(agent, "another node is taking the lease")
        if self._clock.now_ms() < current.expires_ms + self.skew_ms:
            raise held(agent, current)
        try:
            return await self._kv.update(agent, value, last=current.revision)
        except nats.js.errors.KeyWrongLastSequenceError:
            raise held(agent, current) from None

    async def renew(self, lease: Lease) -> Lease:
        """The lease for another duration from now. Raises `LeaseLost` when it expired first
        (another node may hold it already) or another node wrote the key since."""
        if not self.valid(lease):
            raise LeaseLost(lease.agent, f"node {self.node}: the lease expired before the renewal")
        expires_ms = self._clock.now_ms() + self.duration_ms
        try:
            value = encode(self.node, expires_ms)
            revision = await unanswered_retried(
                lambda: self._kv.update(lease.agent, value, last=lease.revision)
            )
        except nats.js.errors.KeyWrongLastSequenceError:
            raise LeaseLost(lease.agent, f"node {self.node}: another node took the lease") from None
        return Lease(lease.agent, self.node, revision, expires_ms, lease.epoch)

    async def release(self, lease: Lease) -> None:
        """Give the lease up at once (a clean stop), if this node still holds it."""
        try:
            await self._kv.delete(lease.agent, last=lease.revision)
        except nats.js.errors.APIError as error:
            if error.err_code != WRONG_LAST_SEQUENCE:
                raise
            raise LeaseLost(lease.agent, f"node {self.node}: another node took the lease") from None
