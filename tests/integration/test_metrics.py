"""Prometheus metrics (issue 10, item 5): scraped over HTTP from a real daemon while turns
run, the counters move."""

from __future__ import annotations

import asyncio
import re
import urllib.request
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from corral.v1 import agent_service_pb2 as svc_pb
from corral.v1 import turn_service_pb2 as turn_pb
from corral_server.app import Config
from tests.support.client import Stubs, create_request, text
from tests.support.daemon import DaemonThread


@pytest.fixture
def measured() -> Iterator[DaemonThread]:
    daemon = DaemonThread(Config(metrics_listen="127.0.0.1:0")).start()
    yield daemon
    daemon.stop()


def scrape(daemon: DaemonThread) -> dict[str, float]:
    assert daemon.daemon is not None
    url = f"http://127.0.0.1:{daemon.daemon.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as reply:
        body = reply.read().decode()
    values: dict[str, float] = {}
    for line in body.splitlines():
        match = re.fullmatch(r"(corral_[a-z_]+(?:\{[^}]*\})?) (\S+)", line)
        if match:
            values[match.group(1)] = float(match.group(2))
    return values


async def test_the_counters_move_while_turns_run(measured: DaemonThread, tmp_path: Any) -> None:
    before = await asyncio.to_thread(scrape, measured)
    async with grpc.aio.insecure_channel(measured.address) as channel:
        stubs = Stubs.of(channel)
        agent_id = (await stubs.agents.CreateAgent(create_request(str(tmp_path)))).agent.id
        for prompt in ("hello", "/fail broken"):
            call = stubs.turns.StreamTurn(
                turn_pb.StreamTurnRequest(agent_id=agent_id, content=text(prompt))
            )
            _ = [e async for e in call]
        with pytest.raises(grpc.aio.AioRpcError):
            await stubs.agents.GetAgent(svc_pb.GetAgentRequest(agent_id="f" * 32))
    after = await asyncio.to_thread(scrape, measured)
    assert after['corral_turns_total{outcome="started"}'] == (
        before['corral_turns_total{outcome="started"}'] + 2
    )
    assert after['corral_turns_total{outcome="completed"}'] >= 1
    assert after['corral_turns_total{outcome="failed"}'] >= 1
    assert after["corral_events_total"] > before["corral_events_total"]
    assert after["corral_timeline_rows"] >= before["corral_timeline_rows"] + 4
    assert after['corral_agents{state="errored"}'] >= 1
    assert after.get('corral_rpc_errors_total{code="NOT_FOUND"}', 0) >= 1
