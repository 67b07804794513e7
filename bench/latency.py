"""P4 and P5 (BENCHMARKS.md#goals), against a daemon in its own process.

  P4  provider event to subscriber, for events that are not coalesced: 100 active agents run
      turns while 10 subscribers (every agent) watch; for each user-message and completed
      tool-call row a subscriber computes now - row.timestamp (the row's timestamp is taken
      when the timeline writer stores it, on the same machine clock). Goal: p99 under 20 ms.
  P5  SendPrompt acknowledged (after the prompt is stored), 100 concurrent senders, each on
      its own agent. Goal: p99 under 15 ms; durable, also at most 2x the disk's fsync p99
      + 2 ms (measured in the same run: bench/anchor.py).

Both under the same open-loop load: each agent sends a prompt every 0.5 s (a tool call and
a reply per turn). A closed loop (each sender firing again the moment its turn ends)
measures saturation instead: every request then queues behind the other 99.

Run: .venv/bin/python -m bench.latency [turns_per_agent]
"""

from __future__ import annotations

import asyncio
import random
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from typing import Any

import grpc

from bench import anchor
from bench.p1 import Corral
from corral.v1 import agent_service_pb2 as agent_pb
from corral.v1 import agent_service_pb2_grpc as agent_grpc
from corral.v1 import content_pb2 as content_pb
from corral.v1 import event_service_pb2 as event_pb
from corral.v1 import event_service_pb2_grpc as event_grpc
from corral.v1 import turn_service_pb2 as turn_pb
from corral.v1 import turn_service_pb2_grpc as turn_grpc

AGENTS = 100
SUBSCRIBERS = 10
# Each agent sends a prompt every INTERVAL_S: 100 agents -> 200 turns/s, about 1,600 events/s
# into the hub and 16,000 events/s out to the subscribers.
INTERVAL_S = 0.5
PROMPT = '/tool read {"path": "a.txt"}\n/reply ok'


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _watch(
    channel: Any, latencies: list[float], ended: dict[str, asyncio.Queue[str]]
) -> None:
    call = event_grpc.EventServiceStub(channel).Subscribe(event_pb.SubscribeRequest())
    async for response in call:
        now_ms = time.time() * 1000
        for event in response.events:
            if event.HasField("timeline_row_appended"):
                row = event.timeline_row_appended.row
                kind = row.item.WhichOneof("kind")
                if kind == "user_message" or (
                    kind == "tool_call" and row.item.tool_call.status == 3
                ):
                    latencies.append(now_ms - row.timestamp.ToMilliseconds())
            elif event.HasField("turn_completed") and ended:
                ended[event.turn_completed.agent_id].put_nowait(event.turn_completed.turn_id)


async def _sender(
    channel: Any, agent_id: str, turns: int, acks: list[float], ended: asyncio.Queue[str]
) -> None:
    """Open loop: one prompt every INTERVAL_S (phase-shifted per agent), each sent once the
    previous turn has ended, so the daemon is loaded, not saturated."""
    stub = turn_grpc.TurnServiceStub(channel)
    request = turn_pb.SendPromptRequest(
        agent_id=agent_id, content=[content_pb.ContentPart(text=PROMPT)]
    )
    loop = asyncio.get_running_loop()
    first = loop.time() + random.uniform(0, INTERVAL_S)
    for i in range(turns):
        await asyncio.sleep(max(0.0, first + i * INTERVAL_S - loop.time()))
        start = time.perf_counter()
        await stub.SendPrompt(request)
        acks.append((time.perf_counter() - start) * 1000)
        await ended.get()


async def measure(turns: int = 20, durable: bool = False) -> dict[str, float]:
    """`durable`: the daemon keeps its agents and timelines in a temporary state directory
    (a prompt is acknowledged once committed)."""
    state_dir = tempfile.mkdtemp(prefix="corral-bench-state-") if durable else ""
    corral = await Corral.start(retain_events=200_000, state_dir=state_dir)
    channels = [grpc.aio.insecure_channel(corral.address) for _ in range(SUBSCRIBERS + 1)]
    try:
        agents_stub = agent_grpc.AgentServiceStub(channels[0])
        cwd = tempfile.mkdtemp(prefix="corral-bench-")
        agent_ids = [
            (
                await agents_stub.CreateAgent(
                    agent_pb.CreateAgentRequest(provider="scripted", cwd=cwd)
                )
            ).agent.id
            for _ in range(AGENTS)
        ]
        latencies: list[float] = []
        ended: dict[str, asyncio.Queue[str]] = defaultdict(asyncio.Queue)
        watchers = [asyncio.ensure_future(_watch(channels[0], [], ended))]  # routes turn ends
        watchers += [asyncio.ensure_future(_watch(c, latencies, {})) for c in channels[1:]]
        await asyncio.sleep(0.5)  # bench only: let the subscriptions reach `synced`
        acks: list[float] = []
        await asyncio.gather(*(_sender(channels[0], a, turns, acks, ended[a]) for a in agent_ids))
        await asyncio.sleep(0.2)  # bench only: the last rows reach the watchers
        for w in watchers:
            w.cancel()
    finally:
        await asyncio.gather(*(c.close() for c in channels))
        await corral.stop()
    return {
        "p4_events": len(latencies),
        "p4_p50_ms": statistics.median(latencies),
        "p4_p99_ms": percentile(latencies, 0.99),
        "p5_sends": len(acks),
        "p5_p50_ms": statistics.median(acks),
        "p5_p99_ms": percentile(acks, 0.99),
    }


def report(r: dict[str, float], what: str = "", fsync: dict[str, float] | None = None) -> str:
    """`fsync`: the disk's commit latency measured in the same run (bench/anchor.py): the
    durable P5 goal is relative to it too, and both figures are shown against it."""
    p4_disk = p5_disk = ""
    goal = "p99 < 15 ms"
    if fsync is not None:
        bound = 2 * fsync["p99"] + 2
        goal += f" and <= 2x fsync p99 + 2 ms = {bound:.1f} ms"
        p4_disk = f", {r['p4_p99_ms'] / fsync['p99']:.1f}x fsync p99"
        p5_disk = f", {r['p5_p99_ms'] / fsync['p99']:.1f}x fsync p99"
    return "\n".join(
        (
            f"P4{what} provider event -> subscriber, {AGENTS} agents, {SUBSCRIBERS} subscribers "
            f"({r['p4_events']:,} rows): p50 {r['p4_p50_ms']:.1f} ms, p99 {r['p4_p99_ms']:.1f} ms"
            f"{p4_disk} (goal p99 < 20 ms)",
            f"P5{what} SendPrompt ack, {AGENTS} concurrent senders ({r['p5_sends']:,} sends): "
            f"p50 {r['p5_p50_ms']:.1f} ms, p99 {r['p5_p99_ms']:.1f} ms{p5_disk} (goal {goal})",
        )
    )


if __name__ == "__main__":
    turns = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    print(report(asyncio.run(measure(turns))))
    disk = anchor.fsync_ms()
    print(anchor.fsync_report(disk))
    print(report(asyncio.run(measure(turns, durable=True)), " (durable store)", disk))
