"""What the resume tests of the real agents share: a daemon on a state directory that a test
stops and starts again (the restart), and reading an agent's whole timeline through the wire."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import grpc

from corral.v1 import agent_service_pb2 as agent_svc_pb
from corral.v1 import timeline_service_pb2 as tl_pb
from corral.v1 import turn_service_pb2 as turn_pb
from corral_server.app import Config
from corral_server.providers.base import Provider
from tests.support.client import Stubs, create_request, text
from tests.support.daemon import DaemonThread


@asynccontextmanager
async def daemon_on(state_dir: Path, name: str, provider: Provider) -> AsyncIterator[Stubs]:
    """A daemon on `state_dir` with `provider` as `name`, drained (its agents' sessions
    closed) when the block ends: stopping one and starting another is a daemon restart."""
    config = Config(state_dir=state_dir, extra_providers={name: provider})
    daemon = await asyncio.to_thread(DaemonThread(config).start)
    try:
        async with grpc.aio.insecure_channel(daemon.address) as channel:
            yield Stubs.of(channel)
    finally:
        await asyncio.to_thread(daemon.stop)


async def create_agent(stubs: Stubs, cwd: Path, provider: str, **kw: Any) -> str:
    reply = await stubs.agents.CreateAgent(create_request(str(cwd), provider=provider, **kw))
    return reply.agent.id


async def turn(stubs: Stubs, agent_id: str, prompt: str) -> list[turn_pb.StreamTurnResponse]:
    call = stubs.turns.StreamTurn(
        turn_pb.StreamTurnRequest(agent_id=agent_id, content=text(prompt))
    )
    return [event async for event in call]


def ending(events: list[turn_pb.StreamTurnResponse]) -> str:
    return str(events[-1].WhichOneof("event"))


async def get_agent(stubs: Stubs, agent_id: str) -> Any:
    return (await stubs.agents.GetAgent(agent_svc_pb.GetAgentRequest(agent_id=agent_id))).agent


async def timeline(stubs: Stubs, agent_id: str) -> list[tuple[str, str]]:
    """Every row as (kind, text): a user or assistant message's text, an error's code."""
    reply = await stubs.timeline.FetchTimeline(
        tl_pb.FetchTimelineRequest(
            agent_id=agent_id, direction=tl_pb.TIMELINE_DIRECTION_TAIL, limit=1000
        )
    )
    rows: list[tuple[str, str]] = []
    for row in reply.rows:
        kind = str(row.item.WhichOneof("kind"))
        match kind:
            case "user_message":
                rows.append((kind, row.item.user_message.text))
            case "assistant_message":
                rows.append((kind, row.item.assistant_message.text))
            case "error":
                rows.append((kind, row.item.error.code))
            case _:
                rows.append((kind, ""))
    return rows
