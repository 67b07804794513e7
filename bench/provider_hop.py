"""The provider hop: how long after the model server sent a turn's last token
a corral subscriber sees it, through each real agent and corral's wire.

For each agent (Claude Code, Codex, gemini-cli over ACP, claude-agent-acp over ACP): one agent
on an in-process daemon (system clock, so the coalescer's 60 ms window runs as in production)
runs TURNS text turns against the fake model server of the tests, in this process too (one
monotonic clock). Per turn:

  row   the fake's last byte of the turn's model answer -> the assistant row at StreamTurn
  end   the same -> turn_completed at StreamTurn

A row reaches a subscriber when the coalescer flushes it: after its 60 ms window, or earlier
when the turn's end flushes it. So `row` is bounded by that window plus the hop itself, and
`end` adds whatever the agent does after the model's answer (its own bookkeeping, more calls).

Run: .venv/bin/python -m bench.provider_hop [turns] [agent ...]
     (buildscripts/test installs the agents)
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import grpc

from corral.v1 import agent_service_pb2 as agent_pb
from corral.v1 import agent_service_pb2_grpc as agent_grpc
from corral.v1 import content_pb2 as content_pb
from corral.v1 import turn_service_pb2 as turn_pb
from corral.v1 import turn_service_pb2_grpc as turn_grpc
from corral_server.app import Config, Daemon
from corral_server.providers.acp_provider import AcpProvider
from corral_server.providers.base import Provider
from corral_server.providers.claude_code import ClaudeCodeProvider
from corral_server.providers.codex import CodexProvider
from tests.agents import programs
from tests.agents.child import sweep
from tests.support.fake_models import FakeModelServer, fake_model_server

PROMPT = "[[reply: " + " ".join(f"word{i}" for i in range(40)) + "]]"


def _claude_code(program: programs.Program) -> Provider:
    return ClaudeCodeProvider(program.argv[:1], program.env)


def _codex(program: programs.Program) -> Provider:
    return CodexProvider(program.argv[:-1], program.env)  # the adapter adds `app-server`


def _acp(program: programs.Program) -> Provider:
    return AcpProvider(program.argv, program.env)


AGENTS: dict[str, tuple[Callable[..., programs.Program], Callable[..., Provider], str]] = {
    "claude-code": (programs.claude_code, _claude_code, programs.CLAUDE_MODEL),
    "codex": (programs.codex, _codex, ""),
    "gemini": (programs.gemini, _acp, ""),
    "claude-acp": (programs.claude_acp, _acp, ""),
}


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def turn(turns: turn_grpc.TurnServiceAsyncStub, agent_id: str) -> tuple[float, float]:
    """One turn: (monotonic receipt of the assistant row, of turn_completed)."""
    content = [content_pb.ContentPart(text=PROMPT)]
    call = turns.StreamTurn(turn_pb.StreamTurnRequest(agent_id=agent_id, content=content))
    row_s = 0.0
    async for event in call:
        now = time.monotonic()
        kind = event.WhichOneof("event")
        if kind == "row" and event.row.item.WhichOneof("kind") == "assistant_message":
            row_s = row_s or now
        elif kind == "turn_completed":
            return row_s, now
        elif kind in ("turn_failed", "turn_canceled"):
            raise RuntimeError(f"turn ended {kind}: {event}")
    raise RuntimeError("StreamTurn ended without a terminal event")


async def measure(name: str, fake: FakeModelServer, home: Path, cwd: Path, count: int) -> str:
    make_program, make_provider, model = AGENTS[name]
    program = make_program(home, cwd, fake.url)
    daemon = Daemon(Config(listen="127.0.0.1:0", extra_providers={name: make_provider(program)}))
    port = await daemon.start()
    rows: list[float] = []
    ends: list[float] = []
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            agents = agent_grpc.AgentServiceStub(channel)
            turns = turn_grpc.TurnServiceStub(channel)
            request = agent_pb.CreateAgentRequest(provider=name, cwd=str(cwd), model=model)
            agent_id = (await agents.CreateAgent(request)).agent.id
            await turn(turns, agent_id)  # warm-up: the first turn starts the agent's session
            for _ in range(count):
                before = len(fake.model_calls())
                row_s, end_s = await turn(turns, agent_id)
                answers = [c for c in fake.model_calls()[before:] if c.answer == "text"]
                sent_s = answers[0].ended_s  # the call that streamed the reply
                rows.append((row_s - sent_s) * 1000)
                ends.append((end_s - sent_s) * 1000)
    finally:
        await daemon.drain(grace_s=5, delay_s=0)
        sweep(programs.LEFTOVER_TAG, program.tag)
    parts = [
        f"{label} p50 {percentile(samples, 0.5):.1f} ms, p99 {percentile(samples, 0.99):.1f} ms"
        for label, samples in (("row", rows), ("end", ends))
    ]
    return f"provider hop, {name} ({count} turns): " + "; ".join(parts)


async def run(count: int, names: list[str]) -> None:
    with tempfile.TemporaryDirectory() as tmp, fake_model_server() as fake:
        for name in names:
            home, cwd = Path(tmp) / name / "home", Path(tmp) / name / "work"
            home.mkdir(parents=True)
            cwd.mkdir()
            print(await measure(name, fake, home, cwd, count), flush=True)


def main() -> None:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    names = sys.argv[2:] or list(AGENTS)
    asyncio.run(run(count, names))


if __name__ == "__main__":
    main()
