"""P1' (BENCHMARKS.md#goals): timeline rows/s a bursting provider gets through the single writer,
into storage and out to 10 live subscribers (hub subscriptions drained in this process, no
gRPC: bench.p1 measures the wire).

Run: .venv/bin/python -m bench.writer [rows]
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from pathlib import Path

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
        gc_tuning.tune()  # as `corral serve` does
        manager = daemon.manager
        agent, _ = await manager.create(CreateSpec(provider="burst", cwd=cwd))
        last: list[int] = []
        subs = [
            daemon.hub.subscribe(frozenset([agent.id]), None, manager.snapshot)
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
        if durable:
            await daemon.drain(1.0, delay_s=0.0)
        else:
            await manager.shutdown()
    return rows / elapsed


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000
    rate = asyncio.run(measure(n))
    print(f"P1' single writer, {SUBSCRIBERS} live subscribers: {rate:,.0f} rows/s ({n:,} rows)")
    durable = asyncio.run(measure(n, durable=True))
    print(
        f"P1' with the durable store: {durable:,.0f} rows/s ({durable / rate:.2f}x in memory; "
        "goal >= 80,000 and >= 0.7x)"
    )
