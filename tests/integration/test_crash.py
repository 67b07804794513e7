"""Crash test: no acknowledged write is lost across a SIGKILL (docs/design.md#durability).

`corral serve` runs as a real process; two agents run streaming turns back to back and two
concurrent senders queue prompts (SendPrompt, QUEUE) on a third, while a subscriber records
every event it receives; the daemon gets SIGKILL at a random point (after a
random number of acknowledged prompts); it restarts on the same state directory. Then: every
acknowledged prompt is stored exactly once (a queued one runs after the restart, in its
sender's order); every row the subscriber received is there with
the same epoch, seq and content; seqs are contiguous; the event log kept its incarnation, and a
Subscribe resuming from revision 0 replays, with no reset, contiguous revisions in which every
event the subscriber received is there byte for byte under the same revision.

A few iterations run in the suite; `buildscripts/soak` runs CORRAL_CRASH_ITERATIONS (50).
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
from pathlib import Path
from typing import Any

import grpc
import pytest

from corral.v1 import agent_service_pb2 as svc_pb
from corral.v1 import event_service_pb2 as event_pb
from corral.v1 import timeline_service_pb2 as tl_pb
from corral.v1 import turn_service_pb2 as turn_pb
from tests.support.client import Stubs, create_request, next_message, prompt_request, text
from tests.support.daemon import DaemonProcess

ITERATIONS = int(os.environ.get("CORRAL_CRASH_ITERATIONS", "3"))
AGENTS = 2
SENDERS = 2


class Seen:
    """What clients were told: acknowledged prompts, and rows a subscriber received."""

    def __init__(self) -> None:
        self.acked: dict[str, list[str]] = {}  # agent -> prompt texts, in ack order
        self.queued: dict[int, list[str]] = {}  # sender -> prompts acked on the queue agent
        self.queue_agent = ""
        self.rows: dict[tuple[str, str, int], Any] = {}  # (agent, epoch, seq) -> item
        self.events: dict[int, bytes] = {}  # revision -> the serialized event
        self.incarnation = ""


async def subscribe(stubs: Stubs, seen: Seen) -> None:
    call = stubs.events.Subscribe(event_pb.SubscribeRequest())
    try:
        async for response in call:
            for event in response.events:
                if event.HasField("synced"):
                    seen.incarnation = event.synced.incarnation
                if event.revision:
                    assert event.revision not in seen.events, "an event delivered twice"
                    seen.events[event.revision] = event.SerializeToString()
                if event.HasField("timeline_row_appended"):
                    appended = event.timeline_row_appended
                    key = (appended.agent_id, appended.epoch, appended.row.seq)
                    seen.rows[key] = appended.row.item
    except grpc.aio.AioRpcError:
        return  # the daemon died


async def turns(stubs: Stubs, agent_id: str, seen: Seen, acks: asyncio.Queue[None]) -> None:
    n = 0
    try:
        while True:
            n += 1
            prompt = f"/reply {agent_id[:6]} turn {n}"
            call = stubs.turns.StreamTurn(
                turn_pb.StreamTurnRequest(agent_id=agent_id, content=text(prompt))
            )
            first = await next_message(call)
            assert first.WhichOneof("event") == "turn_started"
            seen.acked.setdefault(agent_id, []).append(prompt)  # the durable ack
            acks.put_nowait(None)
            while await call.read() is not grpc.aio.EOF:
                pass
    except grpc.aio.AioRpcError:
        return  # the daemon died


async def senders(stubs: Stubs, sender: int, seen: Seen, acks: asyncio.Queue[None]) -> None:
    """SendPrompt with QUEUE on the queue agent, one after the other: each ack is durable."""
    n = 0
    try:
        while True:
            n += 1
            prompt = f"/reply sender {sender} prompt {n}"
            request = prompt_request(seen.queue_agent, prompt, if_running=turn_pb.IF_RUNNING_QUEUE)
            await stubs.turns.SendPrompt(request)
            seen.queued.setdefault(sender, []).append(prompt)
            acks.put_nowait(None)
    except grpc.aio.AioRpcError:
        return  # the daemon died


async def run_until_killed(daemon: DaemonProcess, cwd: Path, kill_after: int) -> Seen:
    seen = Seen()
    acks: asyncio.Queue[None] = asyncio.Queue()
    async with grpc.aio.insecure_channel(daemon.address) as channel:
        stubs = Stubs.of(channel)
        agent_ids = [
            (await stubs.agents.CreateAgent(create_request(str(cwd)))).agent.id
            for _ in range(AGENTS)
        ]
        seen.queue_agent = (await stubs.agents.CreateAgent(create_request(str(cwd)))).agent.id
        watcher = asyncio.ensure_future(subscribe(stubs, seen))
        workers = [asyncio.ensure_future(turns(stubs, a, seen, acks)) for a in agent_ids]
        workers += [asyncio.ensure_future(senders(stubs, n, seen, acks)) for n in range(SENDERS)]
        for _ in range(kill_after):
            await asyncio.wait_for(acks.get(), 30)  # a guard against a hung daemon
        assert daemon.proc is not None
        daemon.proc.send_signal(signal.SIGKILL)
        await asyncio.wait_for(asyncio.gather(watcher, *workers), 30)
    daemon.wait(30)
    return seen


async def check_after_restart(daemon: DaemonProcess, seen: Seen) -> None:
    async with grpc.aio.insecure_channel(daemon.address) as channel:
        stubs = Stubs.of(channel)
        # The queued prompts acknowledged before the kill run now.
        wait = turn_pb.WaitForIdleRequest(agent_id=seen.queue_agent)
        await stubs.turns.WaitForIdle(wait, timeout=60)
        listed = (await stubs.agents.ListAgents(svc_pb.ListAgentsRequest())).agents
        assert {a.id for a in listed} >= set(seen.acked)
        for agent in listed:
            request = tl_pb.FetchTimelineRequest(agent_id=agent.id, limit=0)
            page = await stubs.timeline.FetchTimeline(request)
            rows = list(page.rows)
            assert [r.seq for r in rows] == list(range(1, len(rows) + 1)), "seqs not contiguous"
            stored = {(agent.id, page.epoch, r.seq): r.item for r in rows}
            for key, item in seen.rows.items():
                if key[0] == agent.id:
                    assert stored.get(key) == item, f"a row a subscriber saw is lost: {key}"
            prompts = [r.item.user_message.text for r in rows if r.item.HasField("user_message")]
            if agent.id == seen.queue_agent:
                for sent in seen.queued.values():  # each sender's acked prompts, in its order
                    ran = [p for p in prompts if p in sent]
                    assert ran[: len(sent)] == sent, "an acknowledged queued prompt is lost"
            acked = seen.acked.get(agent.id, [])
            assert prompts[: len(acked)] == acked, "an acknowledged prompt is lost or doubled"
            assert len(prompts) == len(set(prompts)), "a prompt is stored twice"
            assert agent.lifecycle.WhichOneof("state") in ("idle", "errored")
        await check_event_log(stubs, seen)


async def check_event_log(stubs: Stubs, seen: Seen) -> None:
    """Resume from revision 0 in the incarnation the subscriber saw: everything replays."""
    request = event_pb.SubscribeRequest(resume_revision=0, resume_incarnation=seen.incarnation)
    replayed: dict[int, bytes] = {}
    async for response in stubs.events.Subscribe(request, timeout=30):
        events = list(response.events)
        for event in events:
            assert not event.HasField("subscription_reset"), event
            if event.revision:
                replayed[event.revision] = event.SerializeToString()
        synced = [e.synced for e in events if e.HasField("synced")]
        if synced:
            assert synced[0].incarnation == seen.incarnation and not synced[0].reset
            head = synced[0].revision
            break
    assert sorted(replayed) == list(range(1, head + 1)), "revisions not contiguous"
    for revision, body in seen.events.items():
        assert replayed.get(revision) == body, f"event {revision} lost or changed"


@pytest.mark.parametrize("iteration", range(ITERATIONS))
async def test_sigkill_loses_no_acknowledged_prompt_and_no_row_a_client_saw(
    tmp_path: Path, iteration: int
) -> None:
    kill_after = random.Random(iteration).randint(1, 12)
    state = tmp_path / "state"
    first = DaemonProcess(state).start()
    try:
        seen = await run_until_killed(first, tmp_path, kill_after)
    finally:
        first.stop()
    acked = [*seen.acked.values(), *seen.queued.values()]
    assert sum(len(p) for p in acked) >= kill_after
    second = DaemonProcess(state).start()
    try:
        await check_after_restart(second, seen)
    finally:
        second.stop()
