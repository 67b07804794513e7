"""The agent actor through AgentManager: registration, turn ownership, staging, dedupe,
coalescing on the clock, updated_at and attention (docs/design.md)."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from corral_server.domain.agent import (
    AgentError,
    AttentionReason,
    Errored,
    Idle,
    Initializing,
    Running,
    Usage,
)
from corral_server.domain.events import (
    AgentUpserted,
    AttentionRequired,
    RowAppended,
    TurnCompleted,
    TurnFailed,
    TurnStarted,
)
from corral_server.domain.notification import NotificationPlan, NotifyKind
from corral_server.domain.timeline import (
    AssistantMessage,
    ErrorItem,
    Reasoning,
    Todo,
    TodoEntry,
    ToolCall,
    ToolCallStatus,
    UserMessage,
)
from corral_server.errors import AgentBusy
from corral_server.manager.coalescer import WINDOW_MS
from corral_server.manager.turns import IfRunning
from corral_server.providers.base import (
    ProviderItem,
    ProviderTurnCompleted,
    ProviderTurnFailed,
    ProviderTurnStarted,
)
from tests.unit.manager.harness import PROMPT, World

TODO = Todo((TodoEntry("plan"),))


def describe(world: World, mark: int = 0) -> list[str]:
    """Published events since `mark`, short: 'upsert running:turn-1', 'row 2', 'started ...'."""
    out = []
    for event in world.publisher.since(mark):
        match event:
            case AgentUpserted(agent=agent):
                lifecycle = agent.lifecycle
                state = type(lifecycle).__name__.lower()
                if isinstance(lifecycle, Running):
                    state += f":{lifecycle.active_turn_id}"
                out.append(f"upsert {state}")
            case RowAppended(row=row):
                out.append(f"row {row.seq}")
            case TurnStarted(turn_id=turn_id):
                out.append(f"started {turn_id}")
            case TurnCompleted(turn_id=turn_id):
                out.append(f"completed {turn_id}")
            case TurnFailed(turn_id=turn_id):
                out.append(f"failed {turn_id}")
            case AttentionRequired(reason=reason):
                out.append(f"attention {reason.value}")
            case _:
                out.append(type(event).__name__)
    return out


# --- registration -------------------------------------------------------------------------


async def test_a_new_agent_is_announced_initializing_then_idle_with_its_session(
    world: World,
) -> None:
    agent = await world.create(title="t", labels={"team": "core"})
    assert world.lifecycles(agent.id) == [Initializing(), Idle()]
    assert agent.lifecycle == Idle()
    assert agent.provider_session_id == "session-1"
    assert (agent.model, agent.mode) == ("fake-1", "default")  # the provider's defaults
    config = world.provider.configs[0]
    assert (config.agent_id, config.cwd) == (agent.id, world.cwd)


async def test_events_the_session_reports_while_being_created_wait_until_the_agent_is_idle(
    world: World,
) -> None:
    gate = world.provider.hold_create()
    creating = asyncio.create_task(world.create())
    await world.provider.create_entered.wait()
    world.provider.session.emit(ProviderTurnStarted("auto-1"), ProviderItem("auto-1", TODO))
    await asyncio.sleep(0)
    assert describe(world) == ["upsert initializing"]
    gate.set()
    agent = await creating
    await world.drained(agent.id)
    assert describe(world) == [
        "upsert initializing",
        "upsert idle",
        "upsert running:auto-1",
        "started auto-1",
        "row 1",
    ]


# --- foreground turns and staged events ---------------------------------------------------


async def test_a_prompt_starts_a_turn_and_records_the_user_message_first(world: World) -> None:
    agent, session = await world.started()
    assert agent.lifecycle == Running("turn-1")
    assert session.prompts == [PROMPT]
    assert world.provider.validated == [PROMPT]
    [row] = await world.rows(agent.id)
    assert row.seq == 1
    assert row.turn_id == "turn-1"
    assert row.item == UserMessage("hello", "cm-1", "cm-1")
    assert agent.next_seq == 2


async def test_a_second_foreground_prompt_is_rejected_as_busy(world: World) -> None:
    agent, session = await world.started()
    with pytest.raises(AgentBusy):
        await world.manager.send_prompt(agent.id, PROMPT, "cm-2", IfRunning.REJECT)
    assert session.calls == ["start_turn"]


async def test_rows_reported_before_start_turn_returns_land_after_turn_started_and_the_prompt(
    world: World,
) -> None:
    agent = await world.create()
    session = world.provider.session
    gate = session.hold_start()
    mark = world.publisher.mark()
    sending = asyncio.create_task(
        world.manager.send_prompt(agent.id, PROMPT, "cm-1", IfRunning.REJECT)
    )
    await session.start_entered.wait()
    done = ToolCall("c1", "bash", ToolCallStatus.COMPLETED, input={"cmd": "ls"}, output="a\nb")
    session.emit(
        ProviderTurnStarted("turn-1"),
        ProviderItem("turn-1", TODO),
        ProviderItem("turn-1", done),
    )
    await asyncio.sleep(0)
    assert world.publisher.since(mark) == []  # staged behind the running command
    gate.set()
    started = await sending
    assert started.turn_id == "turn-1"
    await world.drained(agent.id)
    assert describe(world, mark) == [
        "upsert running:turn-1",
        "started turn-1",
        "row 1",
        "row 2",
        "row 3",
    ]
    rows = await world.rows(agent.id)
    assert [(r.seq, r.turn_id) for r in rows] == [(1, "turn-1"), (2, "turn-1"), (3, "turn-1")]
    assert [r.item for r in rows] == [UserMessage("hello", "cm-1", "cm-1"), TODO, done]


async def test_the_providers_own_turn_started_for_a_foreground_turn_is_not_republished(
    world: World,
) -> None:
    agent, session = await world.started()
    session.emit(ProviderTurnStarted("turn-1"))
    await world.drained(agent.id)
    assert world.publisher.of_type(TurnStarted) == [TurnStarted(agent.id, "turn-1")]
    assert world.manager.get(agent.id).lifecycle == Running("turn-1")


async def test_a_completed_turn_makes_the_agent_idle_with_its_usage(world: World) -> None:
    agent, session = await world.started()
    usage = Usage(input_tokens=3, output_tokens=5)
    session.emit(ProviderTurnCompleted("turn-1", usage))
    done = await world.drained(agent.id)
    assert done.lifecycle == Idle()
    assert done.last_usage == usage
    assert world.publisher.of_type(TurnCompleted) == [TurnCompleted(agent.id, "turn-1", usage)]


async def test_a_failed_turn_records_an_error_row_and_errors_the_agent(world: World) -> None:
    agent, session = await world.started()
    error = AgentError("model overloaded", "OVERLOADED")
    session.emit(ProviderTurnFailed("turn-1", error))
    failed = await world.drained(agent.id)
    assert failed.lifecycle == Errored(error)
    assert failed.last_error == error
    assert (await world.items(agent.id))[-1] == ErrorItem("model overloaded", "OVERLOADED")
    assert world.publisher.of_type(TurnFailed) == [TurnFailed(agent.id, "turn-1", error)]


async def test_a_duplicate_terminal_event_for_a_finished_turn_is_dropped(world: World) -> None:
    agent, session = await world.started()
    session.emit(
        ProviderTurnCompleted("turn-1"),
        ProviderTurnCompleted("turn-1"),
        ProviderTurnFailed("turn-1", AgentError("late")),
    )
    done = await world.drained(agent.id)
    assert len(world.publisher.of_type(TurnCompleted)) == 1
    assert world.publisher.of_type(TurnFailed) == []
    assert done.lifecycle == Idle()
    assert len(world.publisher.of_type(AttentionRequired)) == 1


async def test_late_items_of_a_finished_turn_are_dropped(world: World) -> None:
    agent, session = await world.started()
    session.emit(ProviderTurnCompleted("turn-1"))
    before = await world.drained(agent.id)
    session.emit(
        ProviderItem("turn-1", AssistantMessage("late")),
        ProviderItem("turn-1", TODO),
    )
    await world.drained(agent.id)
    await world.clock.advance(WINDOW_MS)
    after = await world.drained(agent.id)
    assert len(await world.rows(agent.id)) == 1  # only the prompt
    assert after.next_seq == before.next_seq
    assert world.publisher.of_type(RowAppended)[-1].row.seq == 1


async def test_items_of_an_older_turn_are_dropped_while_a_newer_turn_runs(world: World) -> None:
    agent, session = await world.started()
    session.emit(ProviderTurnCompleted("turn-1"))
    await world.drained(agent.id)
    await world.manager.send_prompt(agent.id, PROMPT, "cm-2", IfRunning.REJECT)
    session.emit(ProviderItem("turn-1", TODO), ProviderItem("turn-2", ErrorItem("x")))
    await world.drained(agent.id)
    rows = await world.rows(agent.id)
    assert [(r.turn_id, type(r.item).__name__) for r in rows] == [
        ("turn-1", "UserMessage"),
        ("turn-2", "UserMessage"),
        ("turn-2", "ErrorItem"),
    ]


async def test_a_late_terminal_of_an_older_turn_does_not_end_the_running_turn(
    world: World,
) -> None:
    agent, session = await world.started()
    session.emit(ProviderTurnCompleted("turn-1"))
    await world.drained(agent.id)
    await world.manager.send_prompt(agent.id, PROMPT, "cm-2", IfRunning.REJECT)
    session.emit(ProviderTurnFailed("turn-1", AgentError("late")), ProviderTurnCompleted("turn-1"))
    running = await world.drained(agent.id)
    assert running.lifecycle == Running("turn-2")
    assert [e.turn_id for e in world.publisher.of_type(TurnCompleted)] == ["turn-1"]
    assert world.publisher.of_type(TurnFailed) == []


# --- autonomous turns ---------------------------------------------------------------------


async def test_an_autonomous_turn_runs_the_agent_under_the_providers_turn_id(
    world: World,
) -> None:
    agent = await world.create()
    session = world.provider.session
    session.emit(ProviderTurnStarted("auto-7"), ProviderItem("auto-7", TODO))
    running = await world.drained(agent.id)
    assert running.lifecycle == Running("auto-7")
    assert world.publisher.of_type(TurnStarted) == [TurnStarted(agent.id, "auto-7")]
    assert [(r.turn_id, r.item) for r in await world.rows(agent.id)] == [("auto-7", TODO)]
    session.emit(ProviderTurnCompleted("auto-7"))
    idle = await world.drained(agent.id)
    assert idle.lifecycle == Idle()
    assert world.publisher.of_type(TurnCompleted) == [TurnCompleted(agent.id, "auto-7")]


async def test_an_autonomous_turn_without_an_id_runs_with_an_empty_active_turn_id(
    world: World,
) -> None:
    agent = await world.create()
    session = world.provider.session
    session.emit(ProviderTurnStarted(""), ProviderItem("", TODO))
    running = await world.drained(agent.id)
    assert running.lifecycle == Running("")
    assert await world.items(agent.id) == [TODO]
    session.emit(ProviderTurnCompleted(""))
    assert (await world.drained(agent.id)).lifecycle == Idle()


async def test_a_finished_turn_id_reported_as_started_again_does_not_restart_it(
    world: World,
) -> None:
    agent, session = await world.started()
    session.emit(ProviderTurnCompleted("turn-1"), ProviderTurnStarted("turn-1"))
    done = await world.drained(agent.id)
    assert done.lifecycle == Idle()
    assert len(world.publisher.of_type(TurnStarted)) == 1


# --- coalescing on the clock --------------------------------------------------------------


async def test_a_pending_assistant_row_is_flushed_only_when_the_window_passes(
    world: World,
) -> None:
    agent, session = await world.started()
    first_ms = world.clock.now_ms()
    session.emit(ProviderItem("turn-1", AssistantMessage("Hel", "m1")))
    await world.drained(agent.id)
    await world.clock.advance(30)
    session.emit(ProviderItem("turn-1", AssistantMessage("lo", "m1")))
    await world.clock.advance(WINDOW_MS - 31)
    await world.drained(agent.id)
    assert len(await world.rows(agent.id)) == 1  # 59 ms: still pending
    await world.clock.advance(1)
    await world.drained(agent.id)
    rows = await world.rows(agent.id)
    assert [r.item for r in rows[1:]] == [AssistantMessage("Hello", "m1")]
    assert rows[1].timestamp_ms == first_ms  # the first fragment's time


async def test_rows_reported_just_before_the_terminal_are_appended_before_it(
    world: World,
) -> None:
    agent, session = await world.started()
    mark = world.publisher.mark()
    session.emit(
        ProviderItem("turn-1", Reasoning("thinking")),
        ProviderItem("turn-1", TODO),
        ProviderTurnCompleted("turn-1"),
    )
    await world.drained(agent.id)
    assert describe(world, mark)[:3] == ["row 2", "row 3", "completed turn-1"]
    assert (await world.items(agent.id))[1:] == [Reasoning("thinking"), TODO]


async def test_a_turns_terminal_flushes_its_pending_row_before_the_terminal_event(
    world: World,
) -> None:
    agent, session = await world.started()
    mark = world.publisher.mark()
    session.emit(ProviderItem("turn-1", Reasoning("thinking")), ProviderTurnCompleted("turn-1"))
    await world.drained(agent.id)
    assert describe(world, mark)[:2] == ["row 2", "completed turn-1"]
    assert (await world.items(agent.id))[1] == Reasoning("thinking")
    assert world.clock.pending_timers == 0  # the window timer was disarmed


async def test_a_failed_turns_error_row_follows_the_rows_reported_before_it(
    world: World,
) -> None:
    agent, session = await world.started()
    session.emit(ProviderItem("turn-1", TODO), ProviderTurnFailed("turn-1", AgentError("boom")))
    await world.drained(agent.id)
    assert (await world.items(agent.id))[1:] == [TODO, ErrorItem("boom")]


# --- updated_at and attention -------------------------------------------------------------


async def test_updated_at_strictly_increases_even_when_the_clock_does_not_move(
    world: World,
) -> None:
    start_ms = world.clock.now_ms()
    agent, session = await world.started()
    session.emit(ProviderTurnCompleted("turn-1"))
    await world.drained(agent.id)
    stamps = [e.agent.updated_at_ms for e in world.publisher.of_type(AgentUpserted)]
    assert len(stamps) >= 4  # initializing, idle, running, idle
    assert all(a < b for a, b in itertools.pairwise(stamps))
    assert world.clock.now_ms() == start_ms
    assert stamps[0] == start_ms


async def test_attention_is_raised_once_when_a_turn_finishes(world: World) -> None:
    agent, session = await world.started()
    assert not agent.attention.required
    session.emit(ProviderTurnCompleted("turn-1"))
    done = await world.drained(agent.id)
    assert done.attention.required
    assert done.attention.reason is AttentionReason.FINISHED
    assert done.attention.at_ms == world.clock.now_ms()
    # Nobody is present (no heartbeat): a finish is pushed (manager/presence.py).
    push = NotificationPlan(NotifyKind.PUSH)
    assert world.publisher.of_type(AttentionRequired) == [
        AttentionRequired(agent.id, AttentionReason.FINISHED, push)
    ]


async def test_attention_is_not_raised_again_while_it_is_still_required(world: World) -> None:
    agent, session = await world.started()
    session.emit(ProviderTurnCompleted("turn-1"))
    first = (await world.drained(agent.id)).attention
    await world.clock.advance(5_000)
    await world.manager.send_prompt(agent.id, PROMPT, "cm-2", IfRunning.REJECT)
    session.emit(ProviderTurnFailed("turn-2", AgentError("boom")))
    second = await world.drained(agent.id)
    assert second.attention == first
    assert len(world.publisher.of_type(AttentionRequired)) == 1


async def test_a_failed_turn_raises_error_attention(world: World) -> None:
    agent, session = await world.started()
    session.emit(ProviderTurnFailed("turn-1", AgentError("boom")))
    failed = await world.drained(agent.id)
    assert failed.attention.reason is AttentionReason.ERROR
    assert world.publisher.of_type(AttentionRequired) == [
        AttentionRequired(agent.id, AttentionReason.ERROR)
    ]
