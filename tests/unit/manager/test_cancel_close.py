"""Cancel outcomes, close, create idempotency and shutdown (docs/design.md#cancel, #lifecycle).

Cancel waits run on the FakeClock (harness.TIMEOUTS: interrupt 1 s, settle 2 s); a test moves
the clock past them and checks the outcome is not decided a millisecond earlier.
"""

from __future__ import annotations

import asyncio

import pytest

from corral_server.domain.agent import Agent, Closed, Idle, Running
from corral_server.domain.events import AgentUpserted, TurnCanceled, TurnCompleted
from corral_server.domain.timeline import AssistantMessage
from corral_server.errors import AgentClosed, AlreadyExists, CorralError, ShuttingDown
from corral_server.manager.turns import CancelOutcome, IfRunning
from corral_server.providers.base import ProviderItem, ProviderTurnCanceled, ProviderTurnCompleted
from tests.unit.manager.harness import INTERRUPT_MS, PROMPT, SETTLE_MS, TIMEOUTS, World

Cancel = asyncio.Task[tuple[CancelOutcome, Agent]]


async def start_cancel(world: World, agent_id: str) -> Cancel:
    """Start a cancel; return once the provider was asked to interrupt."""
    task = asyncio.create_task(world.manager.cancel(agent_id))
    await world.provider.session.interrupt_entered.wait()
    return task


async def cancel_waiting_to_settle(world: World, agent_id: str) -> Cancel:
    """Start a cancel whose interrupt answers at once; return once it waits for the settle."""
    task = await start_cancel(world, agent_id)
    await world.clock.armed_wait(TIMEOUTS.settle_s)
    return task


# --- cancel -------------------------------------------------------------------------------


async def test_cancelling_an_idle_agent_is_not_running_and_never_interrupts(
    world: World,
) -> None:
    agent = await world.create()
    outcome, snapshot = await world.manager.cancel(agent.id)
    assert outcome is CancelOutcome.NOT_RUNNING
    assert snapshot.lifecycle == Idle()
    assert "interrupt" not in world.provider.session.calls


async def test_a_cancel_the_provider_confirms_and_ends_is_settled_at_once(world: World) -> None:
    agent, session = await world.started()
    session.on_interrupt = [ProviderTurnCanceled("turn-1", "user asked")]
    outcome, snapshot = await world.manager.cancel(agent.id)
    assert outcome is CancelOutcome.SETTLED
    assert snapshot.lifecycle == Idle()
    assert world.publisher.of_type(TurnCanceled) == [TurnCanceled(agent.id, "turn-1", "user asked")]


async def test_a_confirmed_interrupt_whose_turn_never_ends_is_force_canceled_after_settle(
    world: World,
) -> None:
    agent, session = await world.started()
    session.interrupt_behaviour = True
    canceling = await cancel_waiting_to_settle(world, agent.id)
    await world.clock.advance(SETTLE_MS - 1)
    assert not canceling.done()
    assert world.publisher.of_type(TurnCanceled) == []
    await world.clock.advance(1)
    outcome, snapshot = await canceling
    assert outcome is CancelOutcome.SETTLED
    assert snapshot.lifecycle == Idle()
    [canceled] = world.publisher.of_type(TurnCanceled)
    assert (canceled.turn_id, canceled.reason) == (
        "turn-1",
        "interrupt confirmed, turn did not end",
    )


async def test_a_refused_interrupt_whose_turn_does_not_end_is_refused_and_keeps_running(
    world: World,
) -> None:
    agent, session = await world.started()
    session.interrupt_behaviour = False
    canceling = await cancel_waiting_to_settle(world, agent.id)
    await world.clock.advance(SETTLE_MS - 1)
    assert not canceling.done()
    await world.clock.advance(1)
    outcome, snapshot = await canceling
    assert outcome is CancelOutcome.REFUSED
    assert snapshot.lifecycle == Running("turn-1")
    assert world.publisher.of_type(TurnCanceled) == []  # never invent a cancel


async def test_a_refused_interrupt_is_settled_when_the_turn_ends_by_itself_in_time(
    world: World,
) -> None:
    agent, session = await world.started()
    session.interrupt_behaviour = False
    canceling = await cancel_waiting_to_settle(world, agent.id)
    session.emit(ProviderTurnCompleted("turn-1"))
    outcome, snapshot = await canceling
    assert outcome is CancelOutcome.SETTLED
    assert snapshot.lifecycle == Idle()
    assert len(world.publisher.of_type(TurnCompleted)) == 1
    assert world.publisher.of_type(TurnCanceled) == []


async def test_a_hanging_interrupt_is_refused_after_both_waits_not_hung(world: World) -> None:
    agent, session = await world.started()
    session.interrupt_behaviour = "hang"
    canceling = await start_cancel(world, agent.id)
    await world.clock.armed_wait(TIMEOUTS.interrupt_s)
    # The hang is outside the agent's single writer: its events are still processed meanwhile.
    session.emit(ProviderItem("turn-1", AssistantMessage("still here")))
    await world.drained(agent.id)
    await world.clock.advance(INTERRUPT_MS - 1)
    assert world.clock.armed.count(TIMEOUTS.settle_s) == 0  # still waiting on the interrupt
    await world.clock.advance(1)
    await world.clock.armed_wait(TIMEOUTS.settle_s)
    await world.clock.advance(SETTLE_MS - 1)
    assert not canceling.done()
    await world.clock.advance(1)
    outcome, snapshot = await canceling
    assert outcome is CancelOutcome.REFUSED
    assert snapshot.lifecycle == Running("turn-1")
    assert world.publisher.of_type(TurnCanceled) == []


async def test_an_interrupt_that_raises_counts_as_unconfirmed_and_is_refused(
    world: World,
) -> None:
    agent, session = await world.started()
    session.interrupt_behaviour = RuntimeError("provider crashed")
    canceling = await cancel_waiting_to_settle(world, agent.id)
    await world.clock.advance(SETTLE_MS)
    outcome, _ = await canceling
    assert outcome is CancelOutcome.REFUSED
    assert world.publisher.of_type(TurnCanceled) == []


# --- close --------------------------------------------------------------------------------


async def test_closing_a_running_agent_cancels_its_turn_then_publishes_the_closed_snapshot(
    world: World,
) -> None:
    agent, session = await world.started()
    session.emit(ProviderItem("turn-1", AssistantMessage("partial")))
    await world.drained(agent.id)
    mark = world.publisher.mark()
    closed = await world.manager.close(agent.id)
    assert closed.lifecycle == Closed(world.clock.now_ms())
    events = world.publisher.since(mark)
    canceled = [i for i, e in enumerate(events) if isinstance(e, TurnCanceled)]
    assert canceled, "a running turn must end with turn_canceled"
    assert events[canceled[0]] == TurnCanceled(agent.id, "turn-1", "agent closed")
    last = events[-1]
    assert isinstance(last, AgentUpserted)
    assert last.agent == closed
    assert canceled[0] < len(events) - 1
    assert session.calls[-1] == "close"
    # The pending assistant row was kept, not lost with the turn.
    assert AssistantMessage("partial") in await world.items(agent.id)


async def test_closing_an_idle_agent_keeps_a_pending_row_reported_outside_any_turn(
    world: World,
) -> None:
    agent = await world.create()
    world.provider.session.emit(ProviderItem("", AssistantMessage("hello from the side")))
    await world.drained(agent.id)
    await world.manager.close(agent.id)
    assert await world.items(agent.id) == [AssistantMessage("hello from the side")]


async def test_a_closed_agent_keeps_its_record_and_refuses_new_prompts(world: World) -> None:
    agent = await world.create()
    await world.manager.close(agent.id)
    assert isinstance(world.manager.get(agent.id).lifecycle, Closed)
    with pytest.raises(AgentClosed):
        await world.manager.send_prompt(agent.id, PROMPT, "", IfRunning.REJECT)


async def test_a_close_whose_session_close_raises_still_publishes_closed_then_raises(
    world: World,
) -> None:
    agent = await world.create()
    world.provider.session.close_error = RuntimeError("socket gone")
    with pytest.raises(CorralError, match="socket gone"):
        await world.manager.close(agent.id)
    last = world.publisher.events[-1]
    assert isinstance(last, AgentUpserted)
    assert isinstance(last.agent.lifecycle, Closed)
    assert isinstance(world.manager.get(agent.id).lifecycle, Closed)


async def test_concurrent_closes_share_one_outcome(world: World) -> None:
    agent = await world.create()
    session = world.provider.session
    gate = session.hold_close()
    first = asyncio.create_task(world.manager.close(agent.id))
    await session.close_entered.wait()
    second = asyncio.create_task(world.manager.close(agent.id))
    await asyncio.sleep(0)
    gate.set()
    a, b = await asyncio.gather(first, second)
    assert a is b
    assert session.calls.count("close") == 1
    closed_upserts = [
        e for e in world.publisher.of_type(AgentUpserted) if isinstance(e.agent.lifecycle, Closed)
    ]
    assert len(closed_upserts) == 1


async def test_concurrent_closes_share_one_failure(world: World) -> None:
    agent = await world.create()
    session = world.provider.session
    session.close_error = RuntimeError("socket gone")
    gate = session.hold_close()
    first = asyncio.create_task(world.manager.close(agent.id))
    await session.close_entered.wait()
    second = asyncio.create_task(world.manager.close(agent.id))
    await asyncio.sleep(0)
    gate.set()
    results = await asyncio.gather(first, second, return_exceptions=True)
    assert all(isinstance(r, CorralError) for r in results)
    assert results[0] is results[1]
    assert session.calls.count("close") == 1


# --- create -------------------------------------------------------------------------------


async def test_a_create_retried_with_the_same_request_id_returns_the_same_agent(
    world: World,
) -> None:
    first = await world.create(request_id="req-1", title="t")
    again = await world.create(request_id="req-1", title="t")
    assert again.id == first.id
    assert len(world.provider.sessions) == 1
    assert [a.id for a in world.manager.directory.snapshot(frozenset())] == [first.id]


async def test_concurrent_creates_with_the_same_request_id_open_one_session(
    world: World,
) -> None:
    gate = world.provider.hold_create()
    first = asyncio.create_task(world.create(request_id="req-1"))
    await world.provider.create_entered.wait()
    second = asyncio.create_task(world.create(request_id="req-1"))
    await asyncio.sleep(0)
    gate.set()
    a, b = await asyncio.gather(first, second)
    assert a.id == b.id
    assert len(world.provider.sessions) == 1


async def test_a_request_id_reused_with_a_different_spec_is_already_exists(
    world: World,
) -> None:
    await world.create(request_id="req-1", title="one")
    with pytest.raises(AlreadyExists):
        await world.create(request_id="req-1", title="two")
    assert len(world.provider.sessions) == 1


async def test_an_initial_prompt_starts_the_first_turn(world: World) -> None:
    agent, turn_id = await world.manager.create(world.spec(initial_prompt=PROMPT))
    assert turn_id == "turn-1"
    assert agent.lifecycle == Running("turn-1")
    assert world.provider.session.prompts == [PROMPT]


# --- shutdown -----------------------------------------------------------------------------


async def test_a_create_after_shutdown_is_refused_before_opening_a_session(world: World) -> None:
    await world.manager.shutdown()
    with pytest.raises(ShuttingDown):
        await world.create()
    assert world.provider.configs == []


async def test_a_create_overtaken_by_shutdown_closes_the_session_it_opened(world: World) -> None:
    gate = world.provider.hold_create()
    creating = asyncio.create_task(world.create())
    await world.provider.create_entered.wait()
    stopping = asyncio.create_task(world.manager.shutdown())
    await asyncio.sleep(0)
    gate.set()
    with pytest.raises(ShuttingDown):
        await creating
    await stopping
    session = world.provider.session
    assert session.closed  # no orphan session
    assert session.calls == ["close"]


async def test_shutdown_closes_every_session_and_keeps_the_records(world: World) -> None:
    a = await world.create()
    b = await world.create()
    await world.manager.shutdown()
    assert all(s.closed for s in world.provider.sessions)
    assert world.manager.get(a.id).lifecycle == Idle()
    assert world.manager.get(b.id).lifecycle == Idle()
