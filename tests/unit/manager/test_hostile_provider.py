"""Hostile provider output (docs/design.md#coalescing): whatever a provider reports (lone
surrogates, NULs, huge or deeply nested values, rows without turn ids, terminals for the wrong
turn), every stored row is published exactly once and in order, every started turn ends with exactly
one terminal event, and the agent is never left running.

The publisher encodes every event with the daemon's real encoder, so an event that cannot be
encoded fails where it would in the daemon."""

from __future__ import annotations

import asyncio
import tempfile
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from corral_server.domain.agent import AgentError, Closed
from corral_server.domain.events import RowAppended, TurnStarted, TurnTerminal
from corral_server.domain.timeline import (
    AssistantMessage,
    ErrorItem,
    JsonValue,
    Reasoning,
    TimelineItem,
    Todo,
    TodoEntry,
    ToolCall,
    ToolCallStatus,
)
from corral_server.manager.turns import IfRunning
from corral_server.providers.base import (
    ProviderEvent,
    ProviderItem,
    ProviderTurnCanceled,
    ProviderTurnCompleted,
    ProviderTurnFailed,
    ProviderTurnStarted,
)
from tests.unit.manager.harness import PROMPT, World

# Text a provider may emit: surrogates and NULs included, sometimes long.
hostile_text = st.one_of(
    st.text(max_size=20),
    st.text(alphabet=st.sampled_from(["\ud800", "\udfff", "\x00", "a", "é", "😀"]), max_size=30),
    st.builds(lambda n, c: c * n, st.integers(1000, 20_000), st.sampled_from(["x", "\ud800"])),
)


def nested(depth: int) -> JsonValue:
    value: JsonValue = "deep"
    for _ in range(depth):
        value = {"k": value}
    return value


json_values: st.SearchStrategy[JsonValue] = st.one_of(
    st.none(),
    hostile_text,
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-(2**70), 2**70),
    st.dictionaries(hostile_text, hostile_text, max_size=3),
    st.integers(1, 300).map(nested),
)

items: st.SearchStrategy[TimelineItem] = st.one_of(
    st.builds(AssistantMessage, hostile_text, st.sampled_from(["m1", "m2", ""])),
    st.builds(Reasoning, hostile_text),
    st.builds(
        ToolCall,
        st.sampled_from(["c1", "c2"]),
        hostile_text,
        st.sampled_from(list(ToolCallStatus)),
        json_values,
        json_values,
        hostile_text,
    ),
    st.builds(
        Todo, st.lists(st.builds(TodoEntry, hostile_text, st.booleans()), max_size=3).map(tuple)
    ),
)

turn_ids = st.sampled_from(["", "turn-1", "turn-2", "auto-1", "stale"])

provider_events: st.SearchStrategy[ProviderEvent] = st.one_of(
    st.builds(ProviderItem, turn_ids, items, st.sampled_from(["", "m1", "\ud800"])),
    st.builds(ProviderTurnStarted, turn_ids),
    st.builds(ProviderTurnCompleted, turn_ids),
    st.builds(ProviderTurnFailed, turn_ids, st.builds(AgentError, hostile_text, hostile_text)),
    st.builds(ProviderTurnCanceled, turn_ids, hostile_text),
)


async def _play(events: list[ProviderEvent], cwd: str) -> None:
    world = World(cwd=cwd)
    try:
        agent, session = await world.started()
        for event in events:
            session.emit(event)
            if isinstance(event, ProviderItem) and event.item == Reasoning("flush"):
                await world.clock.advance(60)
        await world.drained(agent.id)
        await world.clock.advance(60)  # the coalescer's window
        await world.drained(agent.id)
        snapshot = await world.manager.close(agent.id)
        assert isinstance(snapshot.lifecycle, Closed)
        _check(world, agent.id, await world.rows(agent.id))
    finally:
        await world.manager.shutdown()


def _check(world: World, agent_id: str, stored: list[Any]) -> None:
    published = [e.row for e in world.publisher.events if isinstance(e, RowAppended)]
    # Every stored row published exactly once, in order, with contiguous seqs.
    assert published == stored
    assert [row.seq for row in stored] == list(range(1, len(stored) + 1))
    # Every started turn has exactly one terminal event, after its start.
    started = [e.turn_id for e in world.publisher.of_type(TurnStarted)]
    ended = [e.turn_id for e in world.publisher.events if isinstance(e, TurnTerminal)]
    assert sorted(started) == sorted(ended)
    assert len(ended) == len(set(ended)) or "" in ended
    # Nothing stored carries text that cannot be encoded.
    for row in stored:
        if isinstance(row.item, ErrorItem | AssistantMessage | Reasoning):
            (row.item.text if not isinstance(row.item, ErrorItem) else row.item.message).encode()


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.lists(provider_events, max_size=12))
def test_hostile_provider_output_never_breaks_store_then_publish(
    events: list[ProviderEvent],
) -> None:
    with tempfile.TemporaryDirectory() as cwd:
        asyncio.run(_play(events, cwd))


def test_a_second_turn_after_hostile_output_starts_normally() -> None:
    async def play(cwd: str) -> None:
        world = World(cwd=cwd)
        try:
            agent, session = await world.started()
            session.emit(
                ProviderItem("", Reasoning("\ud800 and \x00"), ""),
                ProviderTurnCompleted(""),
            )
            await world.drained(agent.id)
            await world.manager.send_prompt(agent.id, PROMPT, "cm-2", IfRunning.REJECT)
            assert world.manager.get(agent.id).lifecycle.__class__.__name__ == "Running"
        finally:
            await world.manager.shutdown()

    with tempfile.TemporaryDirectory() as cwd:
        asyncio.run(play(cwd))
