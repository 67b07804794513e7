"""P6 (BENCHMARKS.md#goals): resident memory per idle agent. Creates 10,000 scripted agents in a
daemon in this process and divides the growth of VmRSS by their number (this includes the
two AgentUpserted events each create leaves in the hub's retained ring).

Run: .venv/bin/python -m bench.memory [agents]
"""

from __future__ import annotations

import asyncio
import gc
import os
import sys
import tempfile

from corral_server.app import Config, Daemon
from corral_server.manager.specs import CreateSpec


def _rss_kb() -> int:
    with open(f"/proc/{os.getpid()}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS in /proc/self/status")


async def measure(agents: int = 10_000) -> float:
    """KB of resident memory per idle agent."""
    daemon = Daemon(Config())
    with tempfile.TemporaryDirectory() as cwd:
        spec = CreateSpec(provider="scripted", cwd=cwd)
        await daemon.manager.create(spec)  # warm up imports and first allocations
        gc.collect()
        before = _rss_kb()
        for _ in range(agents):
            await daemon.manager.create(spec)
        gc.collect()
        after = _rss_kb()
        await daemon.manager.shutdown()
    return (after - before) / agents


def report(kb: float, agents: int = 10_000) -> str:
    return f"P6 memory per idle agent ({agents:,} agents): {kb:.1f} KB (goal < 20 KB)"


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    print(report(asyncio.run(measure(n)), n))
