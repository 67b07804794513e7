"""Prompts sent while a turn runs (docs/design.md#turns): QUEUE waits in FIFO order,
STEER joins the running turn when the provider can, REPLACE cancels then starts with no idle
moment any subscriber could see; REJECT stays busy throughout."""

from __future__ import annotations

import asyncio

import pytest

from corral_server.domain.agent import Errored, Idle, Running
from corral_server.domain.content import Prompt, TextPart
from corral_server.domain.events import AgentUpserted, TurnCanceled, TurnStarted
from corral_server.domain.timeline import UserMessage
from corral_server.errors import (
    AgentBusy,
    AlreadyExists,
    ProviderRefusedInterrupt,
    QueuedPromptNotFound,
    ResourceExhausted,
)
from corral_server.manager.actor_prompts import MAX_QUEUED_PROMPTS
from corral_server.manager.turns import Disposition, IfRunning
from corral_server.providers.base import ProviderTurnCanceled, ProviderTurnCompleted
from tests.unit.manager.harness import TIMEOUTS, World


def text(value: str) -> Prompt:
    return (TextPart(value),)


def lifecycles_since(world: World, agent_id: str, mark: int) -> list[object]:
    return [
        e.agent.lifecycle
        for e in world.publisher.since(mark)
        if isinstance(e, AgentUpserted) and e.agent.id == agent_id
    ]


async def test_a_queued_prompt_waits_then_starts_when_the_turn_ends_with_no_idle_between(
    world: World,
) -> None:
    agent, session = await world.started()
    send = world.manager.send_prompt
    first = await send(agent.id, text("second"), "cm-2", IfRunning.QUEUE)
    second = await send(agent.id, text("third"), "", IfRunning.QUEUE)
    assert (first.disposition, first.turn_id, first.client_message_id) == (
        Disposition.QUEUED,
        "",
        "cm-2",
    )
    assert second.client_message_id.startswith("queued-")
    snapshot = world.manager.get(agent.id)
    assert [q.client_message_id for q in snapshot.queued_prompts] == [
        "cm-2",
        second.client_message_id,
    ]
    assert snapshot.lifecycle == Running("turn-1")  # queuing does not touch the running turn
    mark = world.publisher.mark()
    session.emit(ProviderTurnCompleted("turn-1"))
    await world.drained(agent.id)
    await world.drained(agent.id)
    assert world.manager.get(agent.id).lifecycle == Running("turn-2")
    assert Idle() not in lifecycles_since(world, agent.id, mark)
    assert [q.client_message_id for q in world.manager.get(agent.id).queued_prompts] == [
        second.client_message_id
    ]
    rows = await world.rows(agent.id)
    assert (rows[-1].turn_id, rows[-1].item) == ("turn-2", UserMessage("second", "cm-2", "cm-2"))
    session.emit(ProviderTurnCompleted("turn-2"))
    await world.drained(agent.id)
    await world.drained(agent.id)
    session.emit(ProviderTurnCompleted("turn-3"))
    await world.drained(agent.id)
    final = world.manager.get(agent.id)
    assert final.lifecycle == Idle() and final.queued_prompts == ()
    started = [e.turn_id for e in world.publisher.of_type(TurnStarted)]
    assert started == ["turn-1", "turn-2", "turn-3"]
    assert [p[0] for p in session.prompts] == [
        TextPart("hello"),
        TextPart("second"),
        TextPart("third"),
    ]


async def test_a_prompt_queued_on_an_idle_agent_just_starts(world: World) -> None:
    agent = await world.create()
    started = await world.manager.send_prompt(agent.id, text("hi"), "cm", IfRunning.QUEUE)
    assert started.disposition is Disposition.STARTED and started.turn_id == "turn-1"


async def test_a_queued_prompt_can_be_removed_before_it_starts(world: World) -> None:
    agent, session = await world.started()
    await world.manager.send_prompt(agent.id, text("later"), "cm-2", IfRunning.QUEUE)
    removed = await world.manager.remove_queued(agent.id, "cm-2")
    assert removed.queued_prompts == ()
    with pytest.raises(QueuedPromptNotFound):
        await world.manager.remove_queued(agent.id, "cm-2")
    session.emit(ProviderTurnCompleted("turn-1"))
    await world.drained(agent.id)
    assert world.manager.get(agent.id).lifecycle == Idle()


async def test_the_queue_is_bounded_and_its_ids_unique(world: World) -> None:
    agent, _ = await world.started()
    send = world.manager.send_prompt
    await send(agent.id, text("a"), "same", IfRunning.QUEUE)
    with pytest.raises(AlreadyExists):
        await send(agent.id, text("b"), "same", IfRunning.QUEUE)
    for n in range(MAX_QUEUED_PROMPTS - 1):
        await send(agent.id, text("x"), f"cm-{n}", IfRunning.QUEUE)
    with pytest.raises(ResourceExhausted):
        await send(agent.id, text("one too many"), "", IfRunning.QUEUE)
    assert len(world.manager.get(agent.id).queued_prompts) == MAX_QUEUED_PROMPTS


async def test_closing_an_agent_drops_its_queue(world: World) -> None:
    agent, _ = await world.started()
    await world.manager.send_prompt(agent.id, text("later"), "cm-2", IfRunning.QUEUE)
    closed = await world.manager.close(agent.id)
    assert closed.queued_prompts == ()
    assert world.provider.session.calls.count("start_turn") == 1


async def test_a_steered_prompt_joins_the_running_turn_when_the_provider_can(
    world: World,
) -> None:
    world.provider.can_steer = True
    agent, session = await world.started()
    steered = await world.manager.send_prompt(agent.id, text("also"), "cm-2", IfRunning.STEER)
    assert (steered.disposition, steered.turn_id) == (Disposition.STEERED, "turn-1")
    assert session.steered == [("turn-1", text("also"))]
    rows = await world.rows(agent.id)
    assert (rows[-1].turn_id, rows[-1].item) == ("turn-1", UserMessage("also", "cm-2", "cm-2"))
    assert world.manager.get(agent.id).queued_prompts == ()


async def test_a_steer_the_provider_cannot_take_is_queued_and_says_so(world: World) -> None:
    agent, session = await world.started()
    steered = await world.manager.send_prompt(agent.id, text("also"), "cm-2", IfRunning.STEER)
    assert steered.disposition is Disposition.QUEUED
    assert [q.client_message_id for q in world.manager.get(agent.id).queued_prompts] == ["cm-2"]
    assert "steer" not in session.calls  # can_steer is off: not even asked


async def test_replace_cancels_then_starts_with_no_idle_moment(world: World) -> None:
    agent, session = await world.started()
    session.on_interrupt = [ProviderTurnCanceled("turn-1", "replaced")]
    mark = world.publisher.mark()
    replaced = await world.manager.send_prompt(agent.id, text("instead"), "cm-2", IfRunning.REPLACE)
    assert (replaced.disposition, replaced.turn_id) == (Disposition.REPLACED, "turn-2")
    lifecycles = lifecycles_since(world, agent.id, mark)
    assert Idle() not in lifecycles and lifecycles[-1] == Running("turn-2")
    assert [e.turn_id for e in world.publisher.of_type(TurnCanceled)] == ["turn-1"]


async def test_a_replace_whose_cancel_is_refused_is_abandoned_and_the_turn_goes_on(
    world: World,
) -> None:
    agent, session = await world.started()
    session.interrupt_behaviour = False
    replacing = asyncio.create_task(
        world.manager.send_prompt(agent.id, text("instead"), "cm-2", IfRunning.REPLACE)
    )
    await world.clock.armed_wait(TIMEOUTS.settle_s)
    # During the handoff, a REJECT prompt is busy.
    with pytest.raises(AgentBusy):
        await world.manager.send_prompt(agent.id, text("me too"), "cm-3", IfRunning.REJECT)
    await world.clock.advance(round(TIMEOUTS.settle_s * 1000))
    with pytest.raises(ProviderRefusedInterrupt):
        await replacing
    assert world.manager.get(agent.id).lifecycle == Running("turn-1")
    session.emit(ProviderTurnCompleted("turn-1"))
    await world.drained(agent.id)
    assert world.manager.get(agent.id).lifecycle == Idle()  # the handoff is closed


async def test_a_queued_prompt_that_cannot_start_leaves_the_agent_errored_and_queued(
    world: World,
) -> None:
    agent, session = await world.started()
    await world.manager.send_prompt(agent.id, text("later"), "cm-2", IfRunning.QUEUE)
    session.start_error = RuntimeError("the provider fell over")
    session.emit(ProviderTurnCompleted("turn-1"))
    await world.drained(agent.id)
    await world.drained(agent.id)
    snapshot = world.manager.get(agent.id)
    assert isinstance(snapshot.lifecycle, Errored)
    assert [q.client_message_id for q in snapshot.queued_prompts] == ["cm-2"]
