"""The drain on the web port, on the daemon's FakeClock: each web Subscribe ends with
stream_ending (resume point and incarnation) and then the protocol's clean end of stream,
exactly as on gRPC; and the web port stops within the drain."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx2 as httpx
import pytest

from corral.v1 import event_service_pb2 as event_pb
from corral_server.app import Config
from tests.support.daemon import DaemonThread
from tests.support.web import Stream, read_synced, stream_request


@pytest.mark.parametrize("protocol", ["connect", "grpc-web"])
@pytest.mark.parametrize("json_codec", [False, True], ids=["proto", "json"])
async def test_a_drain_ends_each_web_stream_with_stream_ending_then_a_clean_end(
    protocol: str, json_codec: bool
) -> None:
    daemon = DaemonThread(Config(web_listen="127.0.0.1:0", drain_delay_s=5.0)).start()
    assert daemon.daemon is not None
    port = daemon.daemon.web_port
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:
            arguments = stream_request(
                "EventService/Subscribe",
                event_pb.SubscribeRequest(),
                protocol=protocol,
                json_codec=json_codec,
            )
            async with http.stream(**arguments) as response:
                stream = Stream(response, event_pb.SubscribeResponse, json_codec)
                synced = [e for e in await read_synced(stream) if e.HasField("synced")]
                incarnation = synced[0].synced.incarnation
                drained = asyncio.run_coroutine_threadsafe(
                    daemon.daemon.drain(grace_s=5.0), daemon.loop
                )
                await asyncio.to_thread(daemon.clock.wait_for_timer, 5_000)
                await daemon.advance_async(5_000)
                events: list[event_pb.Event] = []
                while (message := await stream.read()) is not None:
                    events.extend(message.events)
                ending = events[-1].stream_ending
                assert events[-1].HasField("stream_ending") and ending.incarnation == incarnation
                assert ending.reason == "server draining"
                assert stream.error() is None  # a clean end: no error in-band
            await asyncio.wait_for(asyncio.wrap_future(drained), 10)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as fresh:
            with pytest.raises(httpx.ConnectError):  # the port is closed
                await fresh.get("/")
    finally:
        daemon.stop()


def test_the_drain_stops_the_web_port_even_with_a_stream_still_reading(tmp_path: Any) -> None:
    daemon = DaemonThread(Config(web_listen="127.0.0.1:0")).start()
    assert daemon.daemon is not None
    port = daemon.daemon.web_port
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:
        arguments = stream_request("EventService/Subscribe", event_pb.SubscribeRequest())
        with http.stream(**arguments) as response:
            assert response.status_code == 200
            daemon.run(daemon.daemon.drain(grace_s=3.0, delay_s=0), timeout=10)
            assert daemon.daemon.web is None
            body = response.read()
        assert body.endswith(b"\x02\x00\x00\x00\x02{}")  # stream_ending, then the end
    daemon.stop()
