"""Creates that fail half-way leave nothing behind; id-less autonomous turns keep working;
prompts made only of blank parts are rejected."""

from __future__ import annotations

import pytest

from corral_server.domain.agent import Running
from corral_server.domain.content import TextPart
from corral_server.domain.events import AgentRemoved
from corral_server.domain.timeline import Todo, TodoEntry
from corral_server.errors import InvalidArgument
from corral_server.manager.validate import Limits, check_prompt
from corral_server.providers.base import ProviderItem, ProviderTurnCompleted, ProviderTurnStarted
from tests.unit.manager.harness import PROMPT, World

TODO = Todo((TodoEntry("write tests"),))


def test_a_prompt_of_several_blank_text_parts_is_rejected_as_empty() -> None:
    with pytest.raises(InvalidArgument):
        check_prompt((TextPart(" "), TextPart("")), Limits())


async def test_a_second_autonomous_turn_without_an_id_runs_too(world: World) -> None:
    agent = await world.create()
    session = world.provider.session
    session.emit(ProviderTurnStarted(""), ProviderTurnCompleted(""))
    await world.drained(agent.id)
    session.emit(ProviderTurnStarted(""), ProviderItem("", TODO))
    again = await world.drained(agent.id)
    assert again.lifecycle == Running("")
    assert await world.items(agent.id) == [TODO]


async def test_a_create_whose_session_fails_leaves_no_agent_behind(world: World) -> None:
    world.provider.create_error = RuntimeError("cli not found")
    with pytest.raises(RuntimeError):
        await world.create()
    assert world.manager.directory.snapshot(frozenset()) == []
    [removed] = world.publisher.of_type(AgentRemoved)
    assert removed.agent_id


async def test_a_create_retried_after_its_initial_prompt_failed_makes_no_second_agent(
    world: World,
) -> None:
    world.provider.on_create = lambda s: setattr(s, "start_error", RuntimeError("rate limited"))
    for _ in range(2):
        with pytest.raises(RuntimeError):
            await world.manager.create(world.spec(request_id="req-1", initial_prompt=PROMPT))
    assert world.manager.directory.snapshot(frozenset()) == []
    assert all(s.closed for s in world.provider.sessions)
