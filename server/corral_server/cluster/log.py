"""The cluster's event log: one JetStream stream (file storage, three replicas), whose order is
the server-wide revision order, the same on every node.

An agent's events go to its own subject, `corral.events.<agent>`, a batch of events per message
(few messages for many rows). Each append says the sequence of the last message it expects on
that subject (`Nats-Expected-Last-Subject-Sequence`): a writer that is no longer the agent's
owner has a stale expectation and is refused (`Fenced`), so it cannot add one more event.
Each append also carries a message id (`Nats-Msg-Id`), so a retry of an append whose
acknowledgement was lost is stored once. The pitfalls, handled here (docs/cluster.md#dedupe):

- The server remembers a message id only for the stream's duplicate window (two minutes by
  default). A retry after the window is stored again unless something else refuses it: the
  fencing does (the first copy moved the subject's last sequence), so a late retry is answered
  `Fenced`, and `append` then looks at the subject's next message after the expected one: if it
  carries this message id, the append had succeeded and is reported as a duplicate.
- The same look-up covers a leader change that lost the new leader's memory of the id.
- A message id is remembered for the whole window whatever the content: an id reused for
  another batch makes that batch vanish silently (acknowledged as a duplicate). `batch_id`
  builds ids that are unique per writer and position, never reused for other content. (The
  server checks the id before the expected sequence, so a repeated id would also hide a fence.)
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import nats.errors
import nats.js.errors
from nats.aio.msg import Msg
from nats.js import JetStreamContext, api

SUBJECT_PREFIX = "corral.events."  # tests give each of their streams its own
WRONG_LAST_SEQUENCE = 10071  # JetStream's error code for a failed expected-sequence check
OWNER_HEADER = "Corral-Owner"
LENGTH = struct.Struct(">I")  # an event's length in a batch
RETRY_PAUSE_S = 0.05  # between tries while no stream leader answers
# A subject token: no dots, wildcards or white space (the agent ids corral makes fit).
TOKEN = re.compile(r"[A-Za-z0-9_-]+")


@dataclass(eq=False)
class Refused(Exception):
    """The cluster refused a change to one agent; `detail` says why."""

    agent: str
    detail: str

    def __str__(self) -> str:
        return f"agent {self.agent}: {self.detail}"


@dataclass(eq=False)
class Fenced(Refused):
    """The agent's subject has moved past the sequence this writer expected: another writer
    appended (it owns the agent now), so this one must stop writing for the agent."""

    expected: int = 0


@dataclass(frozen=True)
class Appended:
    sequence: int  # the batch's stream sequence: the revision of its last event
    duplicate: bool  # True: an earlier try of this append had stored it already


@dataclass(frozen=True)
class Batch:
    """One message of the log as read back."""

    sequence: int
    agent: str
    events: tuple[bytes, ...]
    owner: str | None  # set on a claim: the owner that took the agent over here
    # On the node that appended it: each event's row as the owner had it before encoding
    # (None for other entries), so its own follower need not parse what it just encoded.
    rows: Sequence[object | None] | None = None


def subject(agent: str, prefix: str = SUBJECT_PREFIX) -> str:
    if not TOKEN.fullmatch(agent):
        raise ValueError(f"agent id {agent!r} is not a NATS subject token")
    return prefix + agent


def batch_id(agent: str, writer: str, expected: int) -> str:
    """A message id unique to one batch: the writer (e.g. node and lease revision) and the
    position it appends at. A retry of the same batch gets the same id; no other batch can."""
    return f"{agent}:{writer}:{expected}"


def encode(events: Sequence[bytes]) -> bytes:
    """The events of one batch, each after its length (four bytes, big-endian)."""
    return b"".join(LENGTH.pack(len(event)) + event for event in events)


def decode(
    payload: bytes, _unpack: Callable[[bytes, int], tuple[int]] = LENGTH.unpack_from
) -> tuple[bytes, ...]:
    """`encode`'s events again (every node, every batch: its loop kept to locals)."""
    events: list[bytes] = []
    keep = events.append
    position, end = 0, len(payload)
    while position < end:
        (length,) = _unpack(payload, position)
        position += 4  # LENGTH.size
        keep(payload[position : position + length])
        position += length
    return tuple(events)


@dataclass(frozen=True)
class EventLog:
    """The stream `name`; `open` makes it when missing."""

    _js: JetStreamContext
    name: str
    incarnation: str
    prefix: str

    @classmethod
    async def open(
        cls,
        js: JetStreamContext,
        name: str = "CORRAL_EVENTS",
        replicas: int = 3,
        duplicate_window_s: float = 120.0,
        prefix: str = SUBJECT_PREFIX,
    ) -> EventLog:
        """The stream, made when missing. Its incarnation is its creation (name and creation
        time): a stream deleted and made again is another log, whose revisions mean other
        events, so a client's resume point from the old one is refused, not misread."""
        config = api.StreamConfig(
            name=name,
            subjects=[prefix + ">"],
            storage=api.StorageType.FILE,
            num_replicas=replicas,
            duplicate_window=duplicate_window_s,
        )
        await _made(js, config)
        info = await led(js, name)  # made now or just before: appends need its leader
        if info.created is None:
            raise RuntimeError(f"stream {name}: the server reported no creation time")
        return cls(js, name, f"{name}@{info.created.isoformat()}", prefix)

    def subject(self, agent: str) -> str:
        return subject(agent, self.prefix)

    async def end(self) -> int:
        """The stream's last sequence now (0 when it is empty)."""
        info = await self._js.stream_info(self.name)
        return info.state.last_seq or 0

    async def last_sequence(self, agent: str) -> int:
        """The stream sequence of the agent's last batch, 0 when it has none."""
        try:
            msg = await self._js.get_last_msg(self.name, self.subject(agent))
        except nats.js.errors.NotFoundError:
            return 0
        return msg.seq or 0

    async def append(
        self,
        agent: str,
        events: Sequence[bytes],
        expected: int,
        msg_id: str,
        owner: str | None = None,
        retry_s: float = 10.0,
    ) -> Appended:
        """Store `events` as one message on the agent's subject if the subject's last message
        is still `expected` (0: none). Raises `Fenced` when it is not, unless the message there
        is this very append (same `msg_id`), stored by an earlier try. While no stream leader
        answers (an election, a server gone) it tries again with the same id for `retry_s`,
        well inside the duplicate window; then the last error is raised."""
        headers = {
            api.Header.EXPECTED_LAST_SUBJECT_SEQUENCE.value: str(expected),
            api.Header.MSG_ID.value: msg_id,
        }
        if owner is not None:
            headers[OWNER_HEADER] = owner
        try:
            ack = await self._publish(self.subject(agent), encode(events), headers, retry_s)
        except nats.js.errors.APIError as error:
            if error.err_code != WRONG_LAST_SEQUENCE:
                raise
            earlier = await self._stored_after(agent, expected, msg_id)
            if earlier is not None:
                return Appended(earlier, duplicate=True)
            detail = f"expected last sequence {expected}: {error.description}"
            raise Fenced(agent, detail, expected) from None
        return Appended(ack.seq, duplicate=bool(ack.duplicate))

    async def _publish(
        self, subject: str, payload: bytes, headers: dict[str, str], retry_s: float
    ) -> api.PubAck:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + retry_s
        while True:
            left = deadline - loop.time()
            try:
                return await self._js.publish(
                    subject,
                    payload,
                    timeout=max(0.05, min(2.0, left)),
                    stream=self.name,
                    headers=dict(headers),
                )
            except (
                TimeoutError,
                nats.errors.TimeoutError,
                nats.js.errors.NoStreamResponseError,
                nats.js.errors.ServiceUnavailableError,
            ):
                if loop.time() >= deadline:
                    raise
            await asyncio.sleep(RETRY_PAUSE_S)

    async def claim(self, agent: str, owner: str, attempts: int = 10) -> int:
        """Take the agent's subject over for a new owner (who holds the agent's lease): append
        an empty batch naming `owner` at the subject's current end, so any append the previous
        owner still has in flight finds its expectation stale. Returns the sequence the new
        owner's first append expects."""
        for _ in range(attempts):
            expected = await self.last_sequence(agent)
            try:
                claimed = await self.append(agent, (), expected, f"claim:{owner}:{agent}", owner)
            except Fenced:
                continue  # the old owner's last append landed in between: claim after it
            return claimed.sequence
        raise Fenced(agent, f"no claim for {owner} in {attempts} attempts", expected)

    async def _stored_after(self, agent: str, expected: int, msg_id: str) -> int | None:
        """The sequence of the agent's first message after `expected` if it is `msg_id`."""
        try:
            msg = await self._js.get_msg(
                self.name, seq=expected + 1, subject=self.subject(agent), next=True
            )
        except nats.js.errors.NotFoundError:
            return None
        if (msg.headers or {}).get(api.Header.MSG_ID.value) == msg_id:
            return msg.seq
        return None

    async def consumer(self, start: int) -> JetStreamContext.PushSubscription:
        """An ordered push consumer of every agent's batches from stream sequence `start`
        (`next_msg` gives each; `batch_of_message` reads it). Making one needs the meta
        leader; it remakes itself past a gap or a lost connection."""
        config = api.ConsumerConfig(
            deliver_policy=api.DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=max(start, 1)
        )
        return await self._js.subscribe(
            self.prefix + ">", stream=self.name, ordered_consumer=True, config=config
        )

    async def read(self, start: int, limit: int = 1000) -> list[Batch]:
        """Up to `limit` batches from stream sequence `start` on, in stream order, as far as
        the stream reaches now. Each comes from the stream leader (never a replica that may lag
        behind an acknowledged append), one request a batch, and needs no consumer, so no meta
        leader either: reading works as soon as appending does after a failover."""
        batches: list[Batch] = []
        sequence = max(start, 1)
        while len(batches) < limit:
            try:
                msg = await self._js.get_msg(
                    self.name, seq=sequence, subject=self.prefix + ">", next=True
                )
            except nats.js.errors.NotFoundError:
                break
            batches.append(batch_of(msg, self.prefix))
            sequence = (msg.seq or sequence) + 1
        return batches


async def _made(js: JetStreamContext, config: api.StreamConfig, wait_s: float = 30.0) -> None:
    """The stream made unless it exists, tried again while the servers do not answer in time
    (a loaded or just started cluster's meta leader): making it again with the same
    configuration is no change, so a creation that landed unanswered is harmless."""
    assert config.name is not None
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_s
    while True:
        try:
            try:
                await js.stream_info(config.name)
            except nats.js.errors.NotFoundError:
                # BadRequest: another node made it meanwhile.
                with contextlib.suppress(nats.js.errors.BadRequestError):
                    await js.add_stream(config)
            return
        except (nats.errors.TimeoutError, nats.js.errors.ServiceUnavailableError):
            if loop.time() >= deadline:
                raise
            await asyncio.sleep(0.1)


async def led(js: JetStreamContext, name: str, wait_s: float = 10.0) -> api.StreamInfo:
    """The stream's information once it has a leader: a stream just made answers no appends
    (no responders) until its replicas elected one and the servers learnt of it."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_s
    while True:
        try:
            info = await js.stream_info(name)
            if info.cluster is None or info.cluster.leader:
                return info
        except (nats.errors.TimeoutError, nats.js.errors.NotFoundError):
            pass
        if loop.time() >= deadline:
            raise TimeoutError(f"stream {name} has no leader after {wait_s} s")
        await asyncio.sleep(RETRY_PAUSE_S)


def batch_of_message(msg: Msg, prefix: str) -> Batch:
    """A batch as a consumer delivers it."""
    return Batch(
        sequence=msg.metadata.sequence.stream,
        agent=msg.subject.removeprefix(prefix),
        events=decode(msg.data),
        owner=(msg.headers or {}).get(OWNER_HEADER),
    )


def batch_of(msg: api.RawStreamMsg, prefix: str) -> Batch:
    headers = msg.headers or {}
    return Batch(
        sequence=msg.seq or 0,
        agent=(msg.subject or "").removeprefix(prefix),
        events=decode(msg.data or b""),
        owner=headers.get(OWNER_HEADER),
    )
