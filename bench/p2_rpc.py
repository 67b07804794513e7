"""P2 (BENCHMARKS.md) through the wire: a 200-row FetchTimeline page at 1 M rows vs at 1 k rows.

A real daemon in this process, two agents whose timelines are filled directly in the store
(1 k and 1 M assistant rows of ~100 chars), then the median latency of FetchTimeline calls over
a loopback grpc.aio channel: BEFORE a cursor in the middle, and TAIL. Goal: ratio <= 1.5x.

Run: .venv/bin/python -m bench.p2_rpc
"""

from __future__ import annotations

import asyncio
import gc
import statistics
import tempfile
import time
from typing import Any

import grpc

from bench.burst import TEXT, BurstProvider
from corral.v1 import timeline_pb2
from corral.v1 import timeline_service_pb2 as tl_pb
from corral.v1 import timeline_service_pb2_grpc as tl_grpc
from corral_server.app import Config, Daemon
from corral_server.domain.timeline import AssistantMessage
from corral_server.manager.specs import CreateSpec
from corral_server.timeline.store import NewRow

PAGE = 200
CALLS = 300
FILL_BATCH = 10_000


async def _fill(daemon: Daemon, cwd: str, rows: int) -> str:
    agent, _ = await daemon.manager.create(CreateSpec(provider="burst", cwd=cwd))
    batch = [NewRow(AssistantMessage(TEXT), timestamp_ms=0)] * FILL_BATCH
    for start in range(0, rows, FILL_BATCH):
        await daemon.timeline.append(agent.id, batch[: min(FILL_BATCH, rows - start)])
    return agent.id


async def _median_ms(stub: Any, request: tl_pb.FetchTimelineRequest) -> float:
    samples = []
    for _ in range(CALLS):
        start = time.perf_counter()
        reply = await stub.FetchTimeline(request)
        samples.append((time.perf_counter() - start) * 1000)
        assert len(reply.rows) + len(reply.entries) == PAGE  # raw or projected (p2_projected)
    return statistics.median(samples)


async def measure(sizes: tuple[int, ...] = (1_000, 1_000_000)) -> dict[str, Any]:
    daemon = Daemon(Config(listen="127.0.0.1:0", extra_providers={"burst": BurstProvider()}))
    port = await daemon.start()
    results: dict[int, dict[str, float]] = {}
    try:
        with tempfile.TemporaryDirectory() as cwd:
            ids = {size: await _fill(daemon, cwd, size) for size in sizes}
            # Steady state: a daemon that has been running has long since moved its rows to
            # the oldest GC generation; right after a 1 M-row fill the collector would still
            # be examining them during the first calls and time the collector, not the page.
            gc.collect()
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                stub = tl_grpc.TimelineServiceStub(channel)
                for size, agent_id in ids.items():
                    head = daemon.timeline.head(agent_id)
                    middle = timeline_pb2.Cursor(epoch=head.epoch, seq=head.next_seq // 2)
                    before = tl_pb.FetchTimelineRequest(
                        agent_id=agent_id,
                        direction=tl_pb.TIMELINE_DIRECTION_BEFORE,
                        cursor=middle,
                        limit=PAGE,
                    )
                    tail = tl_pb.FetchTimelineRequest(agent_id=agent_id, limit=PAGE)
                    await _median_ms(stub, tail)  # warm up
                    results[size] = {
                        "before_ms": await _median_ms(stub, before),
                        "tail_ms": await _median_ms(stub, tail),
                    }
    finally:
        await daemon.drain(1.0)
    small, large = results[min(sizes)], results[max(sizes)]
    ratios = {k: large[k] / small[k] for k in small}
    return {"medians": results, "ratios": ratios, "ok": all(r <= 1.5 for r in ratios.values())}


def report(result: dict[str, Any]) -> str:
    lines = [f"P2 FetchTimeline {PAGE}-row page over gRPC (median ms of {CALLS} calls)"]
    lines.append(f"  {'rows':>10} {'BEFORE mid':>11} {'TAIL':>8}")
    for size, m in result["medians"].items():
        lines.append(f"  {size:>10,} {m['before_ms']:>11.3f} {m['tail_ms']:>8.3f}")
    r = result["ratios"]
    lines.append(
        f"  ratio 1M/1k: BEFORE {r['before_ms']:.2f}x, TAIL {r['tail_ms']:.2f}x (goal <= 1.5x)"
    )
    return "\n".join(lines)


if __name__ == "__main__":
    print(report(asyncio.run(measure())))
