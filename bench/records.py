"""The SQLite records, next to the in-memory records of the same run.

  start-up   10,000 agent records put (each a realistic snapshot: title, labels, usage), then
             a reopen: Database.open + SqliteAgentRecords.open + load_headers (decoding every
             record) + SqliteEventLog.open over a retained log. Goal: < 1 s with 10 k
             agents (the daemon's full start-up, timeline heads included, is the lead's bench).
  log        event log appends/s, pipelined as the hub would (append, yield every 64, await
             the futures), 200-byte events; then reads/s of the whole log in 512-event,
             1 MiB batches (a laggard's catch-up from the store).

The database lives in a temporary directory next to the checkout (the same disk as a state
directory), synchronous=FULL unless said otherwise.

Run: .venv/bin/python -m bench.records [--quick]
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from corral_server.domain.agent import Agent, AgentId, Idle, Usage
from corral_server.records import EventLog, InMemoryAgentRecords, InMemoryEventLog
from corral_server.store.agent_records import SqliteAgentRecords
from corral_server.store.database import Database, Synchronous
from corral_server.store.event_log import SqliteEventLog
from corral_server.store.format.agents import decode_agent, encode_agent

EVENT = b"e" * 200
YIELD_EVERY = 64  # as the burst bench: a producer yields between provider events
READ_EVENTS = 512  # the hub's batch_events
READ_BYTES = 1 << 20  # the hub's batch_bytes
FILL_BATCH = 10_000  # filling the start-up log: await every this many appends


def _scratch() -> tempfile.TemporaryDirectory[str]:
    return tempfile.TemporaryDirectory(prefix="bench-records-", dir=Path(__file__).parent.parent)


def _agent(n: int) -> Agent:
    return Agent(
        id=AgentId(f"{n:032x}"),
        provider="claude",
        cwd=f"/home/dev/projects/repo-{n % 50}",
        lifecycle=Idle(),
        created_at_ms=1_760_000_000_000 + n,
        updated_at_ms=1_760_000_100_000 + n,
        epoch=f"{n * 7919:032x}",
        next_seq=1_001,
        model="claude-sonnet",
        mode="default",
        title=f"fix the flaky test number {n} in the build",
        labels={"team": "core", "ticket": f"T-{n}"},
        last_usage=Usage(12_000, 3_400, 800, 0.12),
        provider_session_id=f"session-{n:016x}",
    )


# --- start-up -------------------------------------------------------------------------------


async def startup(agents: int, log_events: int) -> dict[str, float]:
    snapshots = [_agent(n) for n in range(agents)]
    memory = InMemoryAgentRecords()
    for agent in snapshots:
        memory.put(agent)
    began = time.perf_counter()
    assert len((await memory.load_headers()).agents) == agents
    memory_s = time.perf_counter() - began
    with _scratch() as directory:
        database = await Database.open(Path(directory))
        records = await SqliteAgentRecords.open(database, encode_agent, decode_agent)
        log = await SqliteEventLog.open(database)
        began = time.perf_counter()
        await asyncio.gather(*(records.put(agent) for agent in snapshots))
        put_s = time.perf_counter() - began
        await _append(log, log_events, FILL_BATCH)
        await database.close()
        began = time.perf_counter()
        database = await Database.open(Path(directory))
        records = await SqliteAgentRecords.open(database, encode_agent, decode_agent)
        loaded = await records.load_headers()
        log = await SqliteEventLog.open(database)
        reopen_s = time.perf_counter() - began
        assert len(loaded.agents) == agents and not loaded.bad
        assert log.head_revision == log_events
        await database.close()
    return {
        "put agents/s": agents / put_s,
        "reopen + load_headers s": reopen_s,
        "memory load_headers s": memory_s,
    }


async def _append(log: EventLog, events: int, gather_every: int = 0) -> float:
    """Append `events` pipelined; returns events/s."""
    began = time.perf_counter()
    pending: list[asyncio.Future[None]] = []
    for i in range(events):
        pending.append(log.append(log.next_revision, f"agent-{i % 100}", EVENT))
        if i % YIELD_EVERY == 0:
            await asyncio.sleep(0)
        if gather_every and len(pending) >= gather_every:
            await asyncio.gather(*pending)
            pending = []
    await asyncio.gather(*pending)
    return events / (time.perf_counter() - began)


async def _read_all(log: EventLog) -> float:
    began = time.perf_counter()
    after, count = 0, 0
    while batch := await log.read(after, READ_EVENTS, READ_BYTES):
        count += len(batch)
        after = batch[-1].revision
    assert count == log.head_revision
    return count / (time.perf_counter() - began)


async def event_log(events: int) -> dict[str, Any]:
    memory = InMemoryEventLog()
    out: dict[str, Any] = {
        "memory": {"appends/s": await _append(memory, events), "reads/s": await _read_all(memory)}
    }
    synchronous: Synchronous
    for synchronous in ("FULL", "NORMAL"):
        with _scratch() as directory:
            database = await Database.open(Path(directory), synchronous=synchronous)
            log = await SqliteEventLog.open(database)
            commits = database.commits
            appends = await _append(log, events)
            per_commit = events / max(1, database.commits - commits)
            reads = await _read_all(log)
            await database.close()
            out[f"SQLite {synchronous}"] = {
                "appends/s": appends,
                "appends/commit": per_commit,
                "reads/s": reads,
            }
    return out


# --- report ---------------------------------------------------------------------------------


def report(startup_: dict[str, float], agents: int, log_: dict[str, Any], events: int) -> str:
    lines = [f"records: {agents:,} agent records, then a reopen (goal < 1 s)"]
    lines += [f"  {name:<26} {value:>12,.3f}" for name, value in startup_.items()]
    lines.append(f"records: event log, {events:,} events of {len(EVENT)} bytes")
    for name, figures in log_.items():
        cells = "  ".join(f"{key} {value:,.0f}" for key, value in figures.items())
        lines.append(f"  {name:<14} {cells}")
    return "\n".join(lines)


async def main(quick: bool) -> None:
    agents = 10_000
    events = 50_000 if quick else 200_000
    startup_ = await startup(agents, 20_000 if quick else 1_000_000)
    log_ = await event_log(events)
    print(report(startup_, agents, log_, events))


if __name__ == "__main__":
    asyncio.run(main("--quick" in sys.argv))
