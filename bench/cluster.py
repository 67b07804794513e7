"""Cluster (preview; docs/cluster.md): three NATS servers (JetStream, R3) and three corral nodes
(bench/cluster_node.py, the burst provider beside the scripted one), each in its own process,
Envoy (deploy/cluster/envoy.yaml on loopback ports) in front for the switch-over.

  C1  rows/s through one agent's writer: a `rows N` burst, until its owner is idle and until
      a subscriber on another node has the turn's end (goal: at least 20,000)
  C2  total rows/s, 30 bursting agents over the 3 nodes at once (goal: at least 50,000)
  C3  provider event -> subscriber on another node: 30 agents (10 a node) each prompted every
      0.5 s, one subscriber a node; for the user-message and completed tool-call rows of
      other nodes' agents, now - row.timestamp (the owner's clock is the same machine's) (goal:
      p99 under 50 ms)
  C4  switch-over after a node SIGKILL: subscribers through Envoy while agents on the other
      nodes keep prompting; for each whose stream broke, the kill -> the first message of its
      resumed stream (from its last revision, through Envoy) (goal: under 2 s)

Run: .venv/bin/python -m bench.cluster [--quick]
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from bench.cluster_procs import Node, bench_cluster, create, ended, idle, made, prompt_of
from bench.latency import PROMPT, percentile
from bench.p1 import Corral
from corral.v1 import agent_service_pb2 as agent_pb
from corral.v1 import event_service_pb2 as event_pb
from tests.support.client import Stubs
from tests.support.envoy import Envoy

AGENTS_PER_NODE = 10
INTERVAL_S = 0.5  # C3's open loop: each agent prompted every half second
TOOL_DONE = 3  # ToolCall.status COMPLETED


async def turn_end_seen(node: Node, agent_id: str, synced: asyncio.Event) -> float:
    """The perf_counter at which `node` streams the agent's turn end."""
    call = node.stubs.events.Subscribe(event_pb.SubscribeRequest(agent_ids=[agent_id]))
    async for response in call:
        for event in response.events:
            if event.HasField("synced"):
                synced.set()
            if event.HasField("turn_completed"):
                call.cancel()
                return time.perf_counter()
    raise AssertionError("the stream ended")


async def one_writer(nodes: list[Node], rows: int, cwd: str) -> tuple[float, float]:
    """C1: rows/s at the owner (idle) and on another node (the turn's end streamed)."""
    owner, other = nodes[0], nodes[1]
    agent_id = await create(owner, "burst", cwd)
    await idle(owner, agent_id)
    synced = asyncio.Event()
    seen = asyncio.ensure_future(turn_end_seen(other, agent_id, synced))
    await synced.wait()
    start = time.perf_counter()
    await owner.stubs.turns.SendPrompt(prompt_of(agent_id, f"rows {rows}"))
    await idle(owner, agent_id)
    at_owner = time.perf_counter() - start
    at_other = await seen - start
    got = await owner.stubs.agents.GetAgent(agent_pb.GetAgentRequest(agent_id=agent_id))
    assert got.agent.timeline.next_seq == rows + 2, got.agent.timeline
    return rows / at_owner, rows / at_other


async def single_daemon(rows: int, state_dir: Path) -> float:
    """C1's reference: the same burst through one durable daemon in its own process
    (bench/burst_daemon.py), in the same run."""
    corral = await Corral.start(rows + 1_000, str(state_dir))
    try:
        start = time.perf_counter()
        await corral.burst(rows)
        return rows / (time.perf_counter() - start)
    finally:
        await corral.stop()


async def many_writers(nodes: list[Node], rows: int, cwd: str) -> tuple[float, list[str]]:
    """C2: total rows/s of AGENTS_PER_NODE bursting agents on every node at once; the errors
    of those that failed (then the rate is not a figure)."""
    owned = [(n, await create(n, "burst", cwd)) for n in nodes for _ in range(AGENTS_PER_NODE)]
    await asyncio.gather(*(idle(n, a) for n, a in owned))
    start = time.perf_counter()
    await asyncio.gather(
        *(n.stubs.turns.SendPrompt(prompt_of(a, f"rows {rows}")) for n, a in owned)
    )
    errors = [e for e in await asyncio.gather(*(ended(n, a) for n, a in owned)) if e]
    return rows * len(owned) / (time.perf_counter() - start), errors


async def watch_others(node: Node, owners: dict[str, str], latencies: list[float]) -> None:
    """C3's subscriber on `node`: the latency of the rows of agents other nodes own."""
    async for response in node.stubs.events.Subscribe(event_pb.SubscribeRequest()):
        now_ms = time.time() * 1000
        for event in response.events:
            if not event.HasField("timeline_row_appended"):
                continue
            appended = event.timeline_row_appended
            if owners.get(appended.agent_id, node.name) == node.name:
                continue
            item = appended.row.item
            kind = item.WhichOneof("kind")
            if kind == "user_message" or (
                kind == "tool_call" and item.tool_call.status == TOOL_DONE
            ):
                latencies.append(now_ms - appended.row.timestamp.ToMilliseconds())


async def prompted(node: Node, agent_id: str, turns: int, phase: float) -> None:
    """Open loop: a prompt every INTERVAL_S (phase-shifted), each once the last turn ended."""
    await asyncio.sleep(phase)
    for _ in range(turns):
        started = time.perf_counter()
        await node.stubs.turns.SendPrompt(prompt_of(agent_id, PROMPT))
        await idle(node, agent_id)
        await asyncio.sleep(max(0.0, INTERVAL_S - (time.perf_counter() - started)))


async def latency(nodes: list[Node], turns: int, cwd: str) -> list[float]:
    """C3: the samples, in ms."""
    owned = [(n, await create(n, "scripted", cwd)) for n in nodes for _ in range(AGENTS_PER_NODE)]
    owners = {agent_id: node.name for node, agent_id in owned}
    latencies: list[float] = []
    watchers = [asyncio.ensure_future(watch_others(n, owners, latencies)) for n in nodes]
    await asyncio.sleep(0.5)  # every watcher subscribed
    phases = [INTERVAL_S * i / len(owned) for i in range(len(owned))]
    await asyncio.gather(
        *(prompted(n, a, turns, p) for (n, a), p in zip(owned, phases, strict=True))
    )
    for watcher in watchers:
        watcher.cancel()
    await asyncio.gather(*watchers, return_exceptions=True)
    return latencies


@dataclass
class Resuming:
    """A subscriber that, when its stream breaks, resumes through `then` from its last
    revision; when it broke and when its resumed stream's first message came."""

    first: str
    then: str
    last: int = 0
    incarnation: str = ""
    broke_at: float | None = None
    resumed_at: float | None = None
    synced: asyncio.Event = field(default_factory=asyncio.Event)
    resumed: asyncio.Event = field(default_factory=asyncio.Event)
    resets: int = 0
    gaps: int = 0

    async def run(self) -> None:
        address = self.first
        while True:
            request = event_pb.SubscribeRequest()
            if self.last:
                request = event_pb.SubscribeRequest(
                    resume_revision=self.last, resume_incarnation=self.incarnation
                )
            async with grpc.aio.insecure_channel(address) as channel:
                try:
                    async for response in Stubs.of(channel).events.Subscribe(request):
                        self._take(response.events)
                except grpc.aio.AioRpcError:
                    self.broke_at = self.broke_at or time.perf_counter()
                    address = self.then

    def _take(self, events: Any) -> None:
        if self.broke_at is not None and self.resumed_at is None:
            self.resumed_at = time.perf_counter()
            self.resumed.set()
        for event in events:
            if event.HasField("synced"):
                self.incarnation = event.synced.incarnation
                self.resets += event.synced.reset
                self.synced.set()
            if event.revision:
                self.gaps += bool(self.last) and event.revision != self.last + 1
                self.last = event.revision


async def keep_prompting(node: Node, agent_id: str) -> None:
    while True:
        await node.stubs.turns.SendPrompt(prompt_of(agent_id, "/reply still here"))
        await idle(node, agent_id)
        await asyncio.sleep(0.1)


async def switch_over(nodes: list[Node], envoy: Envoy, cwd: str) -> tuple[list[float], int, int]:
    """C4: each broken subscriber's kill -> resumed seconds; the resets and gaps seen."""
    *survivors, victim = nodes
    load = [
        asyncio.ensure_future(keep_prompting(n, await create(n, "scripted", cwd)))
        for n in survivors
    ]
    listener = envoy.listening("corral_grpc")
    subscribers = [Resuming(victim.address, listener)]
    subscribers += [Resuming(listener, listener) for _ in range(5)]
    running = [asyncio.ensure_future(s.run()) for s in subscribers]
    await asyncio.gather(*(s.synced.wait() for s in subscribers))
    killed_at = time.perf_counter()
    victim.proc.kill()
    await victim.proc.wait()
    await asyncio.sleep(1.0)  # the streams on the victim broke; a few more events on each
    broken = [s.resumed.wait() for s in subscribers if s.broke_at]
    await asyncio.wait_for(asyncio.gather(*broken), 30)
    for task in (*load, *running):
        task.cancel()
    await asyncio.gather(*load, *running, return_exceptions=True)
    switched = [s.resumed_at - killed_at for s in subscribers if s.broke_at and s.resumed_at]
    assert len(switched) == sum(1 for s in subscribers if s.broke_at), "a subscriber never resumed"
    return switched, sum(s.resets for s in subscribers), sum(s.gaps for s in subscribers)


def load_average() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} cores"


@dataclass
class Run:
    nodes: list[Node]
    envoy: Envoy
    tmp: Path
    cwd: str
    quick: bool


async def c1(run: Run) -> str:
    rows = 20_000 if run.quick else 100_000
    at_owner, at_other = await one_writer(run.nodes, rows, run.cwd)
    single = await single_daemon(rows, run.tmp / "single")
    return (
        f"C1 one agent's writer, {rows:,} rows: {at_owner:,.0f} rows/s at its owner, "
        f"{at_other:,.0f} rows/s streamed on another node (goal >= 20,000); one durable "
        f"daemon, the same burst: {single:,.0f} rows/s (the cluster {at_owner / single:.2f}x it)"
    )


async def c2(run: Run) -> str:
    rows = 2_000 if run.quick else 10_000
    total, errors = await many_writers(run.nodes, rows, run.cwd)
    failed = f"FAILED: {len(errors)} agents errored, first: {errors[0]}; " if errors else ""
    return (
        f"C2 {3 * AGENTS_PER_NODE} agents over 3 nodes, {rows:,} rows each: {failed}"
        f"{total:,.0f} rows/s in all (goal >= 50,000); {load_average()}"
    )


async def c3(run: Run) -> str:
    samples = await latency(run.nodes, 6 if run.quick else 20, run.cwd)
    return (
        f"C3 provider event -> subscriber on another node ({len(samples):,} rows, "
        f"{3 * AGENTS_PER_NODE} agents every {INTERVAL_S} s): p50 "
        f"{percentile(samples, 0.5):.1f} ms, p99 {percentile(samples, 0.99):.1f} ms "
        f"(goal p99 < 50 ms)"
    )


async def c4(run: Run) -> str:
    switched, resets, gaps = await switch_over(run.nodes, run.envoy, run.cwd)
    return (
        f"C4 switch-over after a node SIGKILL, {len(switched)} subscribers on it: median "
        f"{statistics.median(switched):.2f} s, max {max(switched):.2f} s (goal < 2 s); "
        f"{resets} resets, {gaps} gaps; {load_average()}"
    )


async def measure(quick: bool) -> list[str]:
    """Every figure's line, each printed as soon as it is measured; a figure that fails says
    so and the next one still runs (C4 kills a node: it comes last)."""
    with tempfile.TemporaryDirectory(prefix="corral-bench-cluster-") as tmp:
        cwd = str(made(Path(tmp) / "cwd"))
        async with bench_cluster(Path(tmp)) as (nodes, envoy):
            run = Run(nodes, envoy, Path(tmp), cwd, quick)
            lines = Lines()
            lines.append(f"Cluster (preview), 3 nodes on 3 NATS servers (R3); {load_average()}")
            for figure in (c1, c2, c3, c4):
                try:
                    lines.append(await figure(run))
                except (AssertionError, grpc.aio.AioRpcError, TimeoutError) as error:
                    lines.append(f"{figure.__name__.upper()} FAILED: {error!r:.400}")
    return lines


class Lines(list[str]):
    def append(self, line: str) -> None:
        print(line, flush=True)
        super().append(line)


async def report(quick: bool) -> None:
    """Prints the figures."""
    await measure(quick)


if __name__ == "__main__":
    asyncio.run(report("--quick" in sys.argv))
