"""P7 (BENCHMARKS.md#goals): the fan-out cost. Scripted turns/s the daemon completes with 100 live
subscribers watching every agent, against the same load with none. Goal: at least 0.5x.

  load         AGENTS scripted agents, each in a closed loop: SendPrompt (a tool call and a
               reply), then WaitForIdle, then the next prompt; no Subscribe of its own, so the
               phase without subscribers has no fan-out at all
  subscribers  100 Subscribe streams (every agent) in a separate process
               (bench/fanout_watchers.py), so their client CPU is not the daemon's
  daemon       bench/burst_daemon.py in its own process; its CPU time is read from /proc,
               so the report also gives daemon CPU per turn and, from the difference, the
               daemon CPU each subscriber costs per event

The machine has few cores: the load generator and the subscribers share what the daemon does
not use, so the daemon's CPU share is printed with each phase (a daemon well under 100 % means
the clients, not the daemon, were the limit).

Run: .venv/bin/python -m bench.fanout [subscribers] [measure_s]   (about 25 s)
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any

import grpc

from bench.p1 import Corral
from corral.v1 import agent_service_pb2 as agent_pb
from corral.v1 import agent_service_pb2_grpc as agent_grpc
from corral.v1 import content_pb2 as content_pb
from corral.v1 import event_service_pb2 as event_pb
from corral.v1 import event_service_pb2_grpc as event_grpc
from corral.v1 import turn_service_pb2 as turn_pb
from corral.v1 import turn_service_pb2_grpc as turn_grpc
from tests.support.client import next_message

AGENTS = 40
SUBSCRIBERS = 100
MEASURE_S = 3.0
ROUNDS = 2
WARM_UP_S = 1.0
PROMPT = '/tool read {"path": "a.txt"}\n/reply ok'
_TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """User + system CPU seconds the process `pid` has used so far (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS_PER_S


@dataclass(frozen=True, slots=True)
class Phase:
    subscribers: int
    turns_per_s: float
    daemon_cpu_share: float  # CPU seconds per wall second
    daemon_cpu_us_per_turn: float
    clients_cpu_share: float  # this process (the load) plus the subscribers' process


class Load:
    """AGENTS closed-loop senders on one channel; `turns` counts completed turns."""

    def __init__(self, channel: Any, agent_ids: list[str]) -> None:
        self.turns = 0
        self._stop = False
        self._tasks = [asyncio.ensure_future(self._loop(channel, a)) for a in agent_ids]

    async def _loop(self, channel: Any, agent_id: str) -> None:
        turns = turn_grpc.TurnServiceStub(channel)
        prompt = turn_pb.SendPromptRequest(
            agent_id=agent_id, content=[content_pb.ContentPart(text=PROMPT)]
        )
        idle = turn_pb.WaitForIdleRequest(agent_id=agent_id)
        while not self._stop:
            await turns.SendPrompt(prompt)
            reply = await turns.WaitForIdle(idle)
            if reply.status != turn_pb.WAIT_STATUS_IDLE:
                raise RuntimeError(f"turn ended with {reply.status}")
            self.turns += 1

    async def stop(self) -> None:
        self._stop = True
        await asyncio.gather(*self._tasks)


async def _events_per_turn(corral: Corral, agent_id: str) -> int:
    """Events one scripted turn publishes, counted on a scoped stream."""
    call = event_grpc.EventServiceStub(corral.channel).Subscribe(
        event_pb.SubscribeRequest(agent_ids=[agent_id])
    )
    try:
        while not any(e.HasField("synced") for e in (await next_message(call)).events):
            pass
        turns = turn_grpc.TurnServiceStub(corral.channel)
        await turns.SendPrompt(
            turn_pb.SendPromptRequest(
                agent_id=agent_id, content=[content_pb.ContentPart(text=PROMPT)]
            )
        )
        await turns.WaitForIdle(turn_pb.WaitForIdleRequest(agent_id=agent_id))
        await asyncio.sleep(0.2)  # bench only: the turn's last events reach the stream
        count = 0
        while True:
            try:
                response = await asyncio.wait_for(next_message(call), 0.2)
            except TimeoutError:
                return count
            count += len(response.events)
    finally:
        call.cancel()


async def _measure(
    corral: Corral,
    load: Load,
    subscribers: int,
    watchers: asyncio.subprocess.Process | None,
    seconds: float,
) -> Phase:
    clients = [os.getpid()] + ([] if watchers is None else [watchers.pid])
    await asyncio.sleep(WARM_UP_S)
    turns, wall = load.turns, time.perf_counter()
    cpu, client_cpu = cpu_s(corral.proc.pid), sum(map(cpu_s, clients))
    await asyncio.sleep(seconds)
    turns = load.turns - turns
    cpu = cpu_s(corral.proc.pid) - cpu
    client_cpu = sum(map(cpu_s, clients)) - client_cpu
    wall = time.perf_counter() - wall
    per_turn_us = cpu / max(turns, 1) * 1e6
    return Phase(subscribers, turns / wall, cpu / wall, per_turn_us, client_cpu / wall)


async def _start_watchers(address: str, subscribers: int) -> asyncio.subprocess.Process:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bench.fanout_watchers",
        address,
        str(subscribers),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), 30)
    if line.strip() != b"ready":
        raise RuntimeError(f"watchers did not start: {line!r}")
    return proc


async def _stop_watchers(proc: asyncio.subprocess.Process) -> tuple[int, int]:
    """Ends the watchers; the messages and bytes they received while counting."""
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.close()
    line = await asyncio.wait_for(proc.stdout.readline(), 30)
    await proc.wait()
    messages, size = line.split()
    return int(messages), int(size)


async def measure(
    subscribers: int = SUBSCRIBERS, seconds: float = MEASURE_S, rounds: int = ROUNDS
) -> tuple[list[Phase], int, tuple[int, int]]:
    """Phases alternating without and with subscribers, `rounds` of each (the machine may be
    shared: alternating spreads its noise over both); the events per turn; and (messages,
    bytes) the subscribers received over all rounds."""
    corral = await Corral.start(retain_events=100_000)
    channel = grpc.aio.insecure_channel(corral.address)
    phases: list[Phase] = []
    messages = size = 0
    try:
        agents = agent_grpc.AgentServiceStub(channel)
        cwd = tempfile.mkdtemp(prefix="corral-bench-")
        agent_ids = [
            (
                await agents.CreateAgent(agent_pb.CreateAgentRequest(provider="scripted", cwd=cwd))
            ).agent.id
            for _ in range(AGENTS)
        ]
        per_turn = await _events_per_turn(corral, agent_ids[0])
        load = Load(channel, agent_ids)
        try:
            for _ in range(rounds):
                phases.append(await _measure(corral, load, 0, None, seconds))
                watchers = await _start_watchers(corral.address, subscribers)
                try:
                    phases.append(await _measure(corral, load, subscribers, watchers, seconds))
                finally:
                    got = await _stop_watchers(watchers)
                messages, size = messages + got[0], size + got[1]
        finally:
            await load.stop()
    finally:
        await channel.close()
        await corral.stop()
    return phases, per_turn, (messages, size)


def _total(phases: list[Phase]) -> tuple[float, float]:
    """(turns/s, daemon CPU us per turn) over equally long phases."""
    turns = sum(p.turns_per_s for p in phases)
    cpu = sum(p.daemon_cpu_share for p in phases)
    return turns / len(phases), cpu / turns * 1e6


def report(phases: list[Phase], per_turn: int, received: tuple[int, int]) -> str:
    subscribers = max(p.subscribers for p in phases)
    bare_rate, bare_cpu = _total([p for p in phases if not p.subscribers])
    watched_rate, watched_cpu = _total([p for p in phases if p.subscribers])
    per_sub_event_us = (watched_cpu - bare_cpu) / (subscribers * per_turn)
    lines = [f"P7 fan-out cost, {AGENTS} agents in closed loops ({per_turn} events per turn)"]
    for phase in phases:
        lines.append(
            f"  {phase.subscribers:>4} subscribers {phase.turns_per_s:>8,.0f} turns/s   daemon CPU "
            f"{phase.daemon_cpu_share:>4.0%}, {phase.daemon_cpu_us_per_turn:>6,.0f} us/turn; "
            f"clients' CPU {phase.clients_cpu_share:>4.0%}"
        )
    lines.append(
        f"  turns/s with {subscribers} subscribers / without: "
        f"{watched_rate / bare_rate:.2f}x (goal >= 0.5x); daemon CPU per turn, without / "
        f"with: {bare_cpu / watched_cpu:.2f}x"
    )
    lines.append(
        f"  daemon CPU per subscriber per event {per_sub_event_us:.2f} us; the subscribers got "
        f"{received[0]:,} messages, {received[1] / 1e6:,.1f} MB"
    )
    return "\n".join(lines)


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else SUBSCRIBERS
    s = float(sys.argv[2]) if len(sys.argv) > 2 else MEASURE_S
    print(report(*asyncio.run(measure(n, s))))
