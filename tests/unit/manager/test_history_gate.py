"""The history gate (docs/design.md#resume) where the wire cannot reach it: items a provider replays
from its history (`from_history`) while no turn runs, naming a finished turn, or looking like
an echo of the running turn's prompt. Each is stored as a row with no turn id and nothing
else happens: no turn starts or ends, no upsert, no `updated_at` change."""

from __future__ import annotations

from corral_server.domain.agent import Idle, Running
from corral_server.domain.content import prompt_text
from corral_server.domain.events import (
    AgentUpserted,
    RowAppended,
    RowUpdated,
    TurnCompleted,
    TurnStarted,
)
from corral_server.domain.timeline import AssistantMessage, UserMessage
from corral_server.providers.base import ProviderItem, ProviderTurnCompleted
from tests.unit.manager.harness import PROMPT, World


def replayed(turn_id: str, text: str, message_id: str) -> ProviderItem:
    return ProviderItem(turn_id, UserMessage(text, message_id=message_id), message_id, True)


async def test_history_while_idle_starts_no_turn_and_changes_nothing_but_the_rows(
    world: World,
) -> None:
    agent = await world.create()
    session = world.provider.session
    before = len(world.publisher.published)
    session.emit(
        replayed("", "old prompt", "m1"),
        ProviderItem("old-turn", AssistantMessage("old reply", "m2"), "m2", from_history=True),
    )
    after = await world.drained(agent.id)
    assert after.lifecycle == Idle() and after.updated_at_ms == agent.updated_at_ms
    events = [e for _, e in world.publisher.published[before:]]
    assert [type(e) for e in events] == [RowAppended, RowAppended]
    rows = await world.rows(agent.id)
    assert [(r.item, r.turn_id, r.provider_message_id) for r in rows] == [
        (UserMessage("old prompt", message_id="m1"), "", "m1"),
        (AssistantMessage("old reply", "m2"), "", "m2"),
    ]


async def test_history_naming_a_finished_turn_is_stored_not_dropped(world: World) -> None:
    agent, session = await world.started()
    session.emit(ProviderTurnCompleted("turn-1"))
    await world.drained(agent.id)
    session.emit(replayed("turn-1", "from the past", "m9"))
    after = await world.drained(agent.id)
    assert after.lifecycle == Idle()
    rows = await world.rows(agent.id)
    assert (rows[-1].item.text, rows[-1].turn_id) == ("from the past", "")  # type: ignore[union-attr]
    assert len(world.publisher.of_type(TurnStarted)) == 1
    assert len(world.publisher.of_type(TurnCompleted)) == 1


async def test_history_is_never_taken_for_an_echo_of_the_running_prompt(world: World) -> None:
    agent, session = await world.started()
    upserts = len(world.publisher.of_type(AgentUpserted))
    session.emit(replayed("turn-1", prompt_text(PROMPT), "echo-1"))
    after = await world.drained(agent.id)
    assert after.lifecycle == Running("turn-1")
    rows = await world.rows(agent.id)
    assert [r.item.text for r in rows] == [prompt_text(PROMPT)] * 2  # type: ignore[union-attr]
    assert [r.provider_message_id for r in rows] == ["", "echo-1"]  # the prompt's row unchanged
    assert not world.publisher.of_type(RowUpdated)
    assert len(world.publisher.of_type(AgentUpserted)) == upserts
