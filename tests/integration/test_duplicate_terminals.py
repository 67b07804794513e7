"""Late events of finished turns, through the wire (docs/design.md#turns), on the
scripted provider's `/duplicate-terminal` (the turn's terminal event twice) and
`/replay-turn ID` (once the turn has ended, turn ID's start and completion again: while the
agent is idle, or while the turn `/autonomous` started runs). None of them starts or ends a
turn, also after a restart, when only the durable finished-turn set knows the old turn."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from corral.v1 import agent_service_pb2 as svc_pb
from corral.v1 import turn_service_pb2 as turn_pb
from corral_server.app import Config
from tests.support.client import Stubs, create_request, error_details, prompt_request
from tests.support.daemon import DaemonThread
from tests.support.watch import Watch, idle, is_


async def test_a_duplicate_terminal_is_dropped_and_the_queued_turn_runs_on(
    aio_channel: grpc.aio.Channel, daemon: DaemonThread, tmp_path: Any
) -> None:
    stubs = Stubs.of(aio_channel)
    agent_id = (await stubs.agents.CreateAgent(create_request(str(tmp_path)))).agent.id
    watch = await Watch(stubs, agent_id).synced()
    first = await stubs.turns.SendPrompt(
        prompt_request(agent_id, "/duplicate-terminal", "/sleep 4201", "/reply once")
    )
    queued = await stubs.turns.SendPrompt(
        prompt_request(agent_id, "/sleep 4202", "/reply next", if_running=turn_pb.IF_RUNNING_QUEUE)
    )
    assert queued.disposition == turn_pb.PROMPT_DISPOSITION_QUEUED
    try:
        await asyncio.to_thread(daemon.clock.wait_for_timer, 4201)
        await daemon.advance_async(4201)
        second = await watch.until(
            lambda e: is_("turn_started")(e) and not is_("turn_started", first.turn_id)(e)
        )
        await asyncio.to_thread(daemon.clock.wait_for_timer, 4202)
        # The copy changed nothing: the successor runs, and the first turn ended once.
        agent = (await stubs.agents.GetAgent(svc_pb.GetAgentRequest(agent_id=agent_id))).agent
        assert agent.lifecycle.running.active_turn_id == second.turn_started.turn_id
        await daemon.advance_async(4202)
        await watch.until(is_("attention_required"))
    finally:
        watch.cancel()
    assert watch.terminals() == [
        ("turn_started", first.turn_id),
        ("turn_completed", first.turn_id),
        ("turn_started", second.turn_started.turn_id),
        ("turn_completed", second.turn_started.turn_id),
    ]
    # One FINISHED attention: the agent went idle once.
    assert watch.kinds().count("attention_required") == 1


@pytest.fixture
async def restarted(tmp_path: Path) -> AsyncIterator[tuple[DaemonThread, Stubs, str, str]]:
    """A daemon restarted on the state directory of one that ran a turn to its end: (the
    second daemon, its stubs, the agent, the finished turn's id)."""
    state = tmp_path / "state"
    first = DaemonThread(Config(state_dir=state)).start()
    try:
        async with grpc.aio.insecure_channel(first.address) as channel:
            stubs = Stubs.of(channel)
            agent_id = (await stubs.agents.CreateAgent(create_request(str(tmp_path)))).agent.id
            watch = await Watch(stubs, agent_id).synced()
            old = await stubs.turns.SendPrompt(prompt_request(agent_id, "/reply old"))
            await watch.until(idle)
            watch.cancel()
    finally:
        first.stop()
    second = DaemonThread(Config(state_dir=state)).start()
    try:
        async with grpc.aio.insecure_channel(second.address) as channel:
            yield second, Stubs.of(channel), agent_id, old.turn_id
    finally:
        second.stop()


async def test_a_replayed_finished_turn_never_runs_again_after_a_restart(
    restarted: tuple[DaemonThread, Stubs, str, str],
) -> None:
    _, stubs, agent_id, old = restarted
    watch = await Watch(stubs, agent_id).synced()
    try:
        # Its start and end land while the agent is idle: only the durable set knows `old`.
        replaying = await stubs.turns.SendPrompt(
            prompt_request(agent_id, f"/replay-turn {old}", "/reply now")
        )
        await watch.until(is_("turn_completed", replaying.turn_id))
        later = await stubs.turns.SendPrompt(prompt_request(agent_id, "/reply later"))
        await watch.until(is_("turn_completed", later.turn_id))
    finally:
        watch.cancel()
    assert watch.terminals() == [
        ("turn_started", replaying.turn_id),
        ("turn_completed", replaying.turn_id),
        ("turn_started", later.turn_id),
        ("turn_completed", later.turn_id),
    ]


@pytest.mark.parametrize("option", ["", " no-id"])
async def test_a_replayed_terminal_never_ends_a_provider_turn_after_a_restart(
    restarted: tuple[DaemonThread, Stubs, str, str], option: str
) -> None:
    daemon, stubs, agent_id, old = restarted
    watch = await Watch(stubs, agent_id).synced()
    try:
        # The replay lands while the provider's own turn runs; an id-less one owns events
        # naming any turn (corral's rule 3), but not those of a finished one.
        await stubs.turns.SendPrompt(
            prompt_request(
                agent_id,
                f"/replay-turn {old}",
                f"/autonomous{option}",
                "/sleep 4203",
                "/reply mine",
            )
        )
        await asyncio.to_thread(daemon.clock.wait_for_timer, 4203)
        # On the agent's queue after the replay: the provider's turn still runs.
        with pytest.raises(grpc.aio.AioRpcError) as busy:
            await stubs.turns.SendPrompt(prompt_request(agent_id, "/reply not now"))
        assert error_details(busy.value).reason == "AGENT_BUSY"
        agent = (await stubs.agents.GetAgent(svc_pb.GetAgentRequest(agent_id=agent_id))).agent
        assert agent.lifecycle.WhichOneof("state") == "running"
        await daemon.advance_async(4203)
        ended = await watch.until(is_("turn_completed"))
        ended = await watch.until(is_("turn_completed"))
        await watch.until(idle)
    finally:
        watch.cancel()
    auto = ended.turn_completed.turn_id
    assert [t for t in watch.terminals() if old in t] == []
    assert watch.terminals()[-2:] == [("turn_started", auto), ("turn_completed", auto)]
    assert auto.startswith("auto-") if not option else auto == ""
