"""P1 baselines (BENCHMARKS.md): two bare grpc.aio servers that corral's Subscribe is compared to.

Both serve the real `corral.v1.EventService/Subscribe` method and SubscribeResponse type, so one
client (`count_events`) reads all three servers the same way:

  per-message  one SubscribeResponse holding one Event per event, built and serialized per
               message per subscriber, as a naive server would
  batched      every event encoded once up front and framed into batches of 200 events per
               message (the transport's limit: no per-subscriber work at all)

Each server streams its events in a loop until the client cancels, so a run can ask for more
events than the server holds. The server runs in a child process, like a daemon would, so
server and clients each get a core of a 2-core machine.

Goal (P1): corral >= 20x per-message and >= 0.5x batched, for 1, 10 and 100 subscribers.

Run: .venv/bin/python bench/p1_baselines.py   (about 30 s on 2 cores)
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import AsyncIterator

import grpc

from corral.v1 import event_service_pb2 as event_pb
from corral.v1 import event_service_pb2_grpc as event_grpc
from corral.v1 import timeline_pb2 as timeline_pb
from corral_server.hub import frame

KINDS = ("per-message", "batched")
SUBSCRIBER_COUNTS = (1, 10, 100)
BATCH_EVENTS = 200
# Distinct events each server holds; it cycles through them.
SERVER_EVENTS = 20_000
# Events each subscriber reads, per kind and subscriber count: enough for a steady rate,
# small enough that the whole run stays well under a minute on 2 cores.
EVENTS_PER_SUBSCRIBER = {
    "per-message": {1: 60_000, 10: 10_000, 100: 1_000},
    "batched": {1: 1_000_000, 10: 200_000, 100: 30_000},
}
_CHANNEL_OPTIONS = [("grpc.max_receive_message_length", 64 * 1024 * 1024)]
_METHOD = "Subscribe"
_SERVICE = "corral.v1.EventService"


def make_events(count: int) -> list[event_pb.Event]:
    """Events shaped like a streaming agent's timeline rows: an assistant message row of
    about 100 characters, with revision, epoch, seq, timestamp and turn id."""
    events = []
    for index in range(count):
        text = f"Reply chunk {index:07d}: the build passes now; next I will update the tests."
        row = timeline_pb.TimelineRow(
            seq=index + 1,
            turn_id="turn-0001",
            item=timeline_pb.TimelineItem(
                assistant_message=timeline_pb.AssistantMessage(text=text.ljust(100, "."))
            ),
        )
        row.timestamp.FromMilliseconds(1_700_000_000_000 + index)
        appended = event_pb.TimelineRowAppended(
            agent_id="agent-7f3c9a1e", epoch="epoch-01HZX3", row=row
        )
        events.append(event_pb.Event(revision=index + 1, timeline_row_appended=appended))
    return events


# --- the servers (run in a child process) -------------------------------------------------


def _identity(data: bytes) -> bytes:
    return data


def _per_message_handler(
    events: list[event_pb.Event],
) -> grpc.RpcMethodHandler[event_pb.SubscribeRequest, event_pb.SubscribeResponse]:
    async def subscribe(
        request: event_pb.SubscribeRequest, context: grpc.aio.ServicerContext[object, object]
    ) -> AsyncIterator[event_pb.SubscribeResponse]:
        while True:
            for event in events:
                yield event_pb.SubscribeResponse(events=[event])

    return grpc.unary_stream_rpc_method_handler(
        subscribe,
        request_deserializer=event_pb.SubscribeRequest.FromString,
        response_serializer=event_pb.SubscribeResponse.SerializeToString,
    )


def _batched_handler(
    events: list[event_pb.Event],
) -> grpc.RpcMethodHandler[event_pb.SubscribeRequest, bytes]:
    frames = [frame(event.SerializeToString()) for event in events]
    batches = [
        b"".join(frames[start : start + BATCH_EVENTS])
        for start in range(0, len(frames), BATCH_EVENTS)
    ]

    async def subscribe(
        request: event_pb.SubscribeRequest, context: grpc.aio.ServicerContext[object, object]
    ) -> AsyncIterator[bytes]:
        while True:
            for batch in batches:
                yield batch

    return grpc.unary_stream_rpc_method_handler(
        subscribe,
        request_deserializer=event_pb.SubscribeRequest.FromString,
        response_serializer=_identity,
    )


async def serve(kind: str) -> None:
    """Serve `kind` on a free loopback port; print the port; run until killed."""
    events = make_events(SERVER_EVENTS)
    handler = _per_message_handler(events) if kind == "per-message" else _batched_handler(events)
    server = grpc.aio.server()
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(_SERVICE, {_METHOD: handler}),)
    )
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    print(port, flush=True)
    await server.wait_for_termination()


# --- the clients (reusable against the daemon) --------------------------------------------


async def _receive(
    channel: grpc.aio.Channel, target: int, request: event_pb.SubscribeRequest
) -> int:
    call = event_grpc.EventServiceStub(channel).Subscribe(request)
    received = 0
    try:
        async for response in call:
            received += len(response.events)
            if received >= target:
                break
    finally:
        call.cancel()
    return received


READ_TIMEOUT_S = 300.0


async def count_events(
    address: str, subscribers: int, target: int, request: event_pb.SubscribeRequest
) -> float:
    """Subscribe `subscribers` clients (one connection each) to `address` and read until each
    has `target` events (snapshot and control entries count too); return the delivered
    events/s in total. Timed from the first Subscribe call, once every connection is up, to
    the last client reading its last event."""
    channels = [
        grpc.aio.insecure_channel(address, options=_CHANNEL_OPTIONS) for _ in range(subscribers)
    ]
    try:
        await asyncio.gather(*(channel.channel_ready() for channel in channels))
        started = time.perf_counter()
        # Bounded: a stream that is reset instead of replayed would otherwise wait for ever.
        counts = await asyncio.wait_for(
            asyncio.gather(*(_receive(c, target, request) for c in channels)), READ_TIMEOUT_S
        )
        elapsed = time.perf_counter() - started
    finally:
        await asyncio.gather(*(channel.close() for channel in channels))
    if min(counts) < target:
        raise RuntimeError(f"a stream ended after {min(counts)} of {target} events")
    return sum(counts) / elapsed


async def run_baseline(kind: str, events: int, subscribers: int) -> float:
    """Delivered events/s in total when `subscribers` clients each read `events` events from a
    fresh `kind` server (one of KINDS) in a child process."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}")
    server = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--serve", kind, stdout=asyncio.subprocess.PIPE
    )
    try:
        assert server.stdout is not None
        port = int(await server.stdout.readline())
        return await count_events(
            f"127.0.0.1:{port}", subscribers, events, event_pb.SubscribeRequest()
        )
    finally:
        server.terminate()
        await server.wait()


async def main() -> None:
    print(f"{'server':<12} {'subscribers':>11} {'events each':>11} {'events/s total':>15}")
    for kind in KINDS:
        for subscribers in SUBSCRIBER_COUNTS:
            events = EVENTS_PER_SUBSCRIBER[kind][subscribers]
            rate = await run_baseline(kind, events, subscribers)
            print(f"{kind:<12} {subscribers:>11} {events:>11} {rate:>15,.0f}", flush=True)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--serve":
        asyncio.run(serve(sys.argv[2]))
    else:
        asyncio.run(main())
