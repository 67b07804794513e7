"""P4's subscribers, in a process of their own (bench/latency.py starts it).

Ten subscribers decoding ~16,000 events/s cost a Python client about a core: in the same
process as P5's 100 senders they delayed the senders' own acknowledgements (the client's
loop stalled up to 120 ms, BENCHMARKS.md), so the bench measured its client as much as the
daemon. Here they run apart: each subscribes to every agent, the process prints `ready` once
every stream is synced, and when its standard input closes it prints one JSON line, P4's
latencies in ms (now - the row's timestamp, for user messages and completed tool calls).

Run: .venv/bin/python -m bench.latency_watchers ADDRESS SUBSCRIBERS
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

import grpc

from corral.v1 import event_service_pb2 as event_pb
from corral.v1 import event_service_pb2_grpc as event_grpc

_COMPLETED = 3  # ToolCallStatus COMPLETED


async def watch(channel: Any, latencies: list[float], synced: asyncio.Event) -> None:
    call = event_grpc.EventServiceStub(channel).Subscribe(event_pb.SubscribeRequest())
    async for response in call:
        now_ms = time.time() * 1000
        for event in response.events:
            if event.HasField("timeline_row_appended"):
                row = event.timeline_row_appended.row
                kind = row.item.WhichOneof("kind")
                if kind == "user_message" or (
                    kind == "tool_call" and row.item.tool_call.status == _COMPLETED
                ):
                    latencies.append(now_ms - row.timestamp.ToMilliseconds())
            elif event.HasField("synced"):
                synced.set()


async def main(address: str, subscribers: int) -> None:
    channels = [grpc.aio.insecure_channel(address) for _ in range(subscribers)]
    latencies: list[float] = []
    synced = [asyncio.Event() for _ in channels]
    tasks = [
        asyncio.ensure_future(watch(c, latencies, s)) for c, s in zip(channels, synced, strict=True)
    ]
    await asyncio.gather(*(s.wait() for s in synced))
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*(c.close() for c in channels))
    print(json.dumps(latencies), flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2])))
