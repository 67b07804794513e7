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

Three processes: the daemon, P4's subscribers (bench/latency_watchers.py) and this one, with
the 100 senders and one stream that tells each sender its turn ended. With the subscribers in
this process too, their decoding (~16,000 events/s) stalled the senders' loop by up to 120 ms
and P5 measured the client (BENCHMARKS.md). The daemon times its own loop's stalls
(bench/loop_stalls.py): the report says how long it stalled and how much of that it spent
waiting for a CPU, which on a loaded machine is most of P5's tail.

Run: .venv/bin/python -m bench.latency [turns_per_agent]
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import grpc

from bench import anchor, loop_stalls
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


async def _route_turn_ends(channel: Any, ended: dict[str, asyncio.Queue[str]]) -> None:
    call = event_grpc.EventServiceStub(channel).Subscribe(event_pb.SubscribeRequest())
    async for response in call:
        for event in response.events:
            if event.HasField("turn_completed"):
                ended[event.turn_completed.agent_id].put_nowait(event.turn_completed.turn_id)


async def _start_watchers(address: str) -> asyncio.subprocess.Process:
    watchers = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bench.latency_watchers",
        address,
        str(SUBSCRIBERS),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        limit=1 << 26,  # the last line holds every latency
    )
    assert watchers.stdout is not None
    if (await watchers.stdout.readline()).strip() != b"ready":
        raise RuntimeError("the subscribers' process did not start")
    return watchers


async def _stop_watchers(watchers: asyncio.subprocess.Process) -> list[float]:
    assert watchers.stdin is not None and watchers.stdout is not None
    watchers.stdin.close()
    latencies: list[float] = json.loads(await watchers.stdout.readline())
    await watchers.wait()
    return latencies


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


async def measure(turns: int = 20, durable: bool = False) -> dict[str, Any]:
    """`durable`: the daemon keeps its agents and timelines in a temporary state directory
    (a prompt is acknowledged once committed)."""
    state_dir = tempfile.mkdtemp(prefix="corral-bench-state-") if durable else ""
    stalls = Path(tempfile.mkdtemp(prefix="corral-bench-stalls-")) / "stalls.json"
    os.environ["CORRAL_BENCH_STALLS"] = str(stalls)  # the daemon's child process reads it
    try:
        corral = await Corral.start(retain_events=200_000, state_dir=state_dir)
    finally:
        del os.environ["CORRAL_BENCH_STALLS"]
    channel = grpc.aio.insecure_channel(corral.address)
    watchers: asyncio.subprocess.Process | None = None
    try:
        agents_stub = agent_grpc.AgentServiceStub(channel)
        cwd = tempfile.mkdtemp(prefix="corral-bench-")
        agent_ids = [
            (
                await agents_stub.CreateAgent(
                    agent_pb.CreateAgentRequest(provider="scripted", cwd=cwd)
                )
            ).agent.id
            for _ in range(AGENTS)
        ]
        ended: dict[str, asyncio.Queue[str]] = defaultdict(asyncio.Queue)
        router = asyncio.ensure_future(_route_turn_ends(channel, ended))
        watchers = await _start_watchers(corral.address)
        await asyncio.sleep(0.5)  # bench only: let the router's subscription reach `synced`
        acks: list[float] = []
        await asyncio.gather(*(_sender(channel, a, turns, acks, ended[a]) for a in agent_ids))
        await asyncio.sleep(0.2)  # bench only: the last rows reach the watchers
        router.cancel()
        latencies = await _stop_watchers(watchers)
        watchers = None
    finally:
        if watchers is not None:
            watchers.kill()
            await watchers.wait()
        await channel.close()
        await corral.stop()
    stalled = json.loads(stalls.read_text())
    return {
        "stalls": stalled,
        "p4_events": len(latencies),
        "p4_p50_ms": statistics.median(latencies),
        "p4_p99_ms": percentile(latencies, 0.99),
        "p5_sends": len(acks),
        "p5_p50_ms": statistics.median(acks),
        "p5_p99_ms": percentile(acks, 0.99),
    }


def report(r: dict[str, Any], what: str = "", fsync: dict[str, float] | None = None) -> str:
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
            f"  {loop_stalls.report(r['stalls'])}",
        )
    )


if __name__ == "__main__":
    turns = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    print("load average {:.1f} {:.1f} {:.1f}".format(*os.getloadavg()))
    print(report(asyncio.run(measure(turns))))
    disk = anchor.fsync_ms()
    print(anchor.fsync_report(disk))
    print(report(asyncio.run(measure(turns, durable=True)), " (durable store)", disk))
    print("load average {:.1f} {:.1f} {:.1f}".format(*os.getloadavg()))
