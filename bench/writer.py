"""P1' (NORTH_STAR.md): timeline rows/s a bursting provider gets through the single writer,
into storage and out to the event hub (no subscriber here: see p1 for delivery).

Run: .venv/bin/python -m bench.writer [rows]
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time

from bench.burst import BurstProvider
from corral_server.app import Config, Daemon
from corral_server.domain.content import TextPart
from corral_server.manager.manager import CreateSpec
from corral_server.manager.turns import IfRunning


async def measure(rows: int = 200_000) -> float:
    daemon = Daemon(Config(extra_providers={"burst": BurstProvider()}))
    manager = daemon.manager
    with tempfile.TemporaryDirectory() as cwd:
        agent, _ = await manager.create(CreateSpec(provider="burst", cwd=cwd))
        start = time.perf_counter()
        updates = await manager.stream_turn(
            agent.id, (TextPart(f"rows {rows}"),), "", IfRunning.REJECT
        )
        async for _ in updates:
            pass
        elapsed = time.perf_counter() - start
    assert manager.get(agent.id).next_seq == rows + 2  # the user row + the burst
    await manager.shutdown()
    return rows / elapsed


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000
    print(f"P1' single writer: {asyncio.run(measure(n)):,.0f} rows/s ({n:,} rows)")
