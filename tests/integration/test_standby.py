"""Hot standby: `corral serve --standby` on a state directory another
daemon holds answers health NOT_SERVING and every other call UNAVAILABLE/STANDBY; when the
holder stops, it takes the lock, loads the stored agents and turns SERVING on the same port."""

from __future__ import annotations

import re
import signal
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2

from corral.v1 import agent_service_pb2 as svc_pb
from corral_cli.health import health_stub
from tests.support.client import Stubs, create_request, error_details
from tests.support.daemon import DaemonProcess

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def address_in(line: str, what: str) -> str:
    match = re.search(rf"corral {what} (?:on )?(\S+):(\d+)", line)
    assert match is not None, line
    return f"127.0.0.1:{match.group(2)}"


async def test_a_standby_waits_not_serving_then_takes_over_with_the_stored_agents(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    serving = DaemonProcess(state, "--drain-delay-s", "0").start()
    standby = DaemonProcess(state, "--standby").start(expect_ready=False)
    try:
        async with grpc.aio.insecure_channel(serving.address) as channel:
            created = await Stubs.of(channel).agents.CreateAgent(create_request(str(tmp_path)))
        assert standby.proc is not None and standby.proc.stdout is not None
        waiting = address_in(standby.proc.stdout.readline(), "standby")
        async with grpc.aio.insecure_channel(waiting) as channel:
            health = health_stub(channel)
            for service in ("", "corral.v1.AgentService"):
                reply = await health.Check(health_pb2.HealthCheckRequest(service=service))
                assert reply.status == NOT_SERVING
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                await Stubs.of(channel).agents.ListAgents(svc_pb.ListAgentsRequest())
            details = error_details(raised.value)
            assert (details.code, details.reason) == (grpc.StatusCode.UNAVAILABLE, "STANDBY")
        assert serving.proc is not None
        serving.proc.send_signal(signal.SIGTERM)
        assert serving.wait(30)[0] == 0
        took_over = address_in(standby.proc.stdout.readline(), "listening")  # blocks until then
        assert took_over == waiting  # the same port: a balancer needs no new backend
        async with grpc.aio.insecure_channel(took_over) as channel:
            reply = await health_stub(channel).Check(health_pb2.HealthCheckRequest(service=""))
            assert reply.status == SERVING
            listed = await Stubs.of(channel).agents.ListAgents(svc_pb.ListAgentsRequest())
            assert [a.id for a in listed.agents] == [created.agent.id]
    finally:
        serving.stop()
        standby.stop()


async def test_a_standby_stopped_while_waiting_exits_cleanly(tmp_path: Path) -> None:
    state = tmp_path / "state"
    serving = DaemonProcess(state).start()
    standby = DaemonProcess(state, "--standby").start(expect_ready=False)
    try:
        assert standby.proc is not None and standby.proc.stdout is not None
        address_in(standby.proc.stdout.readline(), "standby")
        standby.proc.send_signal(signal.SIGTERM)
        code, _, _ = standby.wait(30)
        assert code == 0
    finally:
        serving.stop()
        standby.stop()
