"""The subscribers of the P7 bench (bench/fanout.py), in their own process so that their client
CPU is not the daemon's: N Subscribe streams watching every agent, spread over a few channels.

Each stream parses responses only until its `synced`; after that it counts bytes and messages
without decoding (a parsing client would be this process's bottleneck, not the daemon's). Prints
`ready` once every stream is synced; on stdin's end (or SIGTERM) prints
`<messages> <bytes>` received after `ready`, and exits.

Run: .venv/bin/python -m bench.fanout_watchers ADDRESS SUBSCRIBERS
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import grpc

from corral.v1 import event_service_pb2 as event_pb

# Streams per channel: one HTTP/2 connection carries this many Subscribe calls (the daemon's
# max_streams_per_connection is 256), so 100 subscribers use 10 connections.
STREAMS_PER_CHANNEL = 10
_METHOD = "/corral.v1.EventService/Subscribe"
_OPTIONS = [("grpc.max_receive_message_length", 64 * 1024 * 1024)]


def _identity(data: bytes) -> bytes:
    return data


class _Counts:
    def __init__(self) -> None:
        self.messages = 0
        self.bytes = 0
        self.counting = False


async def _watch(call: Any, synced: asyncio.Event, counts: _Counts) -> None:
    async for data in call:
        if not synced.is_set():
            response = event_pb.SubscribeResponse.FromString(data)
            if any(e.HasField("synced") for e in response.events):
                synced.set()
            continue
        if counts.counting:
            counts.messages += 1
            counts.bytes += len(data)


async def main(address: str, subscribers: int) -> None:
    channels = [
        grpc.aio.insecure_channel(address, options=_OPTIONS)
        for _ in range(-(-subscribers // STREAMS_PER_CHANNEL))
    ]
    request = event_pb.SubscribeRequest().SerializeToString()
    counts = _Counts()
    synced = [asyncio.Event() for _ in range(subscribers)]
    calls = [
        channels[i // STREAMS_PER_CHANNEL].unary_stream(
            _METHOD, request_serializer=_identity, response_deserializer=_identity
        )(request)
        for i in range(subscribers)
    ]
    tasks = [
        asyncio.ensure_future(_watch(c, s, counts)) for c, s in zip(calls, synced, strict=True)
    ]
    await asyncio.gather(*(s.wait() for s in synced))
    counts.counting = True
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    counts.counting = False
    print(counts.messages, counts.bytes, flush=True)
    for call in calls:
        call.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await asyncio.gather(*(c.close() for c in channels))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2])))
