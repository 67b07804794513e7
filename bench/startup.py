"""P3 (BENCHMARKS.md): start-up with 10 k stored agents, 1 k rows each, until health is SERVING.

A state directory is filled through the stores themselves (a daemon would take minutes to run
10 M rows of turns): 10,000 agent records (scripted, idle) and their timelines of 1,000 rows
each. Then `corral serve` starts on it as a real process, and the time from its start to the
first SERVING answer of the health service is measured (a client polls Health/Check). The
daemon reads agent headers and timeline heads only: start-up grows with agents, not rows.

The daemon starts from bytecode, as an installed one does (pip compiles what it installs):
a first start, not measured, writes it into a scratch cache (PYTHONPYCACHEPREFIX). Run from a
source tree under PYTHONDONTWRITEBYTECODE=1 (this project's machine sets it), every start
compiled corral's ~280 modules again, 0.39 s of a 2.05 s start in a profile: the bench
measured the compiler (importing the daemon from the cache: 0.59x the CPU, BENCHMARKS.md).

Run: .venv/bin/python -m bench.startup [agents] [rows_per_agent]
"""

from __future__ import annotations

import asyncio
import os
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2

from corral_cli.health import health_stub
from corral_server.domain.agent import Agent, AgentId, Idle
from corral_server.domain.timeline import AssistantMessage
from corral_server.rpc.item_codec import ITEM_CODEC
from corral_server.store.agent_records import SqliteAgentRecords
from corral_server.store.database import Database
from corral_server.store.format.agents import decode_agent, encode_agent
from corral_server.store.sqlite_timeline import SqliteTimelineStore
from corral_server.timeline.store import NewRow

CHUNK = 1_000  # rows per append while filling


def bytecode_env(scratch: Path) -> dict[str, str]:
    """The environment of a daemon that starts from bytecode, written into `scratch` by a
    first start (`warm`) and read from there after. The prefix is for every module, the
    installed packages' too (their own __pycache__ is not read under a prefix), so a cache of
    corral's sources alone would have the packages compiled at each start instead."""
    env = {**os.environ, "PYTHONPYCACHEPREFIX": str(scratch)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


async def warm(scratch: Path, env: dict[str, str]) -> None:
    """One start on an empty state directory, not measured: what a start imports is compiled
    into the cache."""
    await serving_after(scratch / "warm-state", env)


async def fill(state_dir: Path, agents: int, rows: int) -> None:
    db = await Database.open(state_dir, synchronous="NORMAL")
    try:
        timeline = await SqliteTimelineStore.open(db, ITEM_CODEC)
        records = await SqliteAgentRecords.open(db, encode_agent, decode_agent)
        item = AssistantMessage("a row of about a hundred bytes of assistant text, " * 2, "m")
        pending: list[asyncio.Future[Any]] = []
        for n in range(agents):
            agent_id = f"{n:032x}"
            head = await timeline.create(agent_id)
            for start in range(0, rows, CHUNK):
                batch = [NewRow(item, 1_760_000_000_000 + start + i, "t") for i in range(CHUNK)]
                pending.append(timeline.append_nowait(agent_id, batch[: rows - start]))
            agent = Agent(
                id=AgentId(agent_id),
                provider="scripted",
                cwd=str(state_dir),
                lifecycle=Idle(),
                created_at_ms=1_760_000_000_000 + n,
                updated_at_ms=1_760_000_000_000 + n,
                epoch=head.epoch,
                next_seq=rows + 1,
                title=f"agent {n}",
            )
            pending.append(records.put(agent))
            if len(pending) > 200:
                await asyncio.gather(*pending)
                pending = []
        await asyncio.gather(*pending)
    finally:
        await db.close()


async def serving_after(state_dir: Path, env: dict[str, str] | None = None) -> tuple[float, int]:
    """Seconds from `corral serve` starting to its first SERVING health answer, and the
    number of agents it lists. `env`: the daemon's environment (bytecode_env)."""
    started = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "corral_server.daemon",
        "--listen",
        "127.0.0.1:0",
        "--state-dir",
        str(state_dir),
        "--log-level",
        "WARNING",
        stdout=asyncio.subprocess.PIPE,
        env=env,
    )
    try:
        assert proc.stdout is not None
        line = (await proc.stdout.readline()).decode()  # printed once it serves
        # "... listening on 127.0.0.1:PORT; state ..." (the gRPC address comes first)
        match = re.search(r"listening on \S+?:(\d+)", line)
        assert match is not None, line
        port = match.group(1)
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            health = health_stub(channel)
            reply = await health.Check(health_pb2.HealthCheckRequest(service=""))
            elapsed = time.perf_counter() - started
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
            from corral.v1 import agent_service_pb2 as svc_pb
            from corral.v1 import agent_service_pb2_grpc as svc_grpc

            listed = 0
            token = ""
            stub = svc_grpc.AgentServiceStub(channel)
            while True:
                page = await stub.ListAgents(
                    svc_pb.ListAgentsRequest(page_size=1000, page_token=token)
                )
                listed += len(page.agents)
                token = page.next_page_token
                if not token:
                    break
    finally:
        proc.terminate()
        await proc.wait()
    return elapsed, listed


async def main(agents: int, rows: int) -> None:
    with tempfile.TemporaryDirectory(
        prefix="bench-startup-", dir=Path(__file__).parent.parent
    ) as d:
        state_dir = Path(d) / "state"
        started = time.perf_counter()
        await fill(state_dir, agents, rows)
        filled = time.perf_counter() - started
        empty = Path(d) / "empty"
        env = bytecode_env(Path(d) / "pycache")
        await warm(Path(d), env)
        baseline, _ = await serving_after(empty, env)
        elapsed, listed = await serving_after(state_dir, env)
    print(
        f"P3 start-up until SERVING with {agents:,} agents x {rows:,} rows: {elapsed:.2f} s "
        f"(an empty state directory: {baseline:.2f} s; {listed:,} agents listed; goal < 1 s; "
        f"filled in {filled:.0f} s)"
    )


if __name__ == "__main__":
    n_agents = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    n_rows = int(sys.argv[2]) if len(sys.argv) > 2 else 1_000
    asyncio.run(main(n_agents, n_rows))
