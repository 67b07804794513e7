"""What streams and connections may hold, through the wire against a daemon in this process
(its FakeClock drives the stall deadline): the stream and connection caps refuse clearly, and
a raw HTTP/2 client that stops reading is ended with stream_ending naming its resume point,
while a reader on the same daemon gets everything."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from corral.v1 import event_service_pb2 as event_pb
from corral.v1 import turn_service_pb2 as turn_pb
from corral_server.app import Config
from tests.support.client import Stubs, create_request, error_details, text
from tests.support.daemon import DaemonProcess, DaemonThread
from tests.support.raw_h2 import NeverReadingClient

LOCAL_POOL = [("grpc.use_local_subchannel_pool", 1)]
STALL_S = 30.0


@pytest.fixture
def capped() -> Iterator[DaemonThread]:
    daemon = DaemonThread(Config(max_connections=2, max_streams=3, stream_stall_s=STALL_S))
    daemon.start()
    yield daemon
    daemon.stop()


async def synced(call: Any) -> None:
    while True:
        response = await call.read()
        assert response is not grpc.aio.EOF
        if any(event.HasField("synced") for event in response.events):
            return


def channel(address: str) -> grpc.aio.Channel:
    # Its own subchannel pool: channels with equal arguments would share one connection.
    return grpc.aio.insecure_channel(address, options=LOCAL_POOL)


async def test_a_call_on_one_connection_more_than_the_limit_is_refused_clearly(
    capped: DaemonThread,
) -> None:
    async with channel(capped.address) as one, channel(capped.address) as two:
        held = [Stubs.of(c).events.Subscribe(event_pb.SubscribeRequest()) for c in (one, two)]
        for call in held:
            await synced(call)
        async with channel(capped.address) as three:
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await Stubs.of(three).turns.WaitForIdle(
                    turn_pb.WaitForIdleRequest(agent_id="x"), timeout=10
                )
            details = error_details(refused.value)
            assert details.code is grpc.StatusCode.RESOURCE_EXHAUSTED
            assert details.reason == "STREAM_LIMIT"
            assert "--max-connections" in details.message
            # Once a connection has no call open, the third one is served.
            held[0].cancel()
            deadline = asyncio.get_running_loop().time() + 10
            while True:
                try:
                    await Stubs.of(three).turns.WaitForIdle(
                        turn_pb.WaitForIdleRequest(agent_id="x"), timeout=10
                    )
                except grpc.aio.AioRpcError as error:
                    if error_details(error).reason != "STREAM_LIMIT":
                        break  # answered (the agent is unknown): served
                assert asyncio.get_running_loop().time() < deadline
        held[1].cancel()


async def test_a_stream_over_the_daemons_total_is_refused_clearly(capped: DaemonThread) -> None:
    async with channel(capped.address) as one:
        stubs = Stubs.of(one)
        held = [stubs.events.Subscribe(event_pb.SubscribeRequest()) for _ in range(3)]
        for call in held:
            await synced(call)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await synced(stubs.events.Subscribe(event_pb.SubscribeRequest(), timeout=10))
        details = error_details(refused.value)
        assert details.code is grpc.StatusCode.RESOURCE_EXHAUSTED
        assert details.reason == "STREAM_LIMIT" and "--max-streams" in details.message
        held[0].cancel()
        deadline = asyncio.get_running_loop().time() + 10
        while True:
            try:
                again = stubs.events.Subscribe(event_pb.SubscribeRequest(), timeout=10)
                await synced(again)
                break
            except grpc.aio.AioRpcError as error:
                assert error_details(error).reason == "STREAM_LIMIT"
                assert asyncio.get_running_loop().time() < deadline
        for call in (*held[1:], again):
            call.cancel()


def test_a_client_that_stops_reading_is_ended_with_its_resume_point(tmp_path: Any) -> None:
    daemon = DaemonThread(Config(stream_stall_s=STALL_S)).start()
    try:
        with grpc.insecure_channel(daemon.address) as chan:
            stubs = Stubs.of(chan)
            agent = stubs.agents.CreateAgent(create_request(str(tmp_path))).agent
            hostile = NeverReadingClient(daemon.address, 20)
            reader = stubs.events.Subscribe(event_pb.SubscribeRequest())
            read_until_synced(reader)
            assert daemon.daemon is not None
            streams = daemon.daemon.streams
            deadline = time.monotonic() + 10
            while streams.open_streams < 21:  # every hostile stream subscribed
                assert time.monotonic() < deadline
                time.sleep(0.01)
            # 20 rows of ~40 kB: far past the 64 KiB window the hostile streams ever grant.
            think = "/think " + "x" * 40_000
            stubs.turns.SendPrompt(
                turn_pb.SendPromptRequest(agent_id=agent.id, content=text(*[think] * 20))
            )
            stubs.turns.WaitForIdle(turn_pb.WaitForIdleRequest(agent_id=agent.id), timeout=30)
            head = reader_head(reader)
            # Every hostile stream has a write pending; past the stall deadline each is ended.
            daemon.advance(int(STALL_S * 1000) + 1_000)
            assert streams.stalls == 20
            results = hostile.read_all(30)
            for result in results.values():
                endings = [
                    event.stream_ending
                    for message in result.messages()
                    for event in message.events
                    if event.HasField("stream_ending")
                ]
                assert len(endings) == 1, "each stalled stream ends with one stream_ending"
                assert 0 < endings[0].resume_revision <= head
                assert endings[0].incarnation
                assert result.trailers.get("grpc-status") == "0"
            hostile.close()
            assert streams.open_streams == 1  # the reader's
            reader.cancel()
    finally:
        daemon.stop()


def read_until_synced(reader: Any) -> None:
    for response in reader:
        if any(event.HasField("synced") for event in response.events):
            return


def reader_head(reader: Any) -> int:
    """Read the normal subscriber until the turn's completion: everything arrives in order,
    without a gap; returns the last revision."""
    revisions: list[int] = []
    for response in reader:
        for event in response.events:
            if event.revision:
                revisions.append(event.revision)
            if event.HasField("turn_completed"):
                assert revisions == list(range(revisions[0], revisions[0] + len(revisions)))
                return revisions[-1]
    raise AssertionError("the reader's stream ended before the turn completed")


@pytest.mark.parametrize(
    "flag", ["--max-connections", "--max-streams", "--streams-total-bytes", "--stream-stall-s"]
)
def test_a_bound_that_is_not_positive_stops_the_start_clearly(tmp_path: Any, flag: str) -> None:
    proc = DaemonProcess(tmp_path / "state", flag, "0").start(expect_ready=False)
    code, _, err = proc.wait()
    assert code == 2
    assert "cannot start" in err and "must be positive" in err
