"""The hub on a durable event log (docs/design.md#durability): an event is published only once the
log has committed it; a failed commit publishes nothing, loses nothing and renumbers nothing
(the log writer retries on the clock); the hub continues the log's revisions and incarnation; a
resume or a laggard whose position left the ring catches up from the log, with a reset only
where the log no longer retains it.

`GatedLog` commits only when a test says so, so each step is observable; batches are decoded
as real SubscribeResponse messages (rpc/convert.py's encoder).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import pytest

from corral.v1 import event_service_pb2 as event_pb
from corral_server.clock import FakeClock
from corral_server.domain.agent import Agent
from corral_server.domain.events import TurnStarted
from corral_server.hub import EventHub, Subscription
from corral_server.hub.log_writer import RETRY_FIRST_S
from corral_server.hub.ring import frame_with_revision
from corral_server.records import InMemoryEventLog, LogEntry
from corral_server.rpc.convert import encode_event
from corral_server.store.errors import StoreWriteFailed
from tests.support.fakes import idle_agent
from tests.support.hub import poll


class GatedLog(InMemoryEventLog):
    """An in-memory log whose appends commit only on `commit_next()` (or fail on `fail()`),
    batch by batch, like the SQLite log's group commit."""

    def __init__(self) -> None:
        super().__init__(mint=lambda: "gated")
        self._queued: list[tuple[list[LogEntry], asyncio.Future[None]]] = []
        self._next = 1

    @property
    def next_revision(self) -> int:
        return self._next

    def append_many(self, batch: Sequence[LogEntry]) -> asyncio.Future[None]:
        assert batch and batch[0].revision == self._next, (batch, self._next)
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queued.append((list(batch), future))
        self._next = batch[-1].revision + 1
        return future

    def commit_next(self) -> None:
        batch, future = self._queued.pop(0)
        super().append_many(batch)
        future.set_result(None)

    def fail(self) -> None:
        """The next commit fails: it and everything queued behind it fail."""
        queued, self._queued = self._queued, []
        for _, future in queued:
            future.set_exception(StoreWriteFailed(Path("corral.db"), "disk full"))
        self._next = self.head_revision + 1


def agents(scope: frozenset[str]) -> list[Agent]:
    return [idle_agent("a1")]


def ready(sub: Subscription) -> list[event_pb.Event]:
    out: list[event_pb.Event] = []
    while (batch := poll(sub)) is not None:
        out += event_pb.SubscribeResponse.FromString(batch).events
    return out


async def read(sub: Subscription, count: int) -> list[event_pb.Event]:
    """The next `count` events of the stream (waiting as a reader does)."""
    out: list[event_pb.Event] = []
    while len(out) < count:
        batch = await asyncio.wait_for(anext(sub), 5)
        out += event_pb.SubscribeResponse.FromString(batch).events
    return out


def turns(stream: list[event_pb.Event]) -> list[tuple[int, str]]:
    return [(e.revision, e.turn_started.turn_id) for e in stream if e.HasField("turn_started")]


async def settle() -> None:
    for _ in range(3):
        await asyncio.sleep(0)  # let the log's done-callbacks run (not a wait for time)


async def test_an_event_is_published_only_once_the_log_committed_it() -> None:
    log = GatedLog()
    hub = EventHub(encode_event, log=log)
    sub = hub.subscribe(frozenset(), None, agents)
    assert [e.WhichOneof("payload") for e in ready(sub)] == ["agent_upserted", "synced"]
    assert hub.publish(TurnStarted("a1", "t1")) == 1
    assert hub.commit_many([hub.prepare(TurnStarted("a1", f"t{n}")) for n in (2, 3)]) == 3
    await settle()
    assert ready(sub) == [] and hub.head_revision == 0
    log.commit_next()
    await settle()
    assert turns(ready(sub)) == [(1, "t1")] and hub.head_revision == 1
    log.commit_next()
    await settle()
    assert turns(ready(sub)) == [(2, "t2"), (3, "t3")]


async def test_a_failed_commit_publishes_nothing_then_retries_the_same_revisions() -> None:
    log, clock = GatedLog(), FakeClock()
    hub = EventHub(encode_event, log=log, clock=clock)
    sub = hub.subscribe(frozenset(), None, agents)
    ready(sub)
    hub.publish(TurnStarted("a1", "t1"))
    hub.publish(TurnStarted("a1", "t2"))
    log.fail()
    await settle()
    assert hub.publish(TurnStarted("a1", "t3")) == 3  # numbered, kept, not yet appended
    await settle()
    assert ready(sub) == [] and log.head_revision == 0
    await clock.advance(round(RETRY_FIRST_S * 1000) - 1)
    assert log.next_revision == 1  # nothing re-appended before the back-off
    await clock.advance(1)
    assert log.next_revision == 4  # 1..3 appended again, in one batch
    log.commit_next()
    await settle()
    assert turns(ready(sub)) == [(1, "t1"), (2, "t2"), (3, "t3")]
    assert hub.log_writer is not None and hub.log_writer.failures == 1
    hub.publish(TurnStarted("a1", "t4"))  # and the log writer goes on as normal
    log.commit_next()
    await settle()
    assert turns(ready(sub)) == [(4, "t4")]


def framed(revision: int, turn_id: str) -> bytes:
    """A log entry's event as the hub keeps it: framed, with its revision."""
    return frame_with_revision(revision, encode_event(0, TurnStarted("a1", turn_id)))


async def committed_log(count: int) -> InMemoryEventLog:
    log = InMemoryEventLog(mint=lambda: "kept", retain_events=count)
    for n in range(1, count + 1):
        await log.append(n, "a1", framed(n, f"t{n}"))
    return log


async def test_the_hub_continues_the_logs_revisions_and_incarnation() -> None:
    log = await committed_log(5)
    hub = EventHub(encode_event, log=log)
    assert (hub.incarnation, hub.head_revision, hub.earliest_resumable_revision) == ("kept", 5, 0)
    fresh = ready(hub.subscribe(frozenset(), None, agents))
    assert fresh[-1].synced.revision == 5 and fresh[-1].synced.incarnation == "kept"
    assert hub.publish(TurnStarted("a1", "t6")) == 6


async def test_a_resume_older_than_the_ring_replays_from_the_log() -> None:
    log = await committed_log(5)
    hub = EventHub(encode_event, log=log)  # the ring starts empty at 5
    sub = hub.subscribe(frozenset(), 2, agents, resume_incarnation="kept")
    assert poll(sub) is None  # the step reads the log: not ready without waiting
    stream = await read(sub, 4)
    assert turns(stream) == [(3, "t3"), (4, "t4"), (5, "t5")]
    assert stream[-1].synced.revision == 5 and not stream[-1].synced.reset
    hub.publish(TurnStarted("a1", "t6"))
    await settle()
    assert turns(await read(sub, 1)) == [(6, "t6")]  # then live


async def test_a_resume_older_than_the_log_retains_is_reset() -> None:
    log = await committed_log(5)
    await log.append(6, "a1", framed(6, "t6"))  # retains 2..6
    hub = EventHub(encode_event, log=log)
    assert hub.earliest_resumable_revision == 1
    stream = ready(hub.subscribe(frozenset(), 0, agents, resume_incarnation="kept"))
    assert stream[0].subscription_reset.earliest_revision == 1
    assert stream[-1].synced.reset and stream[-1].synced.revision == 6


@pytest.mark.parametrize("scope", [frozenset(), frozenset({"a1"})])
async def test_a_laggard_out_of_the_ring_catches_up_from_the_log(scope: frozenset[str]) -> None:
    log = InMemoryEventLog(mint=lambda: "kept")
    hub = EventHub(encode_event, log=log, retain_events=2, buffer_events=2, batch_events=3)
    sub = hub.subscribe(scope, None, agents)
    ready(sub)
    for n in range(1, 21):
        hub.publish(TurnStarted("a1" if n % 4 else "a2", f"t{n}"))
        await settle()
    # Its buffer overflowed at once and the ring holds only 19..20: the log has the rest.
    stream = await read(sub, 20 if not scope else 15)
    expected = [(n, f"t{n}") for n in range(1, 21) if not scope or n % 4]
    assert turns(stream) == expected
    assert not any(e.HasField("subscription_reset") for e in stream)


async def test_a_waiting_reader_handed_a_batch_larger_than_its_buffer_catches_up() -> None:
    # One commit can publish more events than a subscriber's whole buffer holds: it is
    # demoted with an empty buffer and no release owed, and must still be woken.
    log = GatedLog()
    hub = EventHub(encode_event, log=log, buffer_events=2)
    sub = hub.subscribe(frozenset(), None, agents)
    ready(sub)
    reader = asyncio.ensure_future(read(sub, 3))
    await settle()  # the reader waits for a publish
    hub.commit_many([hub.prepare(TurnStarted("a1", f"t{n}")) for n in (1, 2, 3)])
    log.commit_next()
    assert turns(await reader) == [(1, "t1"), (2, "t2"), (3, "t3")]


@pytest.mark.parametrize("committed_before_the_drain", [True, False])
async def test_a_drain_ends_at_what_was_given_and_a_resume_after_a_restart_gets_the_rest(
    committed_before_the_drain: bool,
) -> None:
    # A create: its agent is in the snapshot at once, while its event waits in the log's
    # group commit (under load, past the whole drain: the database's close commits it).
    log = GatedLog()
    hub = EventHub(encode_event, log=log)
    hub.publish(TurnStarted("a1", "t1"))
    sub = hub.subscribe(frozenset({"a1"}), None, agents)
    if committed_before_the_drain:
        log.commit_next()
        await settle()
    hub.end_all("server draining")
    if not committed_before_the_drain:
        log.commit_next()
        await settle()
    stream = ready(sub)
    assert [e.WhichOneof("payload") for e in stream][:2] == ["agent_upserted", "synced"]
    assert stream[1].synced.revision == 0
    given = turns(stream)
    assert given == ([(1, "t1")] if committed_before_the_drain else [])
    ending = stream[-1].stream_ending
    assert ending.resume_revision == max([0, *(revision for revision, _ in given)])
    # The next daemon on the same log: the resume replays exactly what was not given.
    again = EventHub(encode_event, log=log)
    resumed = again.subscribe(
        frozenset({"a1"}), ending.resume_revision, agents, resume_incarnation=ending.incarnation
    )
    rest = await read(resumed, 1 if committed_before_the_drain else 2)
    assert [*given, *turns(rest)] == [(1, "t1")]
    assert rest[-1].synced.revision == 1 and not rest[-1].synced.reset
