"""P1' (BENCHMARKS.md#goals): timeline rows/s a bursting provider gets through the single writer,
into storage and out to 10 live subscribers (hub subscriptions drained in this process, no
gRPC: bench.p1 measures the wire). P1'': the durable figure against bare SQLite writing the
same rows in the same commit batches (bench/anchor.py), in the same run.

Run: .venv/bin/python -m bench.writer [rows]
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from pathlib import Path

from bench import anchor
from bench.burst import BurstProvider
from corral_server import gc_tuning
from corral_server.app import Config, Daemon
from corral_server.domain.content import TextPart
from corral_server.hub import Subscription
from corral_server.manager.specs import CreateSpec
from corral_server.manager.turns import IfRunning

SUBSCRIBERS = 10


async def _drain(subscription: Subscription, last: list[int]) -> int:
    """Reads until the subscription has delivered revision `last[0]` (once it is set)."""
    received = 0
    async for batch in subscription:
        received += len(batch)
        if last and subscription.delivered_revision >= last[0]:
            break
    return received


async def measure(
    rows: int = 200_000,
    subscribers: int = SUBSCRIBERS,
    durable: bool = False,
    search_index: bool = False,
) -> float:
    """Rows/s; `durable`: into the SQLite store of a temporary state directory (every row
    committed before it is published), else the in-memory store; `search_index`: with the
    durable store, each row also indexed for full-text search."""
    rate, _ = await _burst(rows, subscribers, durable, search_index)
    return rate


async def _burst(
    rows: int, subscribers: int, durable: bool, search_index: bool
) -> tuple[float, float]:
    """`measure`'s rows/s, and the rows per commit of the durable store (0 in memory)."""
    with tempfile.TemporaryDirectory() as cwd:
        state_dir = Path(cwd) / "state" if durable else None
        config = Config(
            listen="127.0.0.1:0",
            state_dir=state_dir,
            extra_providers={"burst": BurstProvider()},
            search_index=search_index,
        )
        daemon = Daemon(config)
        if durable:
            await daemon.start()
        gc_tuning.settle()  # as `corral serve` does
        manager = daemon.manager
        agent, _ = await manager.create(CreateSpec(provider="burst", cwd=cwd))
        last: list[int] = []
        subs = [
            daemon.hub.subscribe(frozenset([agent.id]), None, manager.directory.snapshot)
            for _ in range(subscribers)
        ]
        readers = [asyncio.ensure_future(_drain(s, last)) for s in subs]
        start = time.perf_counter()
        await manager.send_prompt(agent.id, (TextPart(f"rows {rows}"),), "", IfRunning.REJECT)
        await manager.wait_for_idle(agent.id, None)
        # Until every subscriber has the last event (durable: published after its commit).
        writer = daemon.hub.log_writer
        last.append(daemon.hub.head_revision if writer is None else writer.next_revision - 1)
        for s in subs:
            if s.delivered_revision >= last[0]:
                s.close()  # its reader waits for an event that will not come: end it
        await asyncio.gather(*readers)
        elapsed = time.perf_counter() - start
        for s in subs:
            s.close()
        assert manager.get(agent.id).next_seq == rows + 2  # the user row + the burst
        database = daemon.database
        per_commit = rows / max(1, database.commits) if database is not None else 0.0
        if durable:
            await daemon.drain(1.0, delay_s=0.0)
        else:
            await manager.shutdown()
    return rows / elapsed, per_commit


async def durable_against_anchor(rows: int, memory_rate: float) -> str:
    """P1' durable and P1'' in one report: the durable run, then bare SQLite writing the same
    rows in that run's commit batches (on a thread)."""
    durable, per_commit = await _burst(rows, SUBSCRIBERS, True, False)
    bare = await asyncio.to_thread(anchor.bare_rows_per_s, rows, round(per_commit))
    return "\n".join(
        (
            f"P1' with the durable store: {durable:,.0f} rows/s, {durable / memory_rate:.2f}x in "
            f"memory ({per_commit:,.0f} rows per commit; goal >= 80,000 and >= 0.7x)",
            f"P1'' bare SQLite executemany, the same rows and commits: {bare:,.0f} rows/s; "
            f"durable P1' {durable / bare:.2f}x it (goal >= 0.6x)",
        )
    )


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000
    rate = asyncio.run(measure(n))
    print(f"P1' single writer, {SUBSCRIBERS} live subscribers: {rate:,.0f} rows/s ({n:,} rows)")
    print(asyncio.run(durable_against_anchor(n, rate)))
