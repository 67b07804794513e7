"""ReloadAgent (docs/design.md#resume): a new provider session under the same agent id; the
timeline and its epoch stay unless rehydrating, which re-bases it under a new epoch."""

from __future__ import annotations

import asyncio

import pytest

from corral_server.domain.agent import Closed, Idle, Running
from corral_server.domain.events import TimelineReset, TurnCanceled
from corral_server.domain.timeline import Cursor, Direction
from corral_server.errors import AgentClosed, ProviderRefusedInterrupt
from corral_server.manager.turns import IfRunning
from corral_server.providers.base import ProviderTurnCanceled, ProviderTurnCompleted
from tests.unit.manager.harness import PROMPT, TIMEOUTS, World


async def finished_turn(world: World) -> str:
    agent, session = await world.started()
    session.emit(ProviderTurnCompleted("turn-1"))
    await world.drained(agent.id)
    return agent.id


async def test_a_reload_opens_a_new_session_and_keeps_the_timeline_and_its_epoch(
    world: World,
) -> None:
    agent_id = await finished_turn(world)
    before = world.manager.get(agent_id)
    rows = await world.rows(agent_id)
    reloaded = await world.manager.reload(agent_id, rehydrate=False)
    old, new = world.provider.sessions
    assert old.closed and not new.closed
    assert reloaded.provider_session_id == new.session_id != before.provider_session_id
    assert reloaded.lifecycle == Idle()
    assert reloaded.epoch == before.epoch
    assert await world.rows(agent_id) == rows
    assert world.publisher.of_type(TimelineReset) == []
    await world.manager.send_prompt(agent_id, PROMPT, "cm-2", IfRunning.REJECT)
    assert world.manager.get(agent_id).lifecycle == Running("turn-1")  # the new session's


async def test_a_rehydrating_reload_mints_a_new_epoch_and_old_cursors_go_stale(
    world: World,
) -> None:
    agent_id = await finished_turn(world)
    old_epoch = world.manager.get(agent_id).epoch
    reloaded = await world.manager.reload(agent_id, rehydrate=True)
    assert reloaded.epoch != old_epoch and reloaded.next_seq == 1
    assert world.publisher.of_type(TimelineReset) == [
        TimelineReset(agent_id, reloaded.epoch, "reloaded from the provider's history")
    ]
    page = await world.manager.reads.fetch_timeline(
        agent_id, Direction.AFTER, Cursor(old_epoch, 1), None
    )
    assert page.stale_cursor and page.reset and page.epoch == reloaded.epoch


async def test_a_reload_cancels_the_running_turn_first(world: World) -> None:
    agent, session = await world.started()
    session.on_interrupt = [ProviderTurnCanceled("turn-1", "reload")]
    reloaded = await world.manager.reload(agent.id, rehydrate=False)
    assert reloaded.lifecycle == Idle()
    assert [e.turn_id for e in world.publisher.of_type(TurnCanceled)] == ["turn-1"]
    assert session.closed


async def test_a_reload_whose_turn_the_provider_refuses_to_stop_is_abandoned(
    world: World,
) -> None:
    agent, session = await world.started()
    session.interrupt_behaviour = False
    reloading = asyncio.create_task(world.manager.reload(agent.id, rehydrate=False))
    await world.clock.armed_wait(TIMEOUTS.settle_s)
    await world.clock.advance(round(TIMEOUTS.settle_s * 1000))
    with pytest.raises(ProviderRefusedInterrupt):
        await reloading
    assert world.manager.get(agent.id).lifecycle == Running("turn-1")
    assert not session.closed and len(world.provider.sessions) == 1


async def test_a_reload_whose_new_session_fails_leaves_the_agent_errored_and_says_why(
    world: World,
) -> None:
    agent_id = await finished_turn(world)
    world.provider.create_error = RuntimeError("no such binary")
    with pytest.raises(RuntimeError):
        await world.manager.reload(agent_id, rehydrate=False)
    # A failed writer step: the agent says so instead of looking idle.
    assert world.manager.get(agent_id).lifecycle.__class__.__name__ == "Errored"


async def test_a_closed_agent_cannot_be_reloaded(world: World) -> None:
    agent = await world.create()
    await world.manager.close(agent.id)
    with pytest.raises(AgentClosed):
        await world.manager.reload(agent.id, rehydrate=False)
    assert isinstance(world.manager.get(agent.id).lifecycle, Closed)
