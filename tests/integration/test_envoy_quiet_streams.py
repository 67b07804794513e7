"""A quiet Subscribe through the shipped Envoy configurations stays open: Envoy pings every
upstream connection (`connection_keepalive`), and a node must take those pings while its
streams send nothing, else it ends the connection with GOAWAY "too many pings" and every call
Envoy carried on it fails with UNAVAILABLE. gRPC counts a ping as abuse when it comes sooner
than its minimum interval (five minutes by default) after the last one with no data sent
between, so any interval under that shows it (the third such ping ends the connection); the
files' 10 s becomes 2 s here to show it in seconds rather than half a minute."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import grpc
import pytest

from corral.v1 import event_service_pb2 as event_pb
from corral_server.app import Config
from tests.support.client import Stubs, next_message
from tests.support.cluster_nodes import ENVOY_CONFIG as CLUSTER
from tests.support.cluster_nodes import envoy_on_loopback
from tests.support.daemon import DaemonThread
from tests.support.envoy import CONFIG, envoy_running, running_envoy
from tests.support.nats import poll

KEEPALIVE = "connection_keepalive: {interval: 10s, timeout: 5s}"
QUIET_S = 9.0  # four pings two seconds apart: the last three strike under gRPC's defaults


def accepting(address: str) -> bool | None:
    """Whether Envoy's listener takes connections yet (it is listed before it is warm)."""
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=1).close()
    except OSError:
        return None
    return True


def pinging_faster(text: str) -> str:
    assert KEEPALIVE in text, "the keepalive the test speeds up"
    return text.replace(KEEPALIVE, "connection_keepalive: {interval: 2s, timeout: 5s}")


async def quiet_for(listener: str, seconds: float) -> None:
    """A Subscribe through Envoy that receives its snapshot, then nothing for `seconds`: it
    must still be open (no status) at the end."""
    async with grpc.aio.insecure_channel(listener) as channel:
        call = Stubs.of(channel).events.Subscribe(event_pb.SubscribeRequest())
        while not any(e.HasField("synced") for e in (await next_message(call)).events):
            pass
        with pytest.raises(TimeoutError):  # nothing came, and the stream did not end
            await asyncio.wait_for(call.read(), seconds)
        call.cancel()


@pytest.mark.parametrize("shipped", ["deploy/envoy.yaml", "deploy/cluster/envoy.yaml"])
async def test_a_quiet_subscribe_through_envoy_outlasts_its_pings(
    shipped: str, tmp_path: Path
) -> None:
    daemon = DaemonThread(Config()).start()
    try:
        if shipped == "deploy/envoy.yaml":
            faster = tmp_path / "faster.yaml"
            faster.write_text(pinging_faster(CONFIG.read_text()))
            running = running_envoy(tmp_path, daemon.port, daemon.port, faster)
        else:
            ports = [daemon.port] * 3
            text = envoy_on_loopback(ports, ports, pinging_faster(CLUSTER.read_text()))
            running = envoy_running(tmp_path, text)
        with running as envoy:
            await envoy.until_health(daemon.port, "healthy")  # then its listener takes calls
            listener = envoy.listening("corral_grpc")
            await asyncio.to_thread(poll, lambda: accepting(listener), f"{listener} accepting")
            await quiet_for(listener, QUIET_S)
    finally:
        daemon.stop()
