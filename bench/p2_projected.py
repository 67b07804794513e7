"""P2 for projections (BENCHMARKS.md#goals): a projected 200-entry FetchTimeline page at 1 M rows
costs at most 1.5x a raw 200-row page of the same timeline, over gRPC.

A real daemon in this process, one agent whose 1 M rows are filled directly in the store as
turns of six rows each: a prompt, a tool call RUNNING, two rows of one streamed reply, the tool
call COMPLETED, a last reply (four entries: the call and the reply fold). Then the median
latency of FetchTimeline over a loopback grpc.aio channel, raw and projected, BEFORE a cursor
in the middle and TAIL. A projected page of 200 entries holds 300 rows here (the raw page
200), and reads FOLD_SPAN rows more on each side it decides or finishes.

Run: .venv/bin/python -m bench.p2_projected
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
from bench.p2_rpc import CALLS
from corral.v1 import timeline_pb2
from corral.v1 import timeline_service_pb2 as tl_pb
from corral.v1 import timeline_service_pb2_grpc as tl_grpc
from corral_server.app import Config, Daemon
from corral_server.domain.timeline import (
    AssistantMessage,
    TimelineItem,
    ToolCall,
    ToolCallStatus,
    UserMessage,
)
from corral_server.manager.specs import CreateSpec
from corral_server.timeline.store import NewRow

PAGE = 200
ROWS = 1_000_000
GOAL_RATIO = 1.5
TURN_ROWS = 6


def _turn(number: int) -> list[NewRow]:
    turn, call, message = f"turn-{number}", f"call-{number}", f"msg-{number}"
    items: list[TimelineItem] = [
        UserMessage(f"prompt {number}"),
        ToolCall(call, "read", ToolCallStatus.RUNNING, {"path": "a.txt"}),
        AssistantMessage(TEXT, message),
        AssistantMessage(TEXT, message),
        ToolCall(call, "read", ToolCallStatus.COMPLETED, output={"ok": True}),
        AssistantMessage("done", f"{message}-last"),
    ]
    return [NewRow(item, 0, turn, "") for item in items]


async def _fill(daemon: Daemon, cwd: str, rows: int) -> str:
    agent, _ = await daemon.manager.create(CreateSpec(provider="burst", cwd=cwd))
    batch: list[NewRow] = []
    for number in range(rows // TURN_ROWS):
        batch.extend(_turn(number))
        if len(batch) >= 12_000:
            await daemon.timeline.append(agent.id, batch)
            batch = []
    if batch:
        await daemon.timeline.append(agent.id, batch)
    return agent.id


async def _interleaved_ms(
    stub: Any, requests: dict[str, tl_pb.FetchTimelineRequest]
) -> dict[str, float]:
    """Median ms of each request, the requests taking turns call by call, so load from
    elsewhere on the machine falls on raw and projected pages alike."""
    samples: dict[str, list[float]] = {name: [] for name in requests}
    for _ in range(CALLS):
        for name, request in requests.items():
            start = time.perf_counter()
            reply = await stub.FetchTimeline(request)
            samples[name].append((time.perf_counter() - start) * 1000)
            assert len(reply.rows) + len(reply.entries) == PAGE
    return {name: statistics.median(values) for name, values in samples.items()}


def _requests(agent_id: str, epoch: str, middle: int) -> dict[str, tl_pb.FetchTimelineRequest]:
    cursor = timeline_pb2.Cursor(epoch=epoch, seq=middle)
    before = tl_pb.TIMELINE_DIRECTION_BEFORE
    projected = timeline_pb2.TIMELINE_VIEW_PROJECTED
    return {
        "raw_before": tl_pb.FetchTimelineRequest(
            agent_id=agent_id, direction=before, cursor=cursor, limit=PAGE
        ),
        "raw_tail": tl_pb.FetchTimelineRequest(agent_id=agent_id, limit=PAGE),
        "projected_before": tl_pb.FetchTimelineRequest(
            agent_id=agent_id, direction=before, cursor=cursor, limit=PAGE, view=projected
        ),
        "projected_tail": tl_pb.FetchTimelineRequest(agent_id=agent_id, limit=PAGE, view=projected),
    }


async def measure(rows: int = ROWS) -> dict[str, Any]:
    daemon = Daemon(Config(listen="127.0.0.1:0", extra_providers={"burst": BurstProvider()}))
    port = await daemon.start()
    try:
        with tempfile.TemporaryDirectory() as cwd:
            agent_id = await _fill(daemon, cwd, rows)
            gc.collect()  # time the pages, not the collector's first passes over 1 M rows
            head = daemon.timeline.head(agent_id)
            requests = _requests(agent_id, head.epoch, head.next_seq // 2)
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                stub = tl_grpc.TimelineServiceStub(channel)
                await _interleaved_ms(stub, requests)  # warm up
                medians = await _interleaved_ms(stub, requests)
    finally:
        await daemon.drain(1.0)
    ratios = {
        kind: medians[f"projected_{kind}"] / medians[f"raw_{kind}"] for kind in ("before", "tail")
    }
    ok = all(r <= GOAL_RATIO for r in ratios.values())
    return {"rows": rows, "medians": medians, "ratios": ratios, "ok": ok}


def report(result: dict[str, Any]) -> str:
    m, r = result["medians"], result["ratios"]
    verdict = "ok" if result["ok"] else "MISSED"
    return "\n".join(
        [
            f"P2 projected: a {PAGE}-entry page vs a {PAGE}-row page at {result['rows']:,} rows,"
            f" over gRPC (median ms of {CALLS} calls)",
            f"  {'':>10} {'raw':>8} {'projected':>10} {'ratio':>7}",
            f"  {'BEFORE mid':>10} {m['raw_before']:>8.3f} {m['projected_before']:>10.3f}"
            f" {r['before']:>6.2f}x",
            f"  {'TAIL':>10} {m['raw_tail']:>8.3f} {m['projected_tail']:>10.3f} {r['tail']:>6.2f}x",
            f"  goal: projected <= {GOAL_RATIO}x raw: {verdict}",
        ]
    )


if __name__ == "__main__":
    print(report(asyncio.run(measure())))
