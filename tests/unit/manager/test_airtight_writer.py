"""The single writer holds (docs/design.md#durability): provider calls fenced by turn id and
bounded by deadlines on the FakeClock, shutdown through the queue, a failed writer step ends
its turn instead of leaving the agent running, and nothing stored goes unpublished."""

from __future__ import annotations

import asyncio
import gc
from typing import Any

import pytest

from corral_server.clock import FakeClock
from corral_server.domain.agent import AgentError, Closed, Errored, Idle, Running
from corral_server.domain.events import (
    AgentUpserted,
    Event,
    RowAppended,
    TurnCanceled,
    TurnCompleted,
    TurnFailed,
    TurnStarted,
)
from corral_server.domain.timeline import AssistantMessage, ErrorItem, Reasoning
from corral_server.errors import ProviderTimeout, ShuttingDown
from corral_server.manager.deadlines import CallTimes, deadline, within
from corral_server.manager.oversize import MAX_CODE_BYTES, MAX_ERROR_BYTES
from corral_server.manager.specs import AgentUpdate, ListQuery
from corral_server.manager.turns import CancelOutcome, IfRunning, WaitStatus
from corral_server.providers.base import (
    InterruptResult,
    ProviderItem,
    ProviderTurnCompleted,
    ProviderTurnFailed,
)
from tests.unit.manager.harness import PROMPT, TIMEOUTS, World, until

START_MS = round(TIMEOUTS.start_turn_s * 1000)
CLOSE_MS = round(TIMEOUTS.close_s * 1000)
CREATE_MS = round(TIMEOUTS.create_session_s * 1000)
SHUTDOWN_MS = round(TIMEOUTS.shutdown_s * 1000)


def published_rows(world: World, agent_id: str) -> list[tuple[int, object]]:
    return [
        (e.row.seq, e.row.item)
        for e in world.publisher.events
        if isinstance(e, RowAppended) and e.agent_id == agent_id
    ]


async def stored_rows(world: World, agent_id: str) -> list[tuple[int, object]]:
    return [(row.seq, row.item) for row in await world.rows(agent_id)]


# --- 1. the single writer is really single --------------------------------------------------------


async def test_a_cancel_whose_turn_ends_before_the_interrupt_lands_never_cancels_the_next_turn(
    world: World,
) -> None:
    agent, session = await world.started()
    gate = session.hold_interrupt()
    cancel = asyncio.create_task(world.manager.cancel(agent.id))
    await session.interrupt_entered.wait()  # the interrupt for turn-1 is in flight
    # Meanwhile turn-1 ends by itself and another client starts turn-2.
    session.emit(ProviderTurnCompleted("turn-1"))
    await world.drained(agent.id)
    await world.manager.send_prompt(agent.id, PROMPT, "cm-2", IfRunning.REJECT)
    gate.set()
    outcome, _ = await cancel
    assert outcome is CancelOutcome.NOT_RUNNING
    assert session.interrupted == ["turn-1"]
    assert world.manager.get(agent.id).lifecycle == Running("turn-2")
    assert world.publisher.of_type(TurnCanceled) == []


async def test_an_interrupt_for_a_turn_that_already_ended_never_reaches_the_provider(
    world: World,
) -> None:
    agent, session = await world.started()
    actor = world.manager.directory.actors[agent.id]
    session.emit(ProviderTurnCompleted("turn-1"))
    await world.drained(agent.id)
    await world.manager.send_prompt(agent.id, PROMPT, "cm-2", IfRunning.REJECT)
    assert await actor.interrupt("turn-1") is InterruptResult.NOT_RUNNING
    assert session.interrupted == []


async def test_a_prompt_queued_behind_a_slow_start_is_refused_at_shutdown_not_acknowledged(
    world: World,
) -> None:
    agent = await world.create()
    session = world.provider.session
    gate = session.hold_start()
    first = asyncio.create_task(
        world.manager.send_prompt(agent.id, PROMPT, "cm-1", IfRunning.REJECT)
    )
    await session.start_entered.wait()
    second = asyncio.create_task(
        world.manager.send_prompt(agent.id, PROMPT, "cm-2", IfRunning.REJECT)
    )
    await asyncio.sleep(0)
    world.manager.refuse_new_work()
    stopping = asyncio.create_task(world.manager.shutdown())
    await asyncio.sleep(0)
    assert not session.closed  # the session is not closed under the running start_turn
    gate.set()
    await first  # it was accepted before the drain: it completes
    with pytest.raises(ShuttingDown):
        await second
    await stopping
    assert session.calls == ["start_turn", "close"]


async def test_shutdown_is_bounded_when_a_provider_hangs_on_close(world: World) -> None:
    await world.create()
    world.provider.session.hold_close()  # never released
    other = await world.create()
    stopping = asyncio.create_task(world.manager.shutdown())
    await world.clock.armed_wait(TIMEOUTS.close_s)
    await world.clock.advance(CLOSE_MS)
    await asyncio.wait_for(stopping, 5)  # a guard, not synchronisation
    assert world.manager.get(other.id).lifecycle == Idle()


async def test_shutdown_stops_an_actor_stuck_past_the_shutdown_deadline(world: World) -> None:
    agent = await world.create()
    session = world.provider.session
    session.hold_start()  # never released: start_turn hangs until its own deadline
    sending = asyncio.create_task(
        world.manager.send_prompt(agent.id, PROMPT, "cm-1", IfRunning.REJECT)
    )
    await session.start_entered.wait()
    stopping = asyncio.create_task(world.manager.shutdown())
    await world.clock.armed_wait(TIMEOUTS.shutdown_s)
    await world.clock.advance(SHUTDOWN_MS)  # past shutdown_s (shorter than start_turn_s)
    await asyncio.wait_for(stopping, 5)
    with pytest.raises(Exception) as raised:
        await sending
    assert type(raised.value).__name__ in ("AgentClosed", "ProviderTimeout")


async def test_a_start_turn_that_hangs_errors_the_agent_and_answers_provider_timeout(
    world: World,
) -> None:
    agent = await world.create()
    other = await world.create()
    world.provider.sessions[0].hold_start()  # never released
    sending = asyncio.create_task(
        world.manager.send_prompt(agent.id, PROMPT, "cm-1", IfRunning.REJECT)
    )
    await world.clock.armed_wait(TIMEOUTS.start_turn_s)
    # The hung agent blocks nobody else.
    await world.manager.send_prompt(other.id, PROMPT, "cm-x", IfRunning.REJECT)
    await world.clock.advance(START_MS - 1)
    assert not sending.done()
    await world.clock.advance(1)
    with pytest.raises(ProviderTimeout):
        await sending
    lifecycle = world.manager.get(agent.id).lifecycle
    assert isinstance(lifecycle, Errored)
    assert lifecycle.error.code == "PROVIDER_TIMEOUT"
    assert "start_turn" in lifecycle.error.message


async def test_a_create_whose_session_never_opens_fails_with_provider_timeout_and_no_agent(
    world: World,
) -> None:
    world.provider.hold_create()  # never released
    creating = asyncio.create_task(world.create())
    await world.clock.armed_wait(TIMEOUTS.create_session_s)
    await world.clock.advance(CREATE_MS)
    with pytest.raises(ProviderTimeout):
        await creating
    agents, _ = world.manager.directory.page(ListQuery(include_archived=True))
    assert agents == []


async def test_a_close_that_hangs_is_closed_after_its_deadline_and_says_why(world: World) -> None:
    agent = await world.create()
    world.provider.session.hold_close()  # never released
    closing = asyncio.create_task(world.manager.close(agent.id))
    await world.clock.armed_wait(TIMEOUTS.close_s)
    await world.clock.advance(CLOSE_MS)
    with pytest.raises(ProviderTimeout):
        await closing
    assert isinstance(world.manager.get(agent.id).lifecycle, Closed)


async def test_within_cancels_its_work_when_its_caller_is_cancelled() -> None:
    clock = FakeClock()
    started = asyncio.Event()
    cancelled = asyncio.Event()

    async def work() -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        finally:
            cancelled.set()

    waiting = asyncio.create_task(within(clock, 10, work()))
    await started.wait()
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    await asyncio.wait_for(cancelled.wait(), 5)


async def test_a_deadline_cancels_the_late_call_and_says_which_call() -> None:
    clock = FakeClock()
    cancelled = asyncio.Event()
    times = CallTimes()

    async def hang() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            cancelled.set()

    call = asyncio.create_task(deadline(clock, 2, hang(), "interrupt", times))
    await until(lambda: clock.pending_timers == 1)
    await clock.advance(2000)
    with pytest.raises(ProviderTimeout, match="interrupt within 2 s"):
        await call
    await asyncio.wait_for(cancelled.wait(), 5)
    # The missed call is timed too, under its name.
    assert [(name, h.read().samples) for name, h in times.by_call()] == [("interrupt", 1)]


async def test_wait_for_idle_with_a_zero_timeout_leaves_nothing_unawaited(world: World) -> None:
    agent, _ = await world.started()
    status, _ = await world.manager.wait_for_idle(agent.id, 0)
    assert status is WaitStatus.TIMEOUT
    gc.collect()  # a coroutine never awaited would warn here, and warnings are errors


async def test_refusing_new_work_ends_pending_waits_with_shutting_down(world: World) -> None:
    agent, _ = await world.started()
    waiting = asyncio.create_task(world.manager.wait_for_idle(agent.id, None))
    await asyncio.sleep(0)
    world.manager.refuse_new_work()
    with pytest.raises(ShuttingDown):
        await asyncio.wait_for(waiting, 5)
    with pytest.raises(ShuttingDown):
        await world.manager.send_prompt(agent.id, PROMPT, "cm-2", IfRunning.REJECT)


# --- 2. store, then publish, never half of it ---------------------------------------------


async def test_a_row_that_cannot_be_encoded_fails_the_turn_and_stores_nothing_unpublished(
    world: World,
) -> None:
    agent, session = await world.started()

    def unencodable(event: Event) -> bool:
        return isinstance(event, RowAppended) and event.row.item == Reasoning("poison")

    world.publisher.fail_prepare = unencodable
    session.emit(
        ProviderItem("turn-1", Reasoning("poison"), "r1"),
        ProviderTurnCompleted("turn-1"),
    )
    snapshot = await world.drained(agent.id)
    assert isinstance(snapshot.lifecycle, Errored)
    assert snapshot.lifecycle.error.code == "WRITER_FAILED"
    assert await stored_rows(world, agent.id) == published_rows(world, agent.id)
    assert [e.turn_id for e in world.publisher.of_type(TurnFailed)] == ["turn-1"]
    assert world.publisher.of_type(TurnCompleted) == []  # the late terminal is dropped
    items = await world.items(agent.id)
    assert isinstance(items[-1], ErrorItem) and items[-1].code == "WRITER_FAILED"


async def test_the_agent_accepts_a_new_turn_after_a_failed_writer_step(world: World) -> None:
    agent, session = await world.started()
    world.publisher.fail_prepare = lambda e: (
        isinstance(e, RowAppended) and (e.row.item == Reasoning("poison"))
    )
    session.emit(ProviderItem("turn-1", Reasoning("poison"), "r1"))
    await world.drained(agent.id)
    await world.clock.advance(60)  # the coalescer's window: the poisoned row is flushed
    snapshot = await world.drained(agent.id)
    assert isinstance(snapshot.lifecycle, Errored)
    await world.manager.send_prompt(agent.id, PROMPT, "cm-2", IfRunning.REJECT)
    assert world.manager.get(agent.id).lifecycle == Running("turn-2")


async def test_rows_without_a_turn_id_belong_to_the_running_turn(world: World) -> None:
    agent, session = await world.started()
    session.emit(ProviderItem("", AssistantMessage("no id", "m1"), "m1"))
    session.emit(ProviderTurnCompleted("turn-1"))
    await world.drained(agent.id)
    rows = await world.rows(agent.id)
    assert [(r.item, r.turn_id) for r in rows][-1] == (AssistantMessage("no id", "m1"), "turn-1")


async def test_a_canceled_turn_leaves_a_row_saying_so(world: World) -> None:
    agent, session = await world.started()
    session.interrupt_behaviour = True
    session.on_interrupt = []
    cancel = asyncio.create_task(world.manager.cancel(agent.id))
    await world.clock.armed_wait(TIMEOUTS.settle_s)
    await world.clock.advance(round(TIMEOUTS.settle_s * 1000))
    outcome, _ = await cancel
    assert outcome is CancelOutcome.SETTLED
    last = (await world.rows(agent.id))[-1]
    assert last.turn_id == "turn-1"
    assert last.item == ErrorItem(
        "turn canceled: interrupt confirmed, turn did not end", "TURN_CANCELED"
    )


async def test_every_upsert_is_encoded_before_the_snapshot_changes(world: World) -> None:
    agent = await world.create()
    world.publisher.fail_prepare = lambda e: (
        isinstance(e, AgentUpserted) and (e.agent.title == "bad")
    )
    with pytest.raises(ValueError):
        await world.manager.update(agent.id, AgentUpdate(title="bad"))
    assert world.manager.get(agent.id).title == ""


async def test_a_huge_provider_error_is_cut_to_size_with_a_marker_everywhere_it_lands(
    world: World,
) -> None:
    agent, session = await world.started()
    session.emit(ProviderTurnFailed("turn-1", AgentError("x" * 5_000_000, "E" * 10_000)))
    snapshot = await world.drained(agent.id)
    assert isinstance(snapshot.lifecycle, Errored)
    error = snapshot.lifecycle.error
    assert len(error.message.encode()) <= MAX_ERROR_BYTES and "cut by corral" in error.message
    assert len(error.code.encode()) <= MAX_CODE_BYTES
    row = (await world.rows(agent.id))[-1]
    assert row.item == ErrorItem(error.message, error.code)
    assert world.publisher.of_type(TurnFailed)[-1].error == error


async def test_a_commit_that_fails_after_the_writer_moved_on_fails_the_turn_and_publishes_nothing(
    world: World,
) -> None:
    agent, session = await world.started()
    store = world.timeline
    pending: list[asyncio.Future[Any]] = []
    real = store.append_encoded

    def slow_append(agent_id: str, rows: Any, items: Any) -> asyncio.Future[Any]:
        if any(row.item == Reasoning("never stored") for row in rows):
            future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            pending.append(future)
            return future
        return real(agent_id, rows, items)

    store.append_encoded = slow_append  # type: ignore[method-assign]
    session.emit(ProviderItem("turn-1", Reasoning("never stored"), "r1"))
    await world.drained(agent.id)
    await world.clock.advance(60)  # the coalescer's window: the row goes to the store
    await until(lambda: bool(pending))  # its commit is out; nothing of it is published yet
    assert not any(item == Reasoning("never stored") for _, item in published_rows(world, agent.id))
    pending[0].set_exception(OSError("disk full"))
    # The window's flush did not wait for the commit: its failure is a job of its own.
    await until(lambda: isinstance(world.manager.get(agent.id).lifecycle, Errored))
    snapshot = await world.drained(agent.id)
    assert isinstance(snapshot.lifecycle, Errored)
    assert snapshot.lifecycle.error.code == "WRITER_FAILED"
    rows_now = published_rows(world, agent.id)
    assert not any(item == Reasoning("never stored") for _, item in rows_now)
    assert [seq for seq, _ in rows_now] == list(range(1, len(rows_now) + 1))
    assert isinstance(rows_now[-1][1], ErrorItem) and rows_now[-1][1].code == "WRITER_FAILED"
    assert await stored_rows(world, agent.id) == rows_now


async def test_finished_turns_stay_bounded_in_memory_and_the_durable_set_stops_a_restart(
    tmp_path: Any,
) -> None:
    from corral_server.manager.manager import AgentManager
    from corral_server.manager.turn_book import RECENT_FINISHED
    from corral_server.providers.base import ProviderTurnStarted
    from corral_server.records.memory import InMemoryFinishedTurns

    world = World(cwd=str(tmp_path))
    finished = InMemoryFinishedTurns()
    world.manager = AgentManager(
        providers={"fake": world.provider},
        timeline=world.timeline,
        publisher=world.publisher,
        clock=world.clock,
        timeouts=TIMEOUTS,
        finished=finished,
    )
    try:
        agent = await world.create()
        session = world.provider.session
        for n in range(1, RECENT_FINISHED + 6):
            session.emit(ProviderTurnStarted(f"auto-{n}"), ProviderTurnCompleted(f"auto-{n}"))
        await world.drained(agent.id)
        actor = world.manager.directory.actors[agent.id]
        assert len(actor._turns.recent_finished) == RECENT_FINISHED
        assert "auto-1" not in actor._turns.recent_finished and await finished.contains(
            agent.id, "auto-1"
        )
        mark = world.publisher.mark()
        session.emit(ProviderTurnStarted("auto-1"))  # a very late duplicate of an old turn
        snapshot = await world.drained(agent.id)
        assert snapshot.lifecycle == Idle()
        assert not any(isinstance(e, TurnStarted) for e in world.publisher.since(mark))
    finally:
        await world.manager.shutdown()


async def test_a_snapshot_never_promises_a_row_that_is_still_being_stored(world: World) -> None:
    agent, session = await world.started()
    store = world.timeline
    pending: list[tuple[asyncio.Future[Any], asyncio.Future[Any]]] = []
    real = store.append_encoded

    def held(agent_id: str, rows: Any, items: Any) -> asyncio.Future[Any]:
        """Stored at once in memory, but its commit is held until the test releases it."""
        stored = real(agent_id, rows, items)
        if not any(r.item == Reasoning("held") for r in rows):
            return stored
        commit: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        pending.append((commit, stored))
        return commit

    store.append_encoded = held  # type: ignore[method-assign]
    before = world.manager.get(agent.id).next_seq
    session.emit(ProviderItem("turn-1", Reasoning("held"), "r1"))
    await world.drained(agent.id)
    await world.clock.advance(60)  # flushed: the row is with the store, not yet committed
    await until(lambda: len(pending) == 1)
    assert world.manager.get(agent.id).next_seq == before  # not promised yet
    commit, stored = pending[0]
    commit.set_result(stored.result())
    await world.drained(agent.id)
    assert world.manager.get(agent.id).next_seq == before + 1
