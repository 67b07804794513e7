"""EventService.Subscribe through the wire, against the real daemon: snapshot, synced, live
events in revision order, identical streams, resume, and a subscriber that stops reading."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from corral.v1 import event_service_pb2 as event_pb
from corral.v1 import turn_service_pb2 as turn_pb
from corral_server.app import Config
from tests.support.client import Stubs, create_request, next_message, text
from tests.support.daemon import DaemonThread


@pytest.fixture(scope="module")
def small_daemon() -> Iterator[DaemonThread]:
    """Retains only 200 events and buffers 16 per subscriber, to reach resets and lag."""
    daemon = DaemonThread(Config(retain_events=200, subscriber_buffer_events=16)).start()
    yield daemon
    daemon.stop()


class Reader:
    """Reads a Subscribe stream event by event."""

    def __init__(self, stubs: Stubs, **request: Any) -> None:
        self.call = stubs.events.Subscribe(event_pb.SubscribeRequest(**request))
        self.events: list[event_pb.Event] = []
        self.messages = 0

    async def until(self, predicate: Any) -> event_pb.Event:
        for event in self.events:
            if predicate(event):
                return event
        while True:
            response = await next_message(self.call)
            self.messages += 1
            self.events.extend(response.events)
            for event in response.events:
                if predicate(event):
                    return event

    async def synced(self) -> event_pb.Event:
        return await self.until(lambda e: e.WhichOneof("payload") == "synced")

    def live(self) -> list[event_pb.Event]:
        index = next(i for i, e in enumerate(self.events) if e.WhichOneof("payload") == "synced")
        return self.events[index + 1 :]


def is_terminal(turn_id: str) -> Any:
    return lambda e: (
        e.WhichOneof("payload") in ("turn_completed", "turn_failed")
        and (getattr(e, e.WhichOneof("payload")).turn_id == turn_id)
    )


async def run_turn(stubs: Stubs, agent_id: str, *lines: str) -> str:
    """Run a turn to its end. Not through StreamTurn: on this daemon's tiny ring a StreamTurn
    of 300 rows would fall behind retained history like any other subscriber."""
    started = await stubs.turns.SendPrompt(
        turn_pb.SendPromptRequest(agent_id=agent_id, content=text(*lines))
    )
    await stubs.turns.WaitForIdle(turn_pb.WaitForIdleRequest(agent_id=agent_id))
    return started.turn_id


async def test_fresh_subscription_gets_snapshot_then_synced_then_live_events(
    aio_channel: grpc.aio.Channel, tmp_path: Any
) -> None:
    stubs = Stubs.of(aio_channel)
    existing = (await stubs.agents.CreateAgent(create_request(str(tmp_path), title="old"))).agent
    reader = Reader(stubs)
    synced = await reader.synced()
    snapshot = reader.events[:-1]
    assert all(e.WhichOneof("payload") == "agent_upserted" and e.revision == 0 for e in snapshot)
    assert existing.id in {e.agent_upserted.agent.id for e in snapshot}
    turn_id = await run_turn(stubs, existing.id, "hello")
    await reader.until(is_terminal(turn_id))
    live = [e for e in reader.live() if e.WhichOneof("payload") != "agent_upserted" or True]
    mine = [e for e in live if _agent_of(e) == existing.id]
    revisions = [e.revision for e in live]
    assert revisions == sorted(set(revisions)) and revisions[0] > synced.synced.revision
    kinds = [e.WhichOneof("payload") for e in mine]
    assert (
        kinds.index("turn_started")
        < kinds.index("timeline_row_appended")
        < kinds.index("turn_completed")
    )
    rows = [
        e.timeline_row_appended for e in mine if e.WhichOneof("payload") == "timeline_row_appended"
    ]
    assert [r.row.seq for r in rows] == [1, 2]
    assert rows[0].row.item.user_message.text == "hello"
    assert rows[1].row.item.assistant_message.text == "You said: hello"
    reader.call.cancel()


def _agent_of(event: event_pb.Event) -> str:
    payload = getattr(event, str(event.WhichOneof("payload")))
    if event.WhichOneof("payload") == "agent_upserted":
        return str(payload.agent.id)
    return str(getattr(payload, "agent_id", ""))


async def test_two_subscribers_with_the_same_scope_receive_identical_events(
    aio_channel: grpc.aio.Channel, tmp_path: Any
) -> None:
    stubs = Stubs.of(aio_channel)
    agent_id = (await stubs.agents.CreateAgent(create_request(str(tmp_path)))).agent.id
    first, second = Reader(stubs, agent_ids=[agent_id]), Reader(stubs, agent_ids=[agent_id])
    assert (await first.synced()).synced.revision == (await second.synced()).synced.revision
    turn_ids = [
        await run_turn(stubs, agent_id, f"/think step {i}", f"/reply {i}") for i in range(5)
    ]
    for reader in (first, second):
        await reader.until(is_terminal(turn_ids[-1]))
    assert [e.SerializeToString() for e in first.live()] == [
        e.SerializeToString() for e in second.live()
    ]
    assert all(_agent_of(e) == agent_id for e in first.live())
    first.call.cancel()
    second.call.cancel()


async def test_resume_inside_the_window_replays_exactly_the_missed_events(
    aio_channel: grpc.aio.Channel, tmp_path: Any
) -> None:
    stubs = Stubs.of(aio_channel)
    agent_id = (await stubs.agents.CreateAgent(create_request(str(tmp_path)))).agent.id
    witness = Reader(stubs, agent_ids=[agent_id])
    await witness.synced()
    early = await run_turn(stubs, agent_id, "one")
    await witness.until(is_terminal(early))
    resume_at = witness.live()[-1].revision
    late = await run_turn(stubs, agent_id, "two")
    missed = await witness.until(is_terminal(late))
    resumed = Reader(stubs, agent_ids=[agent_id], resume_revision=resume_at)
    await resumed.until(is_terminal(late))
    expected = [e for e in witness.live() if resume_at < e.revision <= missed.revision]
    replayed = [e for e in resumed.events if 0 < e.revision <= missed.revision]
    assert [e.SerializeToString() for e in replayed] == [e.SerializeToString() for e in expected]
    assert not any(e.WhichOneof("payload") == "subscription_reset" for e in resumed.events)
    witness.call.cancel()
    resumed.call.cancel()


async def test_resume_outside_the_window_gets_an_explicit_reset_and_snapshot(
    small_daemon: DaemonThread, tmp_path: Any
) -> None:
    async with grpc.aio.insecure_channel(small_daemon.address) as channel:
        stubs = Stubs.of(channel)
        agent_id = (await stubs.agents.CreateAgent(create_request(str(tmp_path)))).agent.id
        script = [f"/think {i}" for i in range(300)]  # more events than the 200 retained
        await run_turn(stubs, agent_id, *script)
        reader = Reader(stubs, resume_revision=1)
        synced = await reader.synced()
        kinds = [e.WhichOneof("payload") for e in reader.events]
        assert kinds[0] == "subscription_reset"
        assert reader.events[0].subscription_reset.requested_revision == 1
        assert reader.events[0].subscription_reset.earliest_revision > 1
        assert "agent_upserted" in kinds and synced.synced.reset
        reader.call.cancel()


async def test_a_subscriber_that_stops_reading_neither_blocks_others_nor_loses_events(
    small_daemon: DaemonThread, tmp_path: Any
) -> None:
    async with grpc.aio.insecure_channel(small_daemon.address) as channel:
        stubs = Stubs.of(channel)
        agent_id = (await stubs.agents.CreateAgent(create_request(str(tmp_path)))).agent.id
        slow, fast = Reader(stubs, agent_ids=[agent_id]), Reader(stubs, agent_ids=[agent_id])
        await slow.synced()
        await fast.synced()
        # The slow reader reads nothing while 150 rows (more than its buffer of 16, fewer
        # than the 200 retained) are written; the turn and the fast reader finish regardless.
        turn_id = await run_turn(stubs, agent_id, *[f"/think {i}" for i in range(150)])
        await fast.until(is_terminal(turn_id))
        await slow.until(is_terminal(turn_id))
        assert [e.SerializeToString() for e in slow.live()] == [
            e.SerializeToString() for e in fast.live()
        ]
        seqs = [
            e.timeline_row_appended.row.seq
            for e in slow.live()
            if e.HasField("timeline_row_appended")
        ]
        assert seqs == list(range(1, len(seqs) + 1)) and len(seqs) == 152
        slow.call.cancel()
        fast.call.cancel()


async def _history(daemon: DaemonThread, cwd: str, turns: int) -> tuple[int, str]:
    """Create an agent and run `turns` turns; returns (last revision seen, incarnation)."""
    async with grpc.aio.insecure_channel(daemon.address) as channel:
        stubs = Stubs.of(channel)
        agent_id = (await stubs.agents.CreateAgent(create_request(cwd))).agent.id
        reader = Reader(stubs)
        synced = await reader.synced()
        for index in range(turns):
            await reader.until(is_terminal(await run_turn(stubs, agent_id, f"turn {index}")))
        reader.call.cancel()
        return reader.events[-1].revision, synced.synced.incarnation


async def test_a_resume_point_from_before_a_restart_is_reset_never_replayed(tmp_path: Any) -> None:
    before = DaemonThread(Config()).start()
    try:
        resume_at, old_incarnation = await _history(before, str(tmp_path), 1)
    finally:
        before.stop()
    after = DaemonThread(Config()).start()  # a restart: a new, in-memory event log
    try:
        head, new_incarnation = await _history(after, str(tmp_path), 3)
        assert new_incarnation != old_incarnation and head > resume_at
        async with grpc.aio.insecure_channel(after.address) as channel:
            stubs = Stubs.of(channel)
            stale = Reader(stubs, resume_revision=resume_at, resume_incarnation=old_incarnation)
            synced = await stale.synced()
            assert stale.events[0].subscription_reset.requested_revision == resume_at
            assert all(e.revision == 0 for e in stale.events), "replayed the new log's events"
            assert synced.synced.reset and synced.synced.incarnation == new_incarnation
            # Within one incarnation, with or without naming it, a resume replays exactly.
            for named in (new_incarnation, ""):
                same = Reader(stubs, resume_revision=head - 1, resume_incarnation=named)
                synced = await same.synced()
                assert [e.revision for e in same.events] == [head, 0]
                assert not synced.synced.reset and synced.synced.incarnation == new_incarnation
                same.call.cancel()
            stale.call.cancel()
    finally:
        after.stop()
