"""The provider hop of Claude Code (issue 8, item 9): how long after the model server sent a
turn's last token a corral subscriber sees it, through the real `claude` and corral's wire.

One agent of the `claude-code` provider on an in-process daemon (system clock, so the
coalescer's 60 ms window runs as in production) runs TURNS text turns against the fake
Anthropic server of the tests, which runs in this process too (one monotonic clock). Per turn:

  row   the fake's last byte of the model stream -> the assistant row at StreamTurn
  end   the fake's last byte of the model stream -> turn_completed at StreamTurn

A row reaches a subscriber when the coalescer flushes it: after its 60 ms window, or earlier
when the turn's result ends it. So `row` is bounded by that window plus the hop itself.

Run: .venv/bin/python -m bench.claude_code_hop [turns]   (buildscripts/test installs claude)
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from pathlib import Path

import grpc

from corral.v1 import agent_service_pb2 as agent_pb
from corral.v1 import agent_service_pb2_grpc as agent_grpc
from corral.v1 import content_pb2 as content_pb
from corral.v1 import turn_service_pb2 as turn_pb
from corral.v1 import turn_service_pb2_grpc as turn_grpc
from corral_server.app import Config, Daemon
from corral_server.providers.claude_code import ClaudeCodeProvider
from tests.agents import programs
from tests.agents.child import sweep
from tests.support.fake_models import FakeModelServer, fake_model_server

PROMPT = "[[reply: " + " ".join(f"word{i}" for i in range(40)) + "]]"


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def turn(turns: turn_grpc.TurnServiceStub, agent_id: str) -> tuple[float, float]:
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


async def run(fake: FakeModelServer, home: Path, cwd: Path, count: int) -> None:
    program = programs.claude_code(home, cwd, fake.url)
    provider = ClaudeCodeProvider(program.argv[:1], program.env)
    daemon = Daemon(Config(listen="127.0.0.1:0", extra_providers={"claude-code": provider}))
    port = await daemon.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            agents = agent_grpc.AgentServiceStub(channel)
            turns = turn_grpc.TurnServiceStub(channel)
            request = agent_pb.CreateAgentRequest(
                provider="claude-code", cwd=str(cwd), model=programs.CLAUDE_MODEL
            )
            agent_id = (await agents.CreateAgent(request)).agent.id
            await turn(turns, agent_id)  # warm-up: the first turn starts claude's session
            rows, ends = [], []
            for _ in range(count):
                row_s, end_s = await turn(turns, agent_id)
                sent_s = fake.model_calls()[-1].ended_s
                rows.append((row_s - sent_s) * 1000)
                ends.append((end_s - sent_s) * 1000)
    finally:
        await daemon.drain(grace_s=5, delay_s=0)
        sweep(programs.LEFTOVER_TAG, program.tag)
    for name, samples in (("row", rows), ("end", ends)):
        p50, p99 = percentile(samples, 0.5), percentile(samples, 0.99)
        print(f"{name}: p50 {p50:.1f} ms  p99 {p99:.1f} ms  ({len(samples)} turns)")


def main() -> None:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    with tempfile.TemporaryDirectory() as tmp, fake_model_server() as fake:
        home, cwd = Path(tmp) / "home", Path(tmp) / "work"
        home.mkdir()
        cwd.mkdir()
        asyncio.run(run(fake, home, cwd, count))


if __name__ == "__main__":
    main()
