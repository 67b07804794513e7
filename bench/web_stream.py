"""Connect streaming: events/s that Subscribe delivers to 1 and 10 Node subscribers
through the Connect protocol on the web port (connect-node's Connect transport: HTTP/1.1,
binary messages), against the same Node subscribers through gRPC on the gRPC port
(connect-node's gRPC transport: HTTP/2), in the same run. Goal: Connect at least 0.5x gRPC.

  live    the subscribers are synced, then one agent bursts N rows; each reads to the turn's
          end (the rows plus a few lifecycle events)
  replay  the agent holds a history of H rows; each subscriber resumes from revision 0 and
          reads it back to `synced`

Every subscriber has its own connection and decodes every message
(clients/typescript/bench/subscribers.js, one Node process for all of them); the daemon is
bench/burst_daemon.py in its own process. The two transports alternate, so a shared machine's
noise falls on both; daemon and Node CPU shares say which side was the limit.

Run: .venv/bin/python -m bench.web_stream [history_rows [rounds]]   (about 2 minutes on 2 cores)
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from bench.fanout import cpu_s
from bench.p1 import Corral
from corral.v1 import agent_service_pb2 as agent_pb
from corral.v1 import agent_service_pb2_grpc as agent_grpc
from corral.v1 import content_pb2 as content_pb
from corral.v1 import turn_service_pb2 as turn_pb
from corral.v1 import turn_service_pb2_grpc as turn_grpc

SUBSCRIBERS = (1, 10)
LIVE_ROWS = {1: 20_000, 10: 10_000}
TRANSPORTS = ("grpc", "connect")
SCRIPT = Path(__file__).resolve().parents[1] / "clients" / "typescript" / "bench" / "subscribers.js"
HISTORY = 20_000
ROUNDS = 3
TIMEOUT_S = 600.0


@dataclass(frozen=True, slots=True)
class Run:
    kind: str  # live | replay
    transport: str
    subscribers: int
    events_per_s: float
    daemon_cpu_share: float  # CPU seconds per wall second
    node_cpu_share: float

    @property
    def daemon_us_per_event(self) -> float:
        """Daemon CPU per delivered event: what a crowded machine's noise moves least."""
        return self.daemon_cpu_share / self.events_per_s * 1e6


class WebCorral(Corral):
    """The bench daemon with its web port on."""

    web_url = ""

    @classmethod
    async def start_web(cls, retain_events: int) -> WebCorral:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bench.burst_daemon", "--web", str(retain_events),
            stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        assert proc.stdout is not None
        port, web_port = int(await proc.stdout.readline()), int(await proc.stdout.readline())
        corral = cls(proc, f"127.0.0.1:{port}")
        corral.web_url = f"http://127.0.0.1:{web_port}"
        reply = await agent_grpc.AgentServiceStub(corral.channel).CreateAgent(
            agent_pb.CreateAgentRequest(provider="burst", cwd=tempfile.mkdtemp(prefix="corral-"))
        )
        corral.agent_id = reply.agent.id
        return corral

    def url(self, transport: str) -> str:
        return f"http://{self.address}" if transport == "grpc" else self.web_url

    async def send_burst(self, rows: int) -> None:
        request = turn_pb.SendPromptRequest(
            agent_id=self.agent_id, content=[content_pb.ContentPart(text=f"rows {rows}")]
        )
        await turn_grpc.TurnServiceStub(self.channel).SendPrompt(request)


@contextlib.asynccontextmanager
async def _node(
    corral: WebCorral, transport: str, n: int, mode: str
) -> AsyncIterator[asyncio.subprocess.Process]:
    """The Node subscribers' process; killed if it is still running at the end."""
    node = shutil.which("node")
    if node is None:
        raise RuntimeError("node is not on PATH")
    proc = await asyncio.create_subprocess_exec(
        node, str(SCRIPT), corral.url(transport), transport, str(n), corral.agent_id, mode,
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        yield proc
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def _line(proc: asyncio.subprocess.Process) -> list[str]:
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), TIMEOUT_S)
    if not line:
        await _exit(proc)
        raise RuntimeError("node subscribers ended their output early")
    return line.decode().split()


async def _exit(proc: asyncio.subprocess.Process) -> None:
    if await asyncio.wait_for(proc.wait(), TIMEOUT_S) != 0:
        raise RuntimeError(f"node subscribers failed: exit {proc.returncode}")


async def live(corral: WebCorral, transport: str, n: int, rows: int) -> Run:
    async with _node(corral, transport, n, "live") as proc:
        if await _line(proc) != ["ready"]:
            raise RuntimeError("node subscribers did not get ready")
        started, daemon_cpu, node_cpu = time.perf_counter(), cpu_s(corral.proc.pid), cpu_s(proc.pid)
        await corral.send_burst(rows)
        [events] = await _line(proc)
        wall = time.perf_counter() - started
        daemon_cpu, node_cpu = cpu_s(corral.proc.pid) - daemon_cpu, cpu_s(proc.pid) - node_cpu
        await _exit(proc)
    return Run("live", transport, n, int(events) / wall, daemon_cpu / wall, node_cpu / wall)


async def replay(corral: WebCorral, transport: str, n: int) -> Run:
    daemon_cpu = cpu_s(corral.proc.pid)
    async with _node(corral, transport, n, "replay") as proc:
        events, seconds, node_cpu = await _line(proc)
        await _exit(proc)
    wall = float(seconds)
    # The daemon's CPU over the Node process's whole life: close to the replay's own.
    daemon_share = (cpu_s(corral.proc.pid) - daemon_cpu) / wall
    return Run("replay", transport, n, int(events) / wall, daemon_share, float(node_cpu) / wall)


async def measure(history: int = HISTORY, rounds: int = ROUNDS) -> list[Run]:
    """Every run, `rounds` of each, the two transports alternating."""
    retain = history + rounds * len(TRANSPORTS) * sum(LIVE_ROWS.values()) + 10_000
    corral = await WebCorral.start_web(retain_events=retain)
    runs: list[Run] = []
    try:
        for _ in range(rounds):
            for n in SUBSCRIBERS:
                for transport in TRANSPORTS:
                    runs.append(await live(corral, transport, n, LIVE_ROWS[n]))
        await corral.burst(history)
        for _ in range(rounds):
            for n in SUBSCRIBERS:
                for transport in TRANSPORTS:
                    runs.append(await replay(corral, transport, n))
    finally:
        await corral.stop()
    return runs


def medians(runs: list[Run]) -> list[Run]:
    """The median run (by events/s) of each kind, transport and subscriber count."""
    groups: dict[tuple[str, str, int], list[Run]] = {}
    for r in runs:
        groups.setdefault((r.kind, r.transport, r.subscribers), []).append(r)
    return [sorted(g, key=lambda r: r.events_per_s)[len(g) // 2] for g in groups.values()]


def report(runs: list[Run], history: int = HISTORY) -> str:
    rounds = len(runs) // len(medians(runs))
    lines = [
        "Connect streaming (web port, HTTP/1.1) vs gRPC (HTTP/2), to Node subscribers "
        f"(connect-node, every message decoded); replay of a {history:,}-row history; "
        f"the median of {rounds} runs each"
    ]
    runs = medians(runs)
    for r in runs:
        lines.append(
            f"  {r.kind:<6} {r.transport:<7} {r.subscribers:>3} subscribers "
            f"{r.events_per_s:>11,.0f} events/s   daemon CPU {r.daemon_cpu_share:>4.0%}, "
            f"node CPU {r.node_cpu_share:>4.0%}; daemon {r.daemon_us_per_event:>5.1f} us/event"
        )
    rate = {(r.kind, r.transport, r.subscribers): r.events_per_s for r in runs}
    ratios = [
        f"{kind} {n}: {rate[(kind, 'connect', n)] / rate[(kind, 'grpc', n)]:.2f}x"
        for kind in ("live", "replay")
        for n in SUBSCRIBERS
    ]
    lines.append(f"  events/s, Connect / gRPC: {', '.join(ratios)} (goal >= 0.5x)")
    cost = {(r.kind, r.transport, r.subscribers): r.daemon_us_per_event for r in runs}
    costs = [
        f"{kind} {n}: {cost[(kind, 'connect', n)] / cost[(kind, 'grpc', n)]:.2f}x"
        for kind in ("live", "replay")
        for n in SUBSCRIBERS
    ]
    lines.append(f"  daemon CPU per event, Connect / gRPC: {', '.join(costs)}")
    return "\n".join(lines)


if __name__ == "__main__":
    rows = int(sys.argv[1]) if len(sys.argv) > 1 else HISTORY
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else ROUNDS
    print(report(asyncio.run(measure(rows, rounds)), rows))
