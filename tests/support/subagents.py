"""Helpers for sub-agent tests through the wire: a watcher of SubagentRunUpdated events (every
change of a run is published once stored, so tests wait on events, never on sleeps) and
readers of the notices in a timeline."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from corral.v1 import event_service_pb2 as event_pb
from corral.v1 import subagent_pb2 as sub_pb
from corral.v1 import subagent_service_pb2 as sub_svc_pb
from corral.v1 import subagent_service_pb2_grpc as sub_grpc
from corral.v1 import timeline_service_pb2 as tl_pb
from tests.support.client import Stubs

# A safety bound on waits for events (a hang fails the test instead of blocking the suite).
WAIT_S = 60.0

DELIVERED = sub_pb.ANNOUNCE_STATE_DELIVERED
DEFERRED = sub_pb.ANNOUNCE_STATE_DEFERRED
SUPPRESSED = sub_pb.ANNOUNCE_STATE_SUPPRESSED
KILLED = sub_pb.SUBAGENT_OUTCOME_KILLED


class RunWatcher:
    """Subscribes to every agent and keeps the latest of each run it hears about."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        self.runs: dict[str, sub_pb.SubagentRun] = {}
        self._changed = asyncio.Event()
        self._call: Any = Stubs.of(channel).events.Subscribe(event_pb.SubscribeRequest())
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> RunWatcher:
        synced = asyncio.get_running_loop().create_future()
        self._task = asyncio.create_task(self._read(synced))
        await asyncio.wait_for(synced, WAIT_S)
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._call.cancel()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _read(self, synced: asyncio.Future[None]) -> None:
        async for response in self._call:
            for event in response.events:
                if event.WhichOneof("payload") == "synced" and not synced.done():
                    synced.set_result(None)
                if event.WhichOneof("payload") == "subagent_run_updated":
                    run = event.subagent_run_updated.run
                    self.runs[run.run_id] = run
            self._changed.set()
            self._changed = asyncio.Event()

    def of(self, requester: str) -> list[sub_pb.SubagentRun]:
        return [r for r in self.runs.values() if r.requester_agent_id == requester]

    async def until(self, holds: Callable[[], bool]) -> None:
        async def wait() -> None:
            while not holds():
                await self._changed.wait()

        await asyncio.wait_for(wait(), WAIT_S)

    async def until_async(self, holds: Callable[[], Awaitable[bool]]) -> None:
        """Until `holds()` (which reads the wire), asked again after every event batch."""

        async def wait() -> None:
            while True:
                changed = self._changed  # taken first: a batch during `holds` wakes us
                if await holds():
                    return
                await changed.wait()

        await asyncio.wait_for(wait(), WAIT_S)


def subagents(channel: grpc.aio.Channel) -> sub_grpc.SubagentServiceAsyncStub:
    return sub_grpc.SubagentServiceStub(channel)


async def spawn(
    channel: grpc.aio.Channel, requester: str, task: str, **kw: Any
) -> sub_pb.SubagentRun:
    request = sub_svc_pb.SpawnSubagentRequest(requester_agent_id=requester, task=task, **kw)
    return (await subagents(channel).SpawnSubagent(request)).run


async def notices(stubs: Stubs, agent_id: str) -> list[Any]:
    """The SubagentNotice items of the agent's timeline, in order."""
    page = await stubs.timeline.FetchTimeline(
        tl_pb.FetchTimelineRequest(agent_id=agent_id, limit=0)
    )
    return [
        row.item.subagent_notice
        for row in page.rows
        if row.item.WhichOneof("kind") == "subagent_notice"
    ]
