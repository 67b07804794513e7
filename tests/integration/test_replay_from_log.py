"""Replay from the durable log is replay from the ring, at the wire (docs/design.md#resume):
a daemon replays a history of thousands of events from its ring (it holds them all), then,
restarted on the same state directory (its ring empty), from the log alone. Every event a
subscriber resuming from revision 0 receives is byte for byte the same, for a subscriber of
every agent and for one scoped to an agent whose events are interleaved with another's, with
rows small and large (a row too big to be joined with others is read on its own)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc

from corral.v1 import event_service_pb2 as event_pb
from corral.v1 import turn_service_pb2 as turn_pb
from corral_server.app import Config
from tests.support.client import Stubs, create_request, next_message, prompt_request
from tests.support.daemon import DaemonThread

# Over 1 MiB / 64, the most one event may weigh in a joined span of the log.
LARGE = "x" * 40_000


async def replayed(address: str, agent_ids: list[str]) -> list[bytes]:
    """Every event up to Synced of a subscription resuming from 0, each serialized."""
    async with grpc.aio.insecure_channel(address) as channel:
        request = event_pb.SubscribeRequest(agent_ids=agent_ids, resume_revision=0)
        call = Stubs.of(channel).events.Subscribe(request)
        out: list[bytes] = []
        while True:
            response = await asyncio.wait_for(next_message(call), 30)
            out += [event.SerializeToString() for event in response.events]
            if response.events[-1].HasField("synced"):
                call.cancel()
                assert not response.events[-1].synced.reset
                return out


async def history(stubs: Stubs, cwd: str) -> list[str]:
    """Two agents' turns at once (their events interleave), then large replies."""
    agents = [(await stubs.agents.CreateAgent(create_request(cwd))).agent.id for _ in range(2)]
    prompts = [
        (agents[0], "/history 3000"),
        (agents[1], "/history 2000"),
        (agents[0], f"/reply {LARGE}\n/reply+ {LARGE}"),
        (agents[1], "/history 500"),
    ]
    for index in (0, 2):
        for agent_id, prompt in prompts[index : index + 2]:
            await stubs.turns.SendPrompt(prompt_request(agent_id, prompt))
        for agent_id in agents:
            await stubs.turns.WaitForIdle(turn_pb.WaitForIdleRequest(agent_id=agent_id))
    return agents


def events_up_to(stream: list[bytes], head: int) -> list[bytes]:
    out = []
    for data in stream:
        event = event_pb.Event.FromString(data)
        if 0 < event.revision <= head:
            out.append(data)
    return out


async def test_replay_from_the_log_is_replay_from_the_ring_byte_for_byte(tmp_path: Path) -> None:
    config = Config(state_dir=tmp_path / "state")
    first = DaemonThread(config).start()
    try:
        async with grpc.aio.insecure_channel(first.address) as channel:
            agents = await history(Stubs.of(channel), str(tmp_path))
        assert first.daemon is not None
        head = first.daemon.hub.head_revision
        from_ring = [await replayed(first.address, scope) for scope in ([], agents[:1])]
    finally:
        first.stop()
    assert head > 5_500
    second = DaemonThread(config).start()
    try:
        assert second.daemon is not None
        assert second.daemon.hub.earliest_resumable_revision == 0  # from the log only
        from_log = [await replayed(second.address, scope) for scope in ([], agents[:1])]
    finally:
        second.stop()
    for ring, log in zip(from_ring, from_log, strict=True):
        assert len(events_up_to(ring, head)) > 3_000
        assert events_up_to(log, head) == events_up_to(ring, head)
    assert len(events_up_to(from_ring[0], head)) == head
