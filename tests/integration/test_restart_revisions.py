"""Revisions survive a restart (docs/design.md#resume): with a state directory the event log keeps
its incarnation and revisions, and `Subscribe{resume_revision}` after a restart replays exactly the
missed events, byte for byte under the same revisions, then goes live with the next ones. A
resume point the log no longer retains is answered with an explicit reset. Daemons run in this
process, one after the other on the same directory."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc

from corral.v1 import event_service_pb2 as event_pb
from corral.v1 import turn_service_pb2 as turn_pb
from corral_server.app import Config
from tests.support.client import Stubs, create_request, next_message, prompt_request, text
from tests.support.daemon import DaemonThread


async def until(
    call: grpc.aio.UnaryStreamCall[event_pb.SubscribeRequest, event_pb.SubscribeResponse],
    done: str,
) -> list[event_pb.Event]:
    """Events of the stream up to and including the first with payload `done`."""
    out: list[event_pb.Event] = []
    while True:
        response = await asyncio.wait_for(next_message(call), 10)
        out += response.events
        if any(e.WhichOneof("payload") == done for e in response.events):
            return out


async def a_turn(stubs: Stubs, agent_id: str, prompt: str) -> None:
    request = turn_pb.StreamTurnRequest(agent_id=agent_id, content=text(prompt))
    call = stubs.turns.StreamTurn(request)
    events = [e async for e in call]
    assert events[-1].WhichOneof("event") == "turn_completed"


async def test_a_resume_after_a_restart_replays_exactly_the_missed_events(tmp_path: Path) -> None:
    state = tmp_path / "state"
    first = DaemonThread(Config(state_dir=state)).start()
    try:
        async with grpc.aio.insecure_channel(first.address) as channel:
            stubs = Stubs.of(channel)
            watcher = stubs.events.Subscribe(event_pb.SubscribeRequest())
            incarnation = (await until(watcher, "synced"))[-1].synced.incarnation
            agent_id = (await stubs.agents.CreateAgent(create_request(str(tmp_path)))).agent.id
            await a_turn(stubs, agent_id, "/reply before the restart")
            seen = [e for e in await until(watcher, "turn_completed") if e.revision]
            watcher.cancel()
    finally:
        first.stop()
    assert [e.revision for e in seen] == list(range(1, len(seen) + 1))
    resume_at = seen[len(seen) // 2 - 1].revision  # the client saw half of them
    second = DaemonThread(Config(state_dir=state)).start()
    try:
        async with grpc.aio.insecure_channel(second.address) as channel:
            stubs = Stubs.of(channel)
            request = event_pb.SubscribeRequest(
                resume_revision=resume_at, resume_incarnation=incarnation
            )
            resumed = stubs.events.Subscribe(request)
            replayed = await until(resumed, "synced")
            synced = replayed.pop().synced
            assert (synced.incarnation, synced.reset) == (incarnation, False)
            assert not any(e.HasField("subscription_reset") for e in replayed)
            assert [e.revision for e in replayed] == list(range(resume_at + 1, synced.revision + 1))
            missed = [e.SerializeToString() for e in seen if e.revision > resume_at]
            assert [e.SerializeToString() for e in replayed[: len(missed)]] == missed
            # Live from here, the revisions going on from the log's head.
            await a_turn(stubs, agent_id, "/reply after the restart")
            live = [e for e in await until(resumed, "turn_completed") if e.revision]
            assert live[0].revision == synced.revision + 1
            revisions = [e.revision for e in live]
            assert revisions == list(range(revisions[0], revisions[-1] + 1))
            resumed.cancel()
    finally:
        second.stop()


async def test_a_resume_older_than_the_retained_log_is_reset(tmp_path: Path) -> None:
    state = tmp_path / "state"
    config = Config(state_dir=state, retain_events=2, log_retain_events=3)
    first = DaemonThread(config).start()
    try:
        async with grpc.aio.insecure_channel(first.address) as channel:
            stubs = Stubs.of(channel)
            agent_id = (await stubs.agents.CreateAgent(create_request(str(tmp_path)))).agent.id
            for prompt in ("/reply more events than the log keeps", "/reply and more"):
                # Not StreamTurn: with a 2-event ring and a 3-event log it would lag.
                await stubs.turns.SendPrompt(prompt_request(agent_id, prompt))
                await stubs.turns.WaitForIdle(turn_pb.WaitForIdleRequest(agent_id=agent_id))
            watcher = stubs.events.Subscribe(event_pb.SubscribeRequest())
            synced = (await until(watcher, "synced"))[-1].synced
            watcher.cancel()
    finally:
        first.stop()
    assert synced.revision > 3
    second = DaemonThread(config).start()
    try:
        async with grpc.aio.insecure_channel(second.address) as channel:
            stubs = Stubs.of(channel)
            request = event_pb.SubscribeRequest(
                resume_revision=1, resume_incarnation=synced.incarnation
            )
            call = stubs.events.Subscribe(request)
            stream = await until(call, "synced")
            call.cancel()
            reset, head = stream[0].subscription_reset, stream[-1].synced.revision
            assert head >= synced.revision  # the log went on from where it was
            assert (reset.requested_revision, reset.earliest_revision) == (1, head - 3)
            assert stream[-1].synced.reset and stream[-1].synced.incarnation == synced.incarnation
    finally:
        second.stop()
