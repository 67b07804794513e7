"""Durable by default (docs/design.md#resume): with a state directory, agents and timelines live in
SQLite and come back after a restart: every agent listed with its last state, its timeline with
the same epoch and seqs, new turns continuing the seqs; a turn that was running ends with
"interrupted by a daemon restart". Daemons run in this process on the FakeClock, one after the
other on the same directory."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import grpc
import pytest

from corral.v1 import agent_service_pb2 as svc_pb
from corral.v1 import timeline_service_pb2 as tl_pb
from corral.v1 import turn_service_pb2 as turn_pb
from corral_server.app import Config
from corral_server.store.errors import StoreUnavailable
from tests.support.client import Stubs, create_request, prompt_request, text
from tests.support.daemon import DaemonThread


def daemon_on(state_dir: Path) -> DaemonThread:
    return DaemonThread(Config(state_dir=state_dir)).start()


async def rows_of(stubs: Stubs, agent_id: str) -> Any:
    return await stubs.timeline.FetchTimeline(
        tl_pb.FetchTimelineRequest(agent_id=agent_id, limit=0)
    )


async def test_agents_and_timelines_survive_a_restart(tmp_path: Path) -> None:
    state, cwd = tmp_path / "state", tmp_path
    first = daemon_on(state)
    try:
        async with grpc.aio.insecure_channel(first.address) as channel:
            stubs = Stubs.of(channel)
            agent = (await stubs.agents.CreateAgent(create_request(str(cwd), title="kept"))).agent
            call = stubs.turns.StreamTurn(
                turn_pb.StreamTurnRequest(agent_id=agent.id, content=text("hello"))
            )
            _ = [e async for e in call]
            before = await rows_of(stubs, agent.id)
    finally:
        first.stop()
    second = daemon_on(state)
    try:
        async with grpc.aio.insecure_channel(second.address) as channel:
            stubs = Stubs.of(channel)
            listed = (await stubs.agents.ListAgents(svc_pb.ListAgentsRequest())).agents
            assert [a.id for a in listed] == [agent.id]
            restored = listed[0]
            assert restored.title == "kept" and restored.lifecycle.WhichOneof("state") == "idle"
            after = await rows_of(stubs, agent.id)
            assert after.epoch == before.epoch and list(after.rows) == list(before.rows)
            # A new turn opens a session lazily and continues the seqs.
            call = stubs.turns.StreamTurn(
                turn_pb.StreamTurnRequest(agent_id=agent.id, content=text("again"))
            )
            events = [e async for e in call]
            assert events[-1].WhichOneof("event") == "turn_completed"
            seqs = [r.seq for r in (await rows_of(stubs, agent.id)).rows]
            assert seqs == list(range(1, len(seqs) + 1)) and len(seqs) > len(before.rows)
    finally:
        second.stop()


async def test_a_turn_running_at_shutdown_ends_with_a_clear_error_after_the_restart(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    first = daemon_on(state)
    try:
        async with grpc.aio.insecure_channel(first.address) as channel:
            stubs = Stubs.of(channel)
            agent_id = (await stubs.agents.CreateAgent(create_request(str(tmp_path)))).agent.id
            started = await stubs.turns.SendPrompt(prompt_request(agent_id, "/sleep 600000"))
            await asyncio.to_thread(first.clock.wait_for_timer, 600_000)
    finally:
        first.stop()  # the turn never ends on this daemon
    second = daemon_on(state)
    try:
        async with grpc.aio.insecure_channel(second.address) as channel:
            stubs = Stubs.of(channel)
            agent = (await stubs.agents.GetAgent(svc_pb.GetAgentRequest(agent_id=agent_id))).agent
            assert agent.lifecycle.WhichOneof("state") == "idle"
            assert agent.last_error.code == "DAEMON_RESTARTED"
            last = (await rows_of(stubs, agent_id)).rows[-1]
            assert last.turn_id == started.turn_id
            assert (last.item.error.code, last.item.error.message) == (
                "DAEMON_RESTARTED",
                "interrupted by a daemon restart",
            )
    finally:
        second.stop()


async def test_a_second_daemon_on_a_used_state_directory_is_refused(tmp_path: Path) -> None:
    first = daemon_on(tmp_path / "state")
    second = DaemonThread(Config(state_dir=tmp_path / "state"))
    try:
        with pytest.raises(StoreUnavailable, match="another corral daemon"):
            second.start()
    finally:
        second.stop()
        first.stop()


async def test_a_create_retried_after_a_restart_returns_the_same_agent(tmp_path: Path) -> None:
    state = tmp_path / "state"
    request = create_request(str(tmp_path), request_id="req-1", title="once")
    first = daemon_on(state)
    try:
        async with grpc.aio.insecure_channel(first.address) as channel:
            created = (await Stubs.of(channel).agents.CreateAgent(request)).agent
    finally:
        first.stop()
    second = daemon_on(state)
    try:
        async with grpc.aio.insecure_channel(second.address) as channel:
            stubs = Stubs.of(channel)
            again = (await stubs.agents.CreateAgent(request)).agent
            assert again.id == created.id
            listed = (await stubs.agents.ListAgents(svc_pb.ListAgentsRequest())).agents
            assert [a.id for a in listed] == [created.id]
            other = create_request(str(tmp_path), request_id="req-1", title="another")
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                await stubs.agents.CreateAgent(other)
            assert raised.value.code() == grpc.StatusCode.ALREADY_EXISTS
    finally:
        second.stop()
