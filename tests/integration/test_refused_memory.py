"""A refused request costs nothing once it is answered: `corral serve` returns near its idle
size within seconds after 20 ClearAttention requests of 5.4 MB (2.7 M empty ids) each answered
INVALID_ARGUMENT. The daemon's resident size is read from /proc/PID/status (VmRSS), with a
generous threshold; before the fix it stayed at about 2.2 GB for good."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from corral.v1 import agent_service_pb2 as agent_pb
from tests.support.client import Stubs, error_details
from tests.support.daemon import DaemonProcess
from tests.support.memory import rss_mb

REQUESTS = 20
IDS = 2_700_000


@pytest.fixture
def served(tmp_path: Path) -> Iterator[DaemonProcess]:
    proc = DaemonProcess(tmp_path / "state", "--drain-delay-s", "0").start()
    try:
        yield proc
    finally:
        proc.stop()


def test_refused_huge_requests_leave_no_memory_behind(served: DaemonProcess) -> None:
    assert served.proc is not None
    pid = served.proc.pid
    options = [("grpc.max_send_message_length", 64 << 20)]
    with grpc.insecure_channel(served.address, options=options) as channel:
        stubs = Stubs.of(channel)
        stubs.agents.ListAgents(agent_pb.ListAgentsRequest())
        idle = rss_mb(pid)
        body = agent_pb.ClearAttentionRequest(agent_ids=[""] * IDS).SerializeToString()
        assert len(body) > 5_000_000
        clear = channel.unary_unary(
            "/corral.v1.AgentService/ClearAttention",
            request_serializer=bytes,
            response_deserializer=agent_pb.ClearAttentionResponse.FromString,
        )
        for _ in range(REQUESTS):
            with pytest.raises(grpc.RpcError) as refused:
                clear(body)
            assert error_details(refused.value).code is grpc.StatusCode.INVALID_ARGUMENT
        del body
        # Within seconds the daemon is back near its idle size (measured: 59 MB against 58
        # idle; 2.2 GB before the fix): poll until it is, or the deadline passes.
        limit = max(idle * 1.5, idle + 40)
        deadline = time.monotonic() + 10
        now = rss_mb(pid)
        while now > limit and time.monotonic() < deadline:
            stubs.agents.ListAgents(agent_pb.ListAgentsRequest(), timeout=5)
            now = rss_mb(pid)
        assert now <= limit, f"{now:.0f} MB resident after the refusals, idle {idle:.0f} MB"
        # Still serving.
        stubs.agents.ListAgents(agent_pb.ListAgentsRequest(), timeout=5)
